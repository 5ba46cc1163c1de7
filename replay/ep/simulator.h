// The CPU simulator of the expert-parallel MoE layer: N ranks in one process, the dispatch and
// combine all-to-alls as buffer copies between the ranks' messages, every kernel step as its
// Eigen reference (eplb_map routing, deepep_globalize, ep_scatter, the expert GEMMs and SwiGLU
// as fused_moe and swiglu_limit, ep_gather), driven by the shared protocol (protocol.h). It checks
// what a multi-GPU run must satisfy without a GPU: the distributed output equals the
// single-process composition of the same references, and every EP kernel launch a rank makes
// binds to a key that rank's warmup listed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference/ep_scatter.h"
#include "replay/ep/protocol.h"

namespace warmkey::replay::ep {

// The routed experts' weights, per logical expert (replicas share them). Each expert's values come
// from a generator seeded by (seed, expert), so any subset can be made without the rest (at
// dsv4-flash sizes all 256 experts are 26 GB of floats): `experts` lists the logical experts held,
// in order (empty: all of them, expert e at position e).
struct ExpertWeights {
  std::int64_t hidden = 0, inter = 0;
  std::vector<std::int64_t> experts;  // logical ids held (empty: every expert)
  reference::RowMatrixXf w13;         // [held * 2I, H]: gate rows then up rows of each expert
  reference::RowMatrixXf w2;          // [held * H, I]
  // The position of logical expert e in w13 / w2 (-1 stays -1); throws Error for one not held.
  std::int64_t position(std::int64_t logical) const;
};
ExpertWeights make_weights(const ModelConfig& config, std::uint64_t seed);
// The weights of `experts` only (the same values make_weights gives those experts).
ExpertWeights make_expert_weights(const ModelConfig& config, std::uint64_t seed, std::vector<std::int64_t> experts);

// act[r] = swiglu_limit(W13[e_r] a[r]) for each row r with logical expert e_r >= 0 (else 0),
// through reference::fused_moe (naive layout, one row a block) and reference::swiglu_limit, in f32.
reference::RowMatrixXf expert_act(const ExpertWeights& w, const reference::RowMatrixXf& a,
                                  const reference::IndexVector& logical, double limit);
// y[r] = W2[e_r] (swiglu_limit(W13[e_r] a[r])) for each row r with logical expert e_r >= 0 (else
// 0): expert_act, then W2 through reference::fused_moe, all in f32. Row-independent: a row's
// result does not depend on the rows beside it.
reference::RowMatrixXf expert_mlp(const ExpertWeights& w, const reference::RowMatrixXf& a,
                                  const reference::IndexVector& logical, double limit);

// Seeded tokens for each rank: hidden rows uniform in [-2, 2), K distinct logical experts per token,
// weights uniform in [0.05, 1).
std::vector<RankInput> make_inputs(const ModelConfig& config, const std::vector<std::int64_t>& tokens_per_rank,
                                   std::uint64_t seed);

struct RankTrace {
  std::vector<std::int64_t> tokens_to_rank;  // rows this rank sent to each rank in the dispatch
  RecvBuffers recv;                          // after the dispatch all-to-all
  reference::IndexVector global_ids;         // after deepep_globalize
  std::vector<std::int32_t> counts;          // per local expert
  reference::EpScatterResult layout;         // ep_scatter
  reference::RowMatrixXf expert_out;         // the expert GEMMs' rows [M, H] (ep_gather's input)
  RankLaunches launches;                     // the EP kernel launches of the step
};

struct Simulation {
  std::vector<reference::RowMatrixXf> out;  // per rank [T_r, H]
  std::vector<RankTrace> ranks;
  std::int64_t n_alloc = 0;
};
// The three per-rank phases of a step, between the all-to-alls. The simulator runs them for every
// rank in one process; the multi-process runner (launcher.h) runs one rank's per process.
// Dispatch send: route and pack the rank's tokens, one message per destination rank.
std::vector<DispatchMessage> rank_dispatch(const ModelConfig& config, const Placement& p, const RankInput& in);
// Between the all-to-alls, up to the expert GEMMs: the received messages (one per source rank)
// through globalize, the counts and scatter (filling trace's recv, launches, global_ids, counts and
// layout); returns the scattered rows dequantised [M, H] (the expert GEMMs' input) and the logical
// expert of each (-1 for padding rows).
struct ScatteredRows {
  reference::RowMatrixXf a;
  reference::IndexVector logical;
};
ScatteredRows rank_receive(const ModelConfig& config, const Placement& p, std::int64_t rank,
                           const std::vector<DispatchMessage>& inbox, std::int64_t n_alloc, RankTrace& trace);
// Between the all-to-alls: rank_receive, the expert GEMMs and gather; the partial rows to return to
// each source rank.
std::vector<reference::RowMatrixXf> rank_experts(const ModelConfig& config, const Placement& p, const ExpertWeights& w,
                                                 std::int64_t rank, const std::vector<DispatchMessage>& inbox,
                                                 std::int64_t n_alloc, RankTrace* trace);
// Combine receive: the rank's output rows from the replies of every rank (one per destination).
reference::RowMatrixXf rank_combine(const ModelConfig& config, const std::vector<DispatchMessage>& sent,
                                    const std::vector<reference::RowMatrixXf>& replies, std::int64_t tokens);

// One layer step on every rank. config.ep_size is the rank count.
Simulation simulate(const ModelConfig& config, const Placement& p, const ExpertWeights& w,
                    const std::vector<RankInput>& in);

// The single-process layer: each token's K expert outputs (the same routing, fp8 cast and expert
// references) summed with its routed weights in slot order; bound[t, c] = sum of |w y| (the scale
// of the rounding differences a different summation order can make).
struct ReferenceLayer {
  std::vector<reference::RowMatrixXf> out, bound;
};
ReferenceLayer reference_layer(const ModelConfig& config, const Placement& p, const ExpertWeights& w,
                               const std::vector<RankInput>& in);

// The single-process layer on a sample of each rank's tokens (rows[r]: ascending token indices of
// rank r), with the weights of only the experts those tokens route to (make_expert_weights with
// `weight_seed`): what a device run is compared with when the whole reference is too dear (the
// reference layer at dsv4-flash sizes is minutes of CPU). sigma[t, c] is the whole-layer check's
// error scale (reference::MoeLayerOutput::sigma): the square root of the sum of the squared terms
// of the W2 sums, times their routed weights.
struct SampledReference {
  std::vector<std::vector<std::int64_t>> rows;
  std::vector<reference::RowMatrixXf> out, bound, sigma;  // per rank [rows, H]
};
SampledReference reference_rows(const ModelConfig& config, const Placement& p, std::uint64_t weight_seed,
                                const std::vector<RankInput>& in, const std::vector<std::vector<std::int64_t>>& rows);
// n token indices of [0, tokens) spread evenly, first and last included (n <= 0 or n >= tokens: all).
std::vector<std::int64_t> sample_tokens(std::int64_t tokens, std::int64_t n);

// Outputs whose expert GEMMs ran on a device (the activation dtype's intermediates) against the
// sampled reference, with the whole-layer check's tolerance (reference::moe_layer_tolerance of the
// config's activation dtype) plus one rounding u of the bound for each rank's partial sum, rounded
// to the activation dtype before the combine adds them.
struct DeviceComparison {
  std::int64_t checked = 0;
  double worst = 0;  // largest |got - want| / tolerance
  std::vector<std::string> problems;
};
DeviceComparison compare_sampled(const ModelConfig& config, const std::vector<reference::RowMatrixXf>& out,
                                 const SampledReference& r);

// Everything that differs between a simulation and the reference layer, one line each (empty:
// equal within 4 K ulps of fp32 relative to the bound, the summation-order difference).
std::vector<std::string> compare_layers(const Simulation& s, const ReferenceLayer& r, std::int64_t top_k);

// Per rank: validates each EP launch and checks that its binary is one that the rank's warmup of
// `config` compiles (the rank's own warmup: warmup_keys(config) bound through warmup_inputs).
// One line per launch that fails, naming the rank, kernel and key.
std::vector<std::string> check_launch_keys(const ModelConfig& config, const Simulation& s);

// The protocol's invariants, one line per violation: the dispatch counts (rows sent to each rank
// add up to what it received; a token goes to a rank exactly when one of its experts lives there),
// the receive prefix sums, and the layouts (every valid slot recorded once, in its expert's rows).
std::vector<std::string> check_protocol(const Placement& p, const std::vector<RankInput>& in, const Simulation& s,
                                        std::int64_t top_k);

}  // namespace warmkey::replay::ep
