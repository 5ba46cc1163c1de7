// Oracle of fused_moe: pairs the kernel with reference/fused_moe. Seeded inputs in moe_align's
// sorted layout (or the naive one), the reference and the device run.
#include "equivalence/oracles/fused_moe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "reference/fused_moe.h"
#include "warmup/binder.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey::equivalence {

namespace ec = expert_gemm_case;

double fused_moe_rel_tolerance(DType dtype, DType out_dtype, bool wgmma) {
  if (dtype == DType::f32) return 0x1.0p-8;  // tf32 operands
  if (out_dtype == DType::bf16) return 0x1.0p-7;
  // Hopper's fp8 wgmma keeps about 14 bits of its running sum (DeepSeek-V3 technical report,
  // arXiv:2412.19437, section 3.3.2), promoted to fp32 once per 128-deep k-block here: the error
  // follows the partial sums, not the result. An H100 run of a 256-deep W13 case with fp32 output
  // was off by up to 1.3e-3 of max(|want|, half the rms).
  if (dtype == DType::f8e4m3 && wgmma) return 0x1.0p-8;
  return out_dtype == DType::f16 ? 0x1.0p-9 : 0x1.0p-12;  // fp32 out: accumulation order only
}

FusedMoeTile FusedMoeCase::effective_tile() const {
  return tile ? *tile : fused_moe_tile(num_valid(), num_experts, dtype);
}

std::string FusedMoeCase::label() const {
  return ec::label(*this, scale_dtype ? str_cat(" scales=", dtype_name(*scale_dtype)) : std::string(),
                   effective_tile());
}

NumericCase make_fused_moe_case(const FusedMoeCase& p, bool reference) {
  spaces::CaseRng rng(p.seed);
  const std::int64_t e = p.num_experts;
  const FusedMoeTile tile = p.effective_tile();
  const bool fp8 = p.dtype == DType::f8e4m3;
  NumericCase c = ec::begin("fused_moe", p, p.label());
  const std::vector<std::int64_t> ids = ec::draw_routing(rng, p);

  const double range = fp8 ? 240.0 : 1.0;  // fp8 values span most of e4m3's range
  HostTensor a = ec::activations(rng, p, range);
  HostTensor b = HostTensor::zeros("b", p.dtype, {e, p.n, p.k});
  fill_uniform(rng, b, -range, range);
  c.inputs.push_back(std::move(a));
  c.inputs.push_back(std::move(b));
  ec::add_bias(c, rng, p);
  if (fp8) {
    const DType sd = p.scale_dtype.value_or(DType::f32);
    HostTensor as = HostTensor::zeros("a_scale", sd, {p.a_rows(), p.k / 128});
    HostTensor bs = HostTensor::zeros("b_scale", sd, {e, (p.n + 127) / 128, p.k / 128});
    ec::fill_block_scales(rng, as);
    ec::fill_block_scales(rng, bs);
    c.inputs.push_back(std::move(as));
    c.inputs.push_back(std::move(bs));
  }
  ec::add_weights(c, rng, p);
  ec::add_layout_and_output(c, p, ids, tile);
  if (reference) fused_moe_reference(c);
  return c;
}

void fused_moe_reference(NumericCase& c) {
  const HostTensor& a = c.input("a");
  const HostTensor& b = c.input("b");
  const HostTensor& out = c.expected_output("c");
  const std::int64_t m = a.shape.at(0), k = a.shape.at(1), e = b.shape.at(0), n = b.shape.at(1);
  const std::int64_t nv = out.shape.at(0);
  const reference::RowMatrixXf am = ec::as_matrix(a, m, k), bm = ec::as_matrix(b, e * n, k);
  std::optional<reference::RowMatrixXf> as, bs;
  if (const HostTensor* t = c.find_input("a_scale")) as = ec::block_scales(*t, m, k / 128);
  if (const HostTensor* t = c.find_input("b_scale")) bs = ec::block_scales(*t, e * ((n + 127) / 128), k / 128);
  const ec::ReferenceInputs in = ec::reference_inputs(c, e, n, nv);
  reference::RowMatrixXf result = reference::RowMatrixXf::Constant(nv, n, std::numeric_limits<float>::quiet_NaN());
  auto opt = [](const auto& o) {
    using Ref = Eigen::Ref<const std::decay_t<decltype(*o)>>;
    return o ? std::optional<Ref>(Ref(*o)) : std::optional<Ref>();
  };
  reference::fused_moe(am, bm, result, opt(in.bias), opt(as), opt(bs), opt(in.weights), opt(in.sorted), in.expert_ids,
                       in.post, c.scalars.at("top_k"), c.scalars.at("layout_block_m"), out.dtype);
  // The tile the launch takes: the pinned one, or the heuristic's for num_valid entries (nv rows).
  const FusedMoeTile tile = ec::pinned_tile(c).value_or(fused_moe_tile(nv, e, a.dtype));
  ec::finish_reference(c, result, fused_moe_rel_tolerance(a.dtype, out.dtype, expert_gemm::warp_specialised(tile)));
}

FusedMoeArgs FusedMoeOracle::device_args(const NumericCase& c, DeviceTensors& dev) {
  FusedMoeArgs a;
  ec::set_device_args(a, c, dev);
  a.b = dev.upload(c.input("b"));
  if (const HostTensor* t = c.find_input("a_scale")) a.a_scale = dev.upload(*t);
  if (const HostTensor* t = c.find_input("b_scale")) a.b_scale = dev.upload(*t);
  return a;
}

std::vector<HostTensor> FusedMoeOracle::run_on_device(const NumericCase& c, JitRuntime& rt) const {
  DeviceTensors dev(rt.device());
  FusedMoeArgs a = device_args(c, dev);
  FusedMoe{}(a, rt);
  rt.device().synchronize();
  return {dev.download("c")};
}

std::vector<HostTensor> run_fused_moe(const NumericCase& c, JitRuntime& rt) {
  return FusedMoeOracle{}.run_on_device(c, rt);
}

void FusedMoeOracle::compute_reference(NumericCase& c) const { fused_moe_reference(c); }

FusedMoeCase FusedMoeOracle::case_of(const FusedMoeArgs& a, const ModelConfig& config, std::uint64_t seed) {
  FusedMoeCase p;
  const FusedMoeTile tile = FusedMoe::tile_of(a);
  ec::set_case_of(p, a, config, seed, "fused_moe", a.b.size(2), tile);
  if (a.a_scale) p.scale_dtype = a.a_scale->dtype();
  const std::int64_t weight_bytes = p.num_experts * p.n * p.k * dtype_size(p.dtype), macs = p.num_valid() * p.n * p.k;
  if (weight_bytes <= kFusedMoeCaseMaxWeightBytes && macs <= kFusedMoeCaseMaxMacs) return p;

  // Shrink to a case of the same JitKey: the tile pinned, fewer experts and entries with the
  // value classes of num_valid and EM kept.
  FusedMoeCase q = p;
  q.tile = tile;
  const std::int64_t experts = std::clamp<std::int64_t>(kFusedMoeCaseMaxWeightBytes / (p.n * p.k * dtype_size(p.dtype)),
                                                        q.route_k, p.num_experts);
  ec::shrink(q, p, "fused_moe", experts, kFusedMoeCaseMaxMacs, ec::ShrinkFallback::largest,
             a.sorted_token_ids ? a.sorted_token_ids->size(0) : 0);
  return q;
}

NumericCase FusedMoeOracle::make_case(const FusedMoeArgs& a, const ModelConfig& config, std::uint64_t seed,
                                      bool reference) {
  return make_fused_moe_case(case_of(a, config, seed), reference);
}

}  // namespace warmkey::equivalence
