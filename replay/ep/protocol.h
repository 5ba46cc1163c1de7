// The expert-parallel MoE layer protocol, rank by rank, on host data: where experts live (EPLB
// replicas placed on ranks), routing, what each rank sends to each other rank (token rows in fp8
// with packed UE8M0 scales, local ids, weights), the receive layout, the combine, and the runtime
// Args of every EP kernel launch a rank makes. Both the CPU simulator (simulator.h: the
// all-to-alls as buffer copies, the kernels as their references) and a multi-process GPU runner
// (`warmkey ep`: NCCL all-to-alls, the kernels through the JIT runtime) drive these functions, so
// both produce the same routing, counts and layouts. docs/EP.md describes the protocol.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/deepep_globalize/deepep_globalize.h"
#include "kernels/ep_gather/ep_gather.h"
#include "kernels/ep_scatter/ep_scatter.h"
#include "reference/types.h"
#include "spaces/serving.h"
#include "warmup/model_config.h"

namespace warmkey::replay::ep {

using Bytes = std::vector<std::uint8_t>;

// Where the experts live. Physical expert p (logical expert p2l[p]) lives on rank p / local;
// logical expert e has replica_count[e] physical copies l2p[e * slots + r] (r < replica_count[e]):
// replica 0 is physical e, the extra replicas take the ids L, L + 1, ... in logical order (the
// EPLB state decides how many each logical expert has).
struct Placement {
  std::int64_t ranks = 1;
  std::int64_t logical = 0;
  std::int64_t physical = 0;
  std::int64_t local = 0;                   // physical experts per rank
  std::int64_t slots = 1;                   // columns of l2p (the config's eplb_max_slots)
  std::vector<std::int64_t> replica_count;  // [logical]
  std::vector<std::int64_t> l2p;            // [logical, slots], -1 past a count
  std::vector<std::int64_t> p2l;            // [physical]

  // Throws InputError (kernel "ep") when ranks does not divide the physical experts or the EPLB
  // state does not match the configuration.
  static Placement make(const ModelConfig& config, const spaces::EplbState& eplb, std::int64_t ranks);
  std::int64_t rank_of(std::int64_t phys) const { return phys / local; }
  std::int64_t first_expert(std::int64_t rank) const { return rank * local; }
};

// One rank's share of a layer step: its tokens' hidden rows, router ids (logical) and weights.
struct RankInput {
  reference::RowMatrixXf x;    // [T, H]
  reference::IndexVector ids;  // [T * K] logical expert ids (distinct per token)
  reference::RowMatrixXf w;    // [T, K] routed weights
};

// DeepEP's fp8 cast of the dispatched rows: per row and 128-wide block b, e = the UE8M0 exponent
// of amax / 448 rounded up (reference::megamoe_group_exponent over the block), q = e4m3 bits of
// x * 2^(127 - e); the exponents packed four blocks per int (block 4i + g in byte g).
struct QuantRows {
  std::int64_t rows = 0, hidden = 0, scale_cols = 0;
  Bytes q;                           // [rows, hidden] e4m3 bits
  std::vector<std::uint32_t> scale;  // [rows, scale_cols] packed exponents
};
QuantRows quantize_rows(const reference::RowMatrixXf& x);
// x[r, c] = e4m3(q[r, c]) * 2^(e - 127).
reference::RowMatrixXf dequantize_rows(const Bytes& q, const std::vector<std::uint32_t>& scale, std::int64_t rows,
                                       std::int64_t hidden);

// Routing of one rank's tokens: physical ids through the EPLB map (reference::eplb_map: the replica
// chosen by a hash of the token's row), [T * K].
reference::IndexVector route(const Placement& p, const RankInput& in, std::int64_t top_k);

// What rank `src` sends to rank `dst` in the dispatch: the tokens with at least one expert on dst,
// in token order; per token its fp8 row, packed scales, ids local to dst (-1 for the slots whose
// expert lives elsewhere) and all K weights.
struct DispatchMessage {
  std::vector<std::int64_t> tokens;  // sender-side token indices, in send order
  Bytes payload;                     // rows of row_bytes(H, K): [q | scales | ids i64 | weights f32]
};
std::int64_t row_bytes(std::int64_t hidden, std::int64_t top_k);
// The dispatch of one rank: one message per destination rank (tokens_per_rank[d] = its rows).
std::vector<DispatchMessage> plan_dispatch(const Placement& p, const RankInput& in, const reference::IndexVector& phys,
                                           std::int64_t top_k);

// A rank's receive buffers after the dispatch all-to-all: n_alloc rows allocated for the worst
// case (every rank sends every token), num_recv of them filled, in source-rank order.
struct RecvBuffers {
  std::int64_t n_alloc = 0, num_recv = 0, hidden = 0, top_k = 0, scale_cols = 0;
  std::vector<std::int32_t> recv_prefix;  // [ranks] inclusive prefix sum of the rows of each source
  Bytes recv_x;                           // [n_alloc, hidden] e4m3 bits
  std::vector<std::uint32_t> recv_scale;  // [n_alloc, scale_cols]
  reference::IndexVector recv_topk_idx;   // [n_alloc * K] local ids; rows past num_recv hold stale ids
  reference::RowMatrixXf recv_weights;    // [n_alloc, K]
};
// Stale rows past num_recv hold the id 0 (an earlier step's): globalize must mask them.
RecvBuffers receive_dispatch(const std::vector<DispatchMessage>& from_rank, std::int64_t n_alloc, std::int64_t hidden,
                             std::int64_t top_k);

// Rows every rank allocates for a step whose ranks run at most max_rows tokens each.
std::int64_t recv_rows(std::int64_t max_rows, std::int64_t ranks);

// Tokens each expert of the rank received (the valid slots per local expert), from the globalized
// ids: the counts DeepEP hands to ep_scatter.
std::vector<std::int32_t> local_expert_counts(const reference::IndexVector& global_ids, const Placement& p,
                                              std::int64_t rank);

// The combine all-to-all's send side on rank `rank`: partial[n_alloc, H] (ep_gather's output)
// split back by source rank (rows [prefix[s - 1], prefix[s]) go to rank s, in receive order).
std::vector<reference::RowMatrixXf> split_combine(const reference::RowMatrixXf& partial,
                                                  const std::vector<std::int32_t>& recv_prefix);
// The combine's receive side on a sender: out[t] = sum over destination ranks d in rank order of
// the partial row d returned for t (tokens in the order plan_dispatch sent them).
reference::RowMatrixXf combine(const std::vector<DispatchMessage>& sent,
                               const std::vector<reference::RowMatrixXf>& back, std::int64_t tokens,
                               std::int64_t hidden);

// The runtime Args (meta tensors, the engine's buffers' shapes, dtypes and alignment) of the EP
// kernel launches one rank makes in a step: what the rank's warmup must have covered.
struct RankLaunches {
  DeepepGlobalizeArgs globalize;
  EpScatterArgs scatter;
  EpGatherArgs gather;
};
RankLaunches rank_launches(const ModelConfig& config, const Placement& p, std::int64_t rank, std::int64_t n_alloc);

}  // namespace warmkey::replay::ep
