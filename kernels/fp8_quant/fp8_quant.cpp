// fp8_quant contract: signature, validation, dispatch, warmup enumeration and launch.
#include "kernels/fp8_quant/fp8_quant.h"

#include <algorithm>
#include <limits>

#include "kernels/builtin.h"
#include "kernels/common/checks.h"
#include "kernels/fused_moe/fused_moe.h"
#include "warmup/domain.h"

namespace warmkey {
namespace {

constexpr std::string_view kName = "fp8_quant";
constexpr std::int64_t kMaxInt32 = std::numeric_limits<std::int32_t>::max();
constexpr std::initializer_list<DType> kValueDTypes = {DType::bf16, DType::f16, DType::f32};
constexpr std::int64_t kGroupSizes[] = {32, 64, 128};
// The row-stride classes a launch can pass: H is a multiple of G (itself one of 16), so a
// contiguous or 16-padded row is 'D' and any other padding the class "other"; never the constant
// 1 (a single row passes H, and H >= G > 1).
constexpr std::int64_t kStrideClasses[] = {16, 2};

// The a_scale dtypes of the fp8 w8a8 GEMMs fused_moe runs under c (none: no fp8 weights or no
// triton backend): the scales fp8_quant produces for them.
std::vector<KeyValue> fp8_gemm_scale_dtypes(const ModelConfig& c) {
  std::vector<KeyValue> out;
  if (!c.has_backend("triton")) return out;
  for (const FusedMoe::Gemm& g : FusedMoe::config_gemms(c)) {
    if (g.scale_dtype && std::find(out.begin(), out.end(), KeyValue{*g.scale_dtype}) == out.end())
      out.push_back(*g.scale_dtype);
  }
  return out;
}

}  // namespace

const KernelDef& Fp8Quant::kernel_def() {
  using param::in;
  using param::integer;
  using param::out;
  constexpr auto kNoSpec = Specialize::do_not_specialize;
  static const KernelDef def =
      with_pdl_wait(KernelDef{std::string(kName),
                              "fp8_quant/fp8_quant.cuh",
                              "fp8_quant_kernel",
                              {{"GROUP"}, {"BLOCK"}},
                              // x and x_stride are specialised (Triton's rules): their 'D' facts pick
                              // the vector or the scalar body, one binary each.
                              {in("x"), out("q", kNoSpec), out("scale", kNoSpec), integer("num_rows", kNoSpec),
                               integer("num_cols", kNoSpec), integer("x_stride")},
                              &kernel_sources()});
  return def;
}

bool Fp8Quant::used_by(const ModelConfig& config) const {
  // fused_moe's fp8 w8a8 GEMMs take their A operand quantised per token group (the layer plan's
  // hidden and activation quantisations); the other backends bring their own (MegaMoE:
  // megamoe_prepare) or run unquantised activations.
  return !fp8_gemm_scale_dtypes(config).empty();
}

std::vector<CompileKey> Fp8Quant::warmup_keys(const ModelConfig& config) const {
  return KeySpace(std::string(kName))
      .choices("dtype", {config.act_dtype})
      .choices("out_dtype", {DType::f8e4m3})
      .choices("scale_dtype", fp8_gemm_scale_dtypes(config))
      .choices("group_size", {config.quant_block})
      .choices("x_aligned", {true, false})
      .choices("x_stride", {kStrideClasses[0], kStrideClasses[1]})
      .enumerate();
}

void Fp8Quant::validate(const Args& a) const {
  const std::int64_t g = a.group_size;
  check_input(std::find(std::begin(kGroupSizes), std::end(kGroupSizes), g) != std::end(kGroupSizes), kName,
              "group_size", g, " is not one of 32, 64, 128");
  checks::dtype_in(kName, "x", a.x, kValueDTypes);
  checks::rank(kName, "x", a.x, 2);
  checks::element_aligned(kName, "x", a.x);
  checks::dim_in(kName, "x", a.x, 0, 0, kMaxInt32, "rows are a 32-bit count");
  checks::dim_in(kName, "x", a.x, 1, g, kMaxInt32, "at least one group, a 32-bit column count");
  const std::int64_t t = a.x.size(0), h = a.x.size(1);
  check_input(h % g == 0, kName, "x", "width ", h, " is not a multiple of group_size ", g, " (", a.x.meta(), ")");
  check_input(a.x.stride(1) == 1, kName, "x", "needs unit stride along the columns, got ", a.x.stride(1), " (",
              a.x.meta(), ")");
  const std::int64_t stride = a.x.stride(0);
  check_input(t <= 1 || (stride >= h && stride <= kMaxInt32), kName, "x", "row stride ", stride, " is not in [H = ", h,
              ", 2^31 - 1] (", a.x.meta(), ")");
  check_input(t * (h / g) <= kMaxInt32, kName, "x", t, " rows of ", h / g, " groups exceed 2^31 - 1 groups");
  checks::dtype_in(kName, "q", a.q, {DType::f8e4m3});
  checks::dense(kName, "q", a.q, 2);
  checks::dim_is(kName, "q", a.q, 0, t, "T from x");
  checks::dim_is(kName, "q", a.q, 1, h, "H from x");
  check_input(a.q.aligned16(), kName, "q", "must be 16-byte aligned (", a.q.meta(), "): a lane stores its codes whole");
  checks::dtype_in(kName, "scale", a.scale, {DType::f32, DType::ue8m0});
  checks::dense(kName, "scale", a.scale, 2);
  checks::dim_is(kName, "scale", a.scale, 0, t, "T from x");
  checks::dim_is(kName, "scale", a.scale, 1, h / g, "H / group_size from x");
}

std::int64_t Fp8Quant::row_stride(const Args& a) { return a.x.size(0) <= 1 ? a.x.size(1) : a.x.stride(0); }

CompileKey Fp8Quant::dispatch(const Args& a) const {
  return CompileKey(std::string(kName), {{"dtype", a.x.dtype()},
                                         {"out_dtype", a.q.dtype()},
                                         {"scale_dtype", a.scale.dtype()},
                                         {"group_size", a.group_size},
                                         {"x_aligned", a.x.aligned16()},
                                         {"x_stride", rep(row_stride(a))}});
}

Fp8QuantArgs Fp8Quant::warmup_inputs(const CompileKey& key) const {
  const DType dtype = key.get_dtype("dtype");
  // Two rows of one group each: G comes from the key (it is the constexpr GROUP); the row stride
  // is G for the class 16 (G % 16 == 0) and G + 1 for any other class.
  const std::int64_t g = key.get_int("group_size"), t = 2;
  const std::int64_t sizes[] = {t, g}, strides[] = {key.get_int("x_stride") == 16 ? g : g + 1, 1};
  Args a;
  a.x = Tensor::meta_strided(dtype, sizes, strides, key.get_bool("x_aligned") ? 0 : dtype_size(dtype));
  a.q = Tensor::meta(key.get_dtype("out_dtype"), {t, g});
  a.scale = Tensor::meta(key.get_dtype("scale_dtype"), {t, 1});
  a.group_size = g;
  return a;
}

LaunchSpec Fp8Quant::launch_spec(const Args& a) const {
  const std::int64_t t = a.x.size(0), h = a.x.size(1), g = a.group_size;
  const std::int64_t lanes = g / (16 / dtype_size(a.x.dtype()));  // one 16-byte vector a lane
  const std::int64_t groups = t * (h / g), per_block = kFp8QuantBlock / lanes;
  LaunchSpec s;
  s.skip = groups == 0;
  s.grid = {static_cast<unsigned>(std::max<std::int64_t>((groups + per_block - 1) / per_block, 1)), 1, 1};
  s.block = {static_cast<unsigned>(kFp8QuantBlock), 1, 1};
  s.constant("GROUP", g).constant("BLOCK", kFp8QuantBlock);
  s.ptr("x", a.x).ptr("q", a.q).ptr("scale", a.scale);
  s.integer("num_rows", t).integer("num_cols", h).integer("x_stride", row_stride(a));
  return s;
}

std::string Fp8Quant::describe(const Args& a) const {
  return str_cat("x=", a.x.meta(), " q=", a.q.meta(), " scale=", a.scale.meta(), " group_size=", a.group_size);
}

}  // namespace warmkey
