// Reference of ep_scatter: the expert-contiguous layout of received rows, in a deterministic order.
#pragma once

#include <cstdint>
#include <vector>

#include "reference/types.h"

namespace warmkey::reference {

struct EpScatterResult {
  std::vector<std::int32_t> expert_start;    // [E_local]
  std::vector<std::int32_t> expert_counter;  // [E_local]: valid slots seen per expert
  std::vector<std::uint8_t> output;          // [M, H] bytes; rows nobody writes stay 0
  std::vector<std::uint32_t> output_scale;   // 4-byte words: [M, SC] (f32) or [SC, M] (packed)
  std::vector<std::int32_t> m_indices;       // [M]
  std::vector<std::int32_t> output_index;    // [N, K]
};

// x: [N, H] bytes (fp8 rows), scale: [N, SC] 4-byte words (f32 or packed UE8M0 ints, copied as
// bits), topk: [N, K] global ids, counts: [E_local]. aligned[e] = ceil(cnt[e] / align_m) * align_m,
// start = exclusive prefix sum of aligned; m_indices[start[e] .. start[e] + cnt[e]) = e, the rest
// -1. Slots in (token, slot) order: valid when id >= 0 and e = id - first_expert is in
// [0, E_local); the i-th valid slot of expert e (from 0) goes to start[e] + i when i < cnt[e]
// and that row is below M, else it records -1 and copies nothing. The GPU's order inside an
// expert differs (atomics): compare through the recorded indices.
EpScatterResult ep_scatter(const std::vector<std::uint8_t>& x, std::int64_t hidden,
                           const std::vector<std::uint32_t>& scale, std::int64_t scale_cols, bool packed,
                           const Eigen::Ref<const IndexVector>& topk, std::int64_t top_k,
                           const std::vector<std::int32_t>& counts, std::int64_t first_expert, std::int64_t out_rows,
                           std::int64_t align_m);

}  // namespace warmkey::reference
