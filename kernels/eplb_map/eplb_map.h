// eplb_map contract: logical -> physical expert ids (replica chosen by a row hash) with load recording.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "warmup/contract.h"
#include "warmup/tensor.h"

namespace warmkey {

class EplbMap;  // the contract (below): EplbMapArgs::Contract

struct EplbMapArgs {
  using Contract = EplbMap;  // validates, dispatches and launches these Args

  Tensor ids;            // [T, K] i32 | i64, contiguous: logical expert ids (-1 and others outside [0, L) map to -1)
  Tensor replica_count;  // [L] i64, contiguous: replicas of each logical expert
  Tensor l2p;            // [L, slots] i64, contiguous: replica r of expert e is physical l2p[e, r]
  Tensor record;         // [1] i32: load recording is on when the device value is non-zero
  Tensor load;           // [P] i32, contiguous: load[p] += entries mapped to p (in/out)
  Tensor out;            // [T, K], the dtype of ids, contiguous (may be ids itself): physical ids
  std::int64_t max_replicas = 1;             // the most replicas any expert has (host-side EPLB state), <= slots
  std::optional<std::int64_t> num_unpadded;  // only entries of rows < num_unpadded are recorded
};

// The ids dtypes EPLB sees under a config: the routing index dtypes that are signed (i32, i64);
// a config whose routing produces only u32 hands EPLB i32 ids (u32 never reaches it).
std::vector<DType> eplb_map_ids_dtypes(const ModelConfig& config);
// Threads per block: 128 for numel <= 1024 (decode), else 512.
std::int64_t eplb_map_block_size(std::int64_t numel);
// The numel the heuristic compares against (`numel <= b`): warmup enumerates both sides.
inline constexpr std::int64_t kEplbMapNumelBoundaries[] = {1024};
// Entries each thread maps (EPLB_MAP_ITEMS) and the largest map counted in shared memory
// (EPLB_MAP_SHARED_BINS) in eplb_map.cuh.
inline constexpr std::int64_t kEplbMapItems = 4;
inline constexpr std::int64_t kEplbMapSharedBins = 4096;

// CompileKey fields, in order:
//   has_num_unpadded       num_unpadded given (HAS_NUM_UNPADDED)
//   num_logical            rep(L)
//   slots                  rep(slots), the map's columns
//   num_physical           rep(P)
//   ids_dtype              dtype of ids and out
//   block_size             eplb_map_block_size(numel) (BLOCK_SIZE)
// numel, top_k and num_unpadded are do_not_specialize (width only, always i32: validation bounds
// them); every pointer is read or written element by element (gathers through the map), so
// do_not_specialize_on_alignment: no alignment reaches the key. The maps are i64 (never i32).
// numel == 0 launches nothing.
class EplbMap : public Contract<EplbMapArgs> {
 public:
  static const KernelDef& kernel_def();
  const KernelDef& def() const override { return kernel_def(); }

  bool used_by(const ModelConfig& config) const override;
  std::vector<CompileKey> warmup_keys(const ModelConfig& config) const override;

  void validate(const Args& args) const override;
  CompileKey dispatch(const Args& args) const override;
  Args warmup_inputs(const CompileKey& key) const override;
  LaunchSpec launch_spec(const Args& args) const override;
  std::string describe(const Args& args) const override;
};

}  // namespace warmkey
