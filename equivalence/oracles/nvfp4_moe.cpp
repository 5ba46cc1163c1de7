// Oracle of nvfp4_moe: pairs the kernel with reference/nvfp4_moe. Seeded inputs in moe_align's
// sorted layout (or the naive one), the reference and the device run.
#include "equivalence/oracles/nvfp4_moe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "equivalence/oracles/fused_moe.h"
#include "reference/nvfp4_moe.h"
#include "warmup/binder.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey::equivalence {
namespace {

namespace ec = expert_gemm_case;

reference::RowMatrixXu8 as_bytes(const HostTensor& t, std::int64_t rows, std::int64_t cols) {
  reference::RowMatrixXu8 m(rows, cols);
  std::copy(t.bytes.begin(), t.bytes.begin() + rows * cols, m.data());
  return m;
}

// An e4m3 scale byte: mostly normal scales in [2^-4, 4), some subnormal codes and some zeros (a
// zero scale makes its 16 elements zero), never NaN.
std::uint8_t scale_code(spaces::CaseRng& rng) {
  const double u = rng.uniform(0, 1);
  if (u < 0.02) return 0;                                                 // +0
  if (u < 0.06) return static_cast<std::uint8_t>(rng.uniform_int(1, 7));  // subnormal m * 2^-9
  const std::int64_t e = rng.uniform_int(3, 8), m = rng.uniform_int(0, 7);
  return static_cast<std::uint8_t>((e << 3) | m);
}

}  // namespace

double nvfp4_moe_rel_tolerance(DType dtype, DType out_dtype) { return fused_moe_rel_tolerance(dtype, out_dtype); }

FusedMoeTile Nvfp4MoeCase::effective_tile() const { return tile ? *tile : nvfp4_moe_tile(num_valid(), num_experts, k); }

std::string Nvfp4MoeCase::label() const { return ec::label(*this, "", effective_tile()); }

NumericCase make_nvfp4_moe_case(const Nvfp4MoeCase& p, bool reference) {
  spaces::CaseRng rng(p.seed);
  const std::int64_t e = p.num_experts;
  const FusedMoeTile tile = p.effective_tile();
  NumericCase c = ec::begin("nvfp4_moe", p, p.label());
  const std::vector<std::int64_t> ids = ec::draw_routing(rng, p);

  HostTensor a = ec::activations(rng, p, 1.0);
  // Every byte value: all 16 codes in both nibbles, -0 included.
  HostTensor b = HostTensor::zeros("b", DType::u8, {e, p.n, p.k / 2});
  for (auto& byte : b.bytes) byte = static_cast<std::uint8_t>(rng.uniform_int(0, 255));
  HostTensor bs = HostTensor::zeros("b_scale", DType::f8e4m3, {e, p.n, p.k / 16});
  for (auto& byte : bs.bytes) byte = scale_code(rng);
  HostTensor gs = HostTensor::zeros("b_global_scale", DType::f32, {e});
  for (std::int64_t i = 0; i < e; ++i) gs.set_float(i, static_cast<float>(std::exp2(rng.uniform(-3, 3))));
  c.inputs.push_back(std::move(a));
  c.inputs.push_back(std::move(b));
  c.inputs.push_back(std::move(bs));
  c.inputs.push_back(std::move(gs));
  ec::add_bias(c, rng, p);
  ec::add_weights(c, rng, p);
  ec::add_layout_and_output(c, p, ids, tile);
  if (reference) nvfp4_moe_reference(c);
  return c;
}

void nvfp4_moe_reference(NumericCase& c) {
  const HostTensor& a = c.input("a");
  const HostTensor& b = c.input("b");
  const HostTensor& out = c.expected_output("c");
  const std::int64_t m = a.shape.at(0), k = a.shape.at(1), e = b.shape.at(0), n = b.shape.at(1);
  const std::int64_t nv = out.shape.at(0);
  const reference::RowMatrixXf am = ec::as_matrix(a, m, k);
  const reference::RowMatrixXu8 bm = as_bytes(b, e * n, k / 2), sm = as_bytes(c.input("b_scale"), e * n, k / 16);
  const HostTensor& gs_t = c.input("b_global_scale");
  Eigen::VectorXf gs(e);
  for (std::int64_t i = 0; i < e; ++i) gs(i) = gs_t.get_float(i);
  const ec::ReferenceInputs in = ec::reference_inputs(c, e, n, nv);
  reference::RowMatrixXf result = reference::RowMatrixXf::Constant(nv, n, std::numeric_limits<float>::quiet_NaN());
  auto opt = [](const auto& o) {
    using Ref = Eigen::Ref<const std::decay_t<decltype(*o)>>;
    return o ? std::optional<Ref>(Ref(*o)) : std::optional<Ref>();
  };
  reference::nvfp4_moe(am, bm, sm, gs, result, opt(in.bias), opt(in.weights), opt(in.sorted), in.expert_ids, in.post,
                       c.scalars.at("top_k"), c.scalars.at("layout_block_m"), out.dtype);
  ec::finish_reference(c, result, nvfp4_moe_rel_tolerance(a.dtype, out.dtype));
}

Nvfp4MoeArgs Nvfp4MoeOracle::device_args(const NumericCase& c, DeviceTensors& dev) {
  Nvfp4MoeArgs a;
  ec::set_device_args(a, c, dev);
  a.b = dev.upload(c.input("b"));
  a.b_scale = dev.upload(c.input("b_scale"));
  a.b_global_scale = dev.upload(c.input("b_global_scale"));
  return a;
}

std::vector<HostTensor> Nvfp4MoeOracle::run_on_device(const NumericCase& c, JitRuntime& rt) const {
  DeviceTensors dev(rt.device());
  Nvfp4MoeArgs a = device_args(c, dev);
  Nvfp4Moe{}(a, rt);
  rt.device().synchronize();
  return {dev.download("c")};
}

std::vector<HostTensor> run_nvfp4_moe(const NumericCase& c, JitRuntime& rt) {
  return Nvfp4MoeOracle{}.run_on_device(c, rt);
}

void Nvfp4MoeOracle::compute_reference(NumericCase& c) const { nvfp4_moe_reference(c); }

Nvfp4MoeCase Nvfp4MoeOracle::case_of(const Nvfp4MoeArgs& a, const ModelConfig& config, std::uint64_t seed) {
  Nvfp4MoeCase p;
  const FusedMoeTile tile = Nvfp4Moe::tile_of(a);
  ec::set_case_of(p, a, config, seed, "nvfp4_moe", a.a.size(1), tile);
  const std::int64_t weight_elems = p.num_experts * p.n * p.k, macs = p.num_valid() * p.n * p.k;
  if (weight_elems <= kNvfp4MoeCaseMaxWeightElems && macs <= kNvfp4MoeCaseMaxMacs) return p;

  // Shrink to a case of the same JitKey: the tile pinned, fewer experts and entries with the
  // value classes of num_valid and EM kept.
  Nvfp4MoeCase q = p;
  q.tile = tile;
  const std::int64_t experts =
      std::clamp<std::int64_t>(kNvfp4MoeCaseMaxWeightElems / (p.n * p.k), q.route_k, p.num_experts);
  ec::shrink(q, p, "nvfp4_moe", experts, kNvfp4MoeCaseMaxMacs, ec::ShrinkFallback::smallest,
             a.sorted_token_ids ? a.sorted_token_ids->size(0) : 0);
  return q;
}

NumericCase Nvfp4MoeOracle::make_case(const Nvfp4MoeArgs& a, const ModelConfig& config, std::uint64_t seed,
                                      bool reference) {
  return make_nvfp4_moe_case(case_of(a, config, seed), reference);
}

}  // namespace warmkey::equivalence
