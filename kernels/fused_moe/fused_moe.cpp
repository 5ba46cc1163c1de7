// fused_moe contract: tile heuristic, tuned configs, signature, validation, dispatch, warmup
// enumeration and launch.
#include "kernels/fused_moe/fused_moe.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kernels/builtin.h"
#include "kernels/common/checks.h"
#include "kernels/common/value_classes.h"
#include "warmup/domain.h"
#include "warmup/source_set.h"

namespace warmkey {
namespace {

constexpr std::string_view kName = "fused_moe";
constexpr std::int64_t kI32Max = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kRowBytes = 128;    // one k-tile row (device/gemm.cuh)
constexpr std::int64_t kScaleGroup = 128;  // fp8 block scales: 128 x 128
constexpr std::initializer_list<DType> kOperandDTypes = {DType::bf16, DType::f16, DType::f32, DType::f8e4m3};
using expert_gemm::ceil_div;
using expert_gemm::kMaxDim;
using expert_gemm::kMaxSharedBytes;
std::int64_t block_k_of(DType d) { return kRowBytes / dtype_size(d); }
// The warp-specialised tile (device/gemm_ws.cuh): 128 x 256, 3 warpgroups, TMA, one block per tile.
using expert_gemm::kWsBlockM;
using expert_gemm::kWsBlockN;
using expert_gemm::kWsWarps;
using expert_gemm::warp_specialised;
std::int64_t shared_bytes(const FusedMoeTile& t) {
  if (warp_specialised(t)) return expert_gemm::ws_shared_bytes(t.stages, kWsBlockM + kWsBlockN);  // gemm_ws.cuh
  return t.stages * (t.block_m + t.block_n) * kRowBytes + t.block_m * 4;
}

// Why a tile cannot run, or "" (the warp layout rule of device/gemm.cuh's Tile).
std::string tile_problem(const FusedMoeTile& t, DType dtype) {
  if (const std::string p = expert_gemm::ws_shape_problem(t); !p.empty()) return p;
  if (warp_specialised(t) && dtype != DType::bf16 && dtype != DType::f16 && dtype != DType::f8e4m3)
    return str_cat("warps 12 (the warp-specialised tile) takes bf16, f16 or f8e4m3 operands, not ", dtype);
  const std::string shape =
      expert_gemm::tile_shape_problem(t, {64, 128, 256}, block_k_of(dtype),
                                      str_cat(" for ", dtype, " (one 128-byte row)"), {4, 8, 12}, !warp_specialised(t));
  if (!shape.empty()) return shape;
  if (shared_bytes(t) > kMaxSharedBytes)
    return str_cat("stages ", t.stages, " need ", shared_bytes(t), " bytes of shared memory (limit ", kMaxSharedBytes,
                   ")");
  return "";
}

FusedMoeTile make_tile(std::int64_t bm, std::int64_t bn, std::int64_t group_m, std::int64_t warps, std::int64_t stages,
                       DType dtype) {
  return {bm, bn, block_k_of(dtype), group_m, warps, stages};
}

// ---- tuned files ------------------------------------------------------------------------------

// The name under configs/ an embedded tuned file would have.
std::string embedded_name(const std::string& name_or_path) {
  return name_or_path.ends_with(".json") ? name_or_path : name_or_path + ".json";
}

std::string read_text(const std::string& name_or_path) {
  const std::string embedded = embedded_name(name_or_path);
  if (embedded_configs().contains(embedded)) return embedded_configs().text(embedded);
  std::ifstream in(name_or_path, std::ios::binary);
  if (!in)
    throw InputError(str_cat("fused_moe tuned config '", name_or_path,
                             "': neither an embedded file (configs/tuned/...) nor a readable path"));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<DType> tuned_dtype(std::string_view s) {
  if (s == "fp8_w8a8") return DType::f8e4m3;
  if (s == "bf16" || s == "f16" || s == "f32") return parse_dtype(s);
  return std::nullopt;
}

std::string_view tuned_dtype_name(DType d) { return d == DType::f8e4m3 ? "fp8_w8a8" : dtype_name(d); }

}  // namespace

std::string fused_moe_tile_problem(const FusedMoeTile& tile, DType dtype) { return tile_problem(tile, dtype); }

// ---- heuristic --------------------------------------------------------------------------------

FusedMoeTile fused_moe_tile(std::int64_t num_valid, std::int64_t num_experts, DType dtype) {
  const std::int64_t e = std::max<std::int64_t>(num_experts, 1);
  if (num_valid <= kFusedMoeEntriesPerExpertBoundaries[0] * e) return make_tile(16, 64, 1, 4, 5, dtype);
  if (num_valid <= kFusedMoeEntriesPerExpertBoundaries[1] * e) return make_tile(32, 64, 1, 4, 4, dtype);
  if (dtype == DType::f32) {
    if (num_valid <= kFusedMoeEntriesPerExpertBoundaries[2] * e) return make_tile(64, 128, 8, 4, 4, dtype);
    return make_tile(128, 128, 8, 8, 4, dtype);
  }
  // From 24 to 64 entries per expert the GEMM streams every expert's weights (bandwidth-bound): the
  // warp-specialised tile with GROUP_M 2 beat the 64-row mma.sync tile by 1.4-2.0x in fp8 and 4-12 %
  // in bf16 at T = 1,100-2,730 (H100, docs/PERFORMANCE.md), despite padding each expert to 128 rows.
  if (num_valid <= kFusedMoeEntriesPerExpertBoundaries[2] * e)
    return make_tile(kWsBlockM, kWsBlockN, 2, kWsWarps, 4, dtype);
  return make_tile(kWsBlockM, kWsBlockN, 8, kWsWarps, 4, dtype);  // warp-specialised: TMA + wgmma on sm_90a
}

// ---- tuned configurations ---------------------------------------------------------------------

std::string FusedMoeTuning::shape_name(std::int64_t n, std::int64_t k, DType dtype) {
  return str_cat("N=", n, ",K=", k, ",dtype=", tuned_dtype_name(dtype));
}

FusedMoeTuning FusedMoeTuning::parse(std::string_view json_text, std::string_view source) {
  using nlohmann::json;
  auto fail = [&](std::string_view where, const auto&... detail) {
    throw InputError(str_cat("fused_moe tuned config '", source, "': ", where, ": ", detail...));
  };
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::parse_error& e) {
    fail("file", "invalid JSON: ", e.what());
  }
  if (!j.is_object()) fail("file", "expected a JSON object");
  FusedMoeTuning t;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "device" && it.key() != "shapes") fail(it.key(), "unknown field (known: device, shapes)");
  }
  if (!j.contains("device") || !j["device"].is_string()) fail("device", "missing or not a string");
  t.device_ = j["device"].get<std::string>();
  if (!j.contains("shapes") || !j["shapes"].is_object() || j["shapes"].empty())
    fail("shapes", "missing, not an object, or empty");
  for (auto s = j["shapes"].begin(); s != j["shapes"].end(); ++s) {
    const std::string& shape = s.key();
    long long n = 0, k = 0;
    char dtype_buf[32] = {};
    if (std::sscanf(shape.c_str(), "N=%lld,K=%lld,dtype=%31s", &n, &k, dtype_buf) != 3)
      fail(shape, "shape key must read N=<n>,K=<k>,dtype=<bf16|f16|f32|fp8_w8a8>");
    const std::optional<DType> dtype = tuned_dtype(dtype_buf);
    if (!dtype) fail(shape, "dtype '", dtype_buf, "' is not one of bf16, f16, f32, fp8_w8a8");
    if (n < 8 || n > kMaxDim || n % 8 != 0) fail(shape, "N=", n, " must be a multiple of 8 in [8, ", kMaxDim, "]");
    if (k < kScaleGroup || k > kMaxDim || k % kScaleGroup != 0)
      fail(shape, "K=", k, " must be a multiple of 128 in [128, ", kMaxDim, "]");
    if (shape != shape_name(n, k, *dtype)) fail(shape, "write the key as ", shape_name(n, k, *dtype));
    if (!s->is_object() || s->empty()) fail(shape, "expected a non-empty object of token-count buckets");
    Buckets buckets;
    for (auto b = s->begin(); b != s->end(); ++b) {
      const std::string where = str_cat(shape, ", bucket \"", b.key(), "\"");
      std::size_t used = 0;
      long long tokens = 0;
      try {
        tokens = std::stoll(b.key(), &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != b.key().size() || tokens < 1) fail(where, "bucket keys are positive token counts");
      if (!b->is_object()) fail(where, "expected an object of tile fields");
      static const char* kFields[] = {"BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K",
                                      "GROUP_SIZE_M", "num_warps",    "num_stages"};
      std::int64_t v[6] = {};
      for (auto f = b->begin(); f != b->end(); ++f) {
        if (std::find_if(std::begin(kFields), std::end(kFields), [&](const char* x) { return f.key() == x; }) ==
            std::end(kFields))
          fail(where, "unknown field '", f.key(), "'");
      }
      for (int i = 0; i < 6; ++i) {
        if (!b->contains(kFields[i]) || !(*b)[kFields[i]].is_number_integer())
          fail(where, "field '", kFields[i], "' missing or not an integer");
        v[i] = (*b)[kFields[i]].get<std::int64_t>();
      }
      const FusedMoeTile tile{v[0], v[1], v[2], v[3], v[4], v[5]};
      if (const std::string p = tile_problem(tile, *dtype); !p.empty()) fail(where, p);
      buckets.emplace(tokens, tile);
    }
    t.shapes_.emplace(Shape{n, k, *dtype}, std::move(buckets));
  }
  return t;
}

FusedMoeTuning FusedMoeTuning::load(const std::string& name_or_path) {
  return parse(read_text(name_or_path), name_or_path);
}

std::shared_ptr<const FusedMoeTuning> FusedMoeTuning::load_shared(const std::string& name_or_path) {
  // NOTES: warmup_keys() asks for the config's file on every call (the fuzz harness: thousands of
  // configs), and parsing it was 7 % of fused_moe's fuzzing time. An embedded file cannot change,
  // so its name is its identity; a path is read again and compared with the text it was parsed from.
  struct Parsed {
    std::string text;  // empty for an embedded file
    std::shared_ptr<const FusedMoeTuning> tuning;
  };
  static std::mutex mu;
  static std::map<std::string, Parsed, std::less<>> parsed;
  const std::string embedded = embedded_name(name_or_path);
  const bool is_embedded = embedded_configs().contains(embedded);
  std::string text = is_embedded ? std::string() : read_text(name_or_path);
  {
    const std::lock_guard<std::mutex> lock(mu);
    if (auto it = parsed.find(name_or_path); it != parsed.end() && it->second.text == text) return it->second.tuning;
  }
  auto tuning = std::make_shared<const FusedMoeTuning>(
      parse(is_embedded ? embedded_configs().text(embedded) : text, name_or_path));  // throws outside the lock
  const std::lock_guard<std::mutex> lock(mu);
  parsed.insert_or_assign(name_or_path, Parsed{std::move(text), tuning});
  return tuning;
}

const FusedMoeTuning::Buckets* FusedMoeTuning::buckets(std::int64_t n, std::int64_t k, DType dtype) const {
  auto it = shapes_.find(Shape{n, k, dtype});
  return it == shapes_.end() ? nullptr : &it->second;
}

std::optional<FusedMoeTile> FusedMoeTuning::tile_for(std::int64_t num_tokens, std::int64_t n, std::int64_t k,
                                                     DType dtype) const {
  const Buckets* b = buckets(n, k, dtype);
  if (b == nullptr) return std::nullopt;
  return tile_in(*b, num_tokens);
}

FusedMoeTile FusedMoeTuning::tile_in(const Buckets& b, std::int64_t num_tokens) {
  auto hi = b.lower_bound(num_tokens);  // first bucket >= T
  if (hi == b.end()) return std::prev(hi)->second;
  if (hi == b.begin() || hi->first == num_tokens) return hi->second;
  auto lo = std::prev(hi);
  return num_tokens - lo->first <= hi->first - num_tokens ? lo->second : hi->second;  // ties to the smaller
}

std::vector<std::int64_t> FusedMoeTuning::boundaries(std::int64_t n, std::int64_t k, DType dtype) const {
  std::vector<std::int64_t> out;
  const Buckets* b = buckets(n, k, dtype);
  if (b == nullptr) return out;
  for (auto it = b->begin(); std::next(it) != b->end(); ++it) {
    out.push_back(it->first);                               // an exact bucket
    out.push_back((it->first + std::next(it)->first) / 2);  // the last T that still picks it
  }
  if (!b->empty()) out.push_back(b->rbegin()->first);
  return out;
}

// ---- the contract -----------------------------------------------------------------------------

const KernelDef& FusedMoe::kernel_def() {
  using param::in;
  using param::integer;
  using param::out;
  constexpr auto kNoSpec = Specialize::do_not_specialize;
  constexpr auto kNoAlign = Specialize::do_not_specialize_on_alignment;
  // N, K, top_k and mul_routed_weight are key fields but, for bf16/f16/f32 operands, no template
  // parameters: N, K and top_k are run-time arguments (the constexprs N, K, TOP_K are 0; as in
  // Triton's fused_moe, whose constexprs are the tile only; the k-loop was a run-time loop
  // already, device/gemm.cuh), and topk_weights is null when absent (the epilogue tests it). The
  // two GEMMs of a layer share a tile's binary: dsv4-flash 10 -> 5. fp8 keys of the mma.sync
  // tiles keep N, K and TOP_K as constexprs (fused_moe.cuh: run-time values cost 7 % in their
  // scaled main loop); fp8's warp-specialised tile reads them at run time like bf16's. `naive` is
  // no template parameter either: the layout tensors are null in the naive layout (tested per
  // block), so the naive and sorted 16-row tiles share a binary (dsv4-flash 5 -> 4).
  static const KernelDef def = with_pdl_wait(
      KernelDef{std::string(kName), "fused_moe/fused_moe.cuh", "fused_moe_kernel", expert_gemm::tile_constexpr_params(),
                expert_gemm::sorted_gemm_params(
                    {in("a", kNoAlign), in("b"), out("c", kNoAlign), in("bias", kNoSpec), in("a_scale", kNoSpec),
                     in("b_scale", kNoSpec)},
                    {integer("stride_am", kNoSpec), integer("stride_be", kNoSpec), integer("stride_bn", kNoSpec)},
                    expert_gemm::NaiveLayout::run_time, {param::tensor_map("b_map")}),
                &kernel_sources()});
  return def;
}

FusedMoeTile FusedMoe::tile_of(const Args& a) {
  if (a.tile) return *a.tile;
  return fused_moe_tile(a.a.size(0) * a.top_k, a.b.size(0), a.a.dtype());
}

std::vector<FusedMoe::Gemm> FusedMoe::config_gemms(const ModelConfig& c) {
  std::vector<Gemm> out;
  auto both = [&](DType dtype, std::optional<DType> scale) {
    out.push_back(
        {2 * c.moe_intermediate_size, c.hidden_size, c.num_experts_per_tok, false, dtype, c.act_dtype, scale});
    out.push_back({c.hidden_size, c.moe_intermediate_size, 1, true, dtype, c.act_dtype, scale});
  };
  const auto& formats = c.expert_weight_formats;
  if (std::find(formats.begin(), formats.end(), "bf16") != formats.end()) both(c.act_dtype, std::nullopt);
  if (std::find(formats.begin(), formats.end(), "fp8") != formats.end()) both(DType::f8e4m3, c.fp8_scale_dtype);
  return out;
}

bool FusedMoe::used_by(const ModelConfig& config) const {
  // The Triton-style grouped-GEMM backend, with unquantised (activation-dtype) or fp8 w8a8 weights.
  return config.has_backend("triton") && !config_gemms(config).empty();
}

FusedMoe::WarmupPlan FusedMoe::warmup_plan(const ModelConfig& config) {
  const std::int64_t e_local = config.num_local_experts(), k_route = config.num_experts_per_tok;
  std::shared_ptr<const FusedMoeTuning> tuning;
  if (!config.fused_moe_tuned_config.empty()) tuning = FusedMoeTuning::load_shared(config.fused_moe_tuned_config);

  WarmupPlan plan{config.moe_expert_bias, config.index_dtypes, {}};
  const std::vector<std::int64_t> untuned_cuts = expert_gemm::layout_cuts(config, &fused_moe_token_boundaries);
  for (const Gemm& g : config_gemms(config)) {
    // NOTES: the tuned file's shape is looked up once per GEMM, not once per bucket (this runs for
    // every fuzzed config).
    const FusedMoeTuning::Buckets* tuned = tuning ? tuning->buckets(g.n, g.k, g.dtype) : nullptr;
    std::vector<std::int64_t> cuts = untuned_cuts;
    if (tuned) {
      const std::vector<std::int64_t> t = tuning->boundaries(g.n, g.k, g.dtype);
      cuts.insert(cuts.end(), t.begin(), t.end());
    }
    plan.parts.push_back({g, expert_gemm::layout_buckets(config, std::move(cuts), [&](std::int64_t lo) {
                            return tuned ? FusedMoeTuning::tile_in(*tuned, lo)
                                         : fused_moe_tile(lo * k_route, e_local, g.dtype);
                          })});
  }
  return plan;
}

std::vector<CompileKey> FusedMoe::keys_of(const WarmupPlan& plan) {
  std::vector<CompileKey> keys;
  for (const WarmupPart& part : plan.parts) {
    const Gemm& g = part.gemm;
    KeySpace space{std::string(kName)};
    space.choices("dtype", {g.dtype}).choices("out_dtype", {g.out_dtype});
    space.choices("quant", {std::string(g.scale_dtype ? "fp8_block" : "none")});
    if (g.scale_dtype) space.choices("scale_dtype", {*g.scale_dtype});
    space.choices("n", {g.n})
        .choices("k", {g.k})
        .choices("top_k", {g.top_k})
        .choices("mul_routed_weight", {g.mul_routed_weight})
        .choices("has_bias", {plan.has_bias});
    if (plan.has_bias) space.choices("bias_dtype", {g.out_dtype});  // the engine's biases: the output dtype
    expert_gemm::zip_layout_rows(space, part.buckets, plan.index_dtypes);
    std::vector<CompileKey> part_keys = space.enumerate();
    keys.insert(keys.end(), std::make_move_iterator(part_keys.begin()), std::make_move_iterator(part_keys.end()));
  }
  return dedup(std::move(keys));
}

std::vector<CompileKey> FusedMoe::warmup_keys(const ModelConfig& config) const { return keys_of(warmup_plan(config)); }

void FusedMoe::validate(const Args& a) const {
  // a
  expert_gemm::validate_activations(kName, a.a, kOperandDTypes, kScaleGroup, "K is bounded");
  const DType dtype = a.a.dtype();
  const std::int64_t row16 = 16 / dtype_size(dtype);
  const std::int64_t m = a.a.size(0), k = a.a.size(1);
  expert_gemm::validate_top_k(kName, m, a.top_k);
  const std::int64_t num_valid = m * a.top_k;

  // b
  checks::dtype_in(kName, "b", a.b, {dtype});
  checks::rank(kName, "b", a.b, 3);
  const std::int64_t e = a.b.size(0), n = a.b.size(1);
  checks::dim_in(kName, "b", a.b, 0, 1, kI32Max, "experts");
  checks::dim_in(kName, "b", a.b, 1, 8, kMaxDim, "N is bounded");
  checks::dim_is(kName, "b", a.b, 2, k, "K from a");
  check_input(n % 8 == 0, kName, "b", "N = ", n, " (", a.b.meta(), ") is not a multiple of 8");
  check_input(a.b.aligned16(), kName, "b", "expert weights must be 16-byte aligned (", a.b.meta(), ")");
  check_input(a.b.stride(2) == 1 && a.b.stride(1) >= k && a.b.stride(1) % row16 == 0 &&
                  a.b.stride(0) >= n * a.b.stride(1) && a.b.stride(0) % row16 == 0 && a.b.stride(0) <= kI32Max,
              kName, "b", "strides (", a.b.meta(),
              ") must be dense along K, multiples of 16 bytes, non-overlapping and fit i32");

  expert_gemm::validate_output(kName, a.c, num_valid, n);

  // fp8 scales
  const bool fp8 = dtype == DType::f8e4m3;
  const checks::ScaleDim a_lead[] = {{m, "M from a"}};
  checks::block_scales(kName, a.a_scale, a.b_scale, fp8, a_lead, e, n, k);

  expert_gemm::validate_bias_and_weights(kName, a.bias, a.topk_weights, num_valid, e, n);

  // the tile
  const FusedMoeTile tile = tile_of(a);
  if (const std::string p = tile_problem(tile, dtype); !p.empty()) fail_input(kName, "tile", p);

  expert_gemm::validate_layout(kName, a, num_valid, e, tile);
}

CompileKey FusedMoe::dispatch(const Args& a) const {
  const FusedMoeTile tile = tile_of(a);
  const std::int64_t num_valid = a.a.size(0) * a.top_k;
  std::vector<CompileKey::Field> f{{"dtype", a.a.dtype()}, {"out_dtype", a.c.dtype()}};
  f.emplace_back("quant", std::string(a.a_scale ? "fp8_block" : "none"));
  if (a.a_scale) f.emplace_back("scale_dtype", a.a_scale->dtype());
  expert_gemm::add_gemm_fields(f, a, a.b.size(1), a.b.size(2), num_valid, tile);
  return CompileKey(std::string(kName), std::move(f));
}

FusedMoeArgs FusedMoe::warmup_inputs(const CompileKey& key) const {
  const DType dtype = key.get_dtype("dtype");
  const std::int64_t n = key.get_int("n"), k = key.get_int("k"), top_k = key.get_int("top_k");
  const FusedMoeTile tile = expert_gemm::tile_of_key(key);
  const expert_gemm::WarmupRows rows = expert_gemm::warmup_rows(kName, key, top_k, tile.block_m);
  constexpr std::int64_t kExperts = 1;  // any count works: num_experts is not specialised

  Args a;
  a.a = Tensor::meta(dtype, {rows.m, k});
  a.b = Tensor::meta(dtype, {kExperts, n, k});
  if (key.get_string("quant") == "fp8_block") {
    const DType sd = key.get_dtype("scale_dtype");
    a.a_scale = Tensor::meta(sd, {rows.m, k / kScaleGroup});
    a.b_scale = Tensor::meta(sd, {kExperts, ceil_div(n, kScaleGroup), k / kScaleGroup});
  }
  expert_gemm::set_warmup_sorted_args(a, key, rows, n, top_k, kExperts, tile);
  return a;
}

LaunchSpec FusedMoe::launch_spec(const Args& a) const {
  const FusedMoeTile tile = tile_of(a);
  const std::int64_t n = a.b.size(1), k = a.b.size(2);
  const std::int64_t num_valid = a.a.size(0) * a.top_k;
  LaunchSpec s = expert_gemm::sorted_launch(a, num_valid, n, tile, shared_bytes(tile));
  std::optional<TensorMapDesc> b_map;
  if (warp_specialised(tile)) b_map = expert_gemm::ws_b_map(a.b, dtype_size(a.a.dtype()));
  // Else read at run time (0). NOTES: the warp-specialised tile's k loop waits on a barrier per
  // k-tile and is never unrolled, and N and TOP_K reach its tile set-up only (an n-block bound, a
  // division per row per tile), so fp8's W13 and W2 share its binary (dsv4-flash-fp8: one program
  // of about 0.85 s of NVRTC CPU on the 2-core CPU machine fewer).
  const bool sizes_constexpr = a.a.dtype() == DType::f8e4m3 && !warp_specialised(tile);
  expert_gemm::add_tile_constexprs(s, n, k, a.top_k, tile, sizes_constexpr);
  s.ptr("a", a.a)
      .ptr("b", a.b)
      .ptr("c", a.c)
      .ptr("bias", a.bias)
      .ptr("a_scale", a.a_scale)
      .ptr("b_scale", a.b_scale)
      .ptr("topk_weights", a.topk_weights);
  expert_gemm::add_layout_launch_args(s, a, num_valid, a.b.size(0));
  s.integer("stride_am", a.a.stride(0)).integer("stride_be", a.b.stride(0)).integer("stride_bn", a.b.stride(1));
  expert_gemm::add_output_launch_args(s, a, n, k, tile);
  s.tensor_map("b_map", b_map);
  return s;
}

std::string FusedMoe::describe(const Args& a) const {
  using expert_gemm::describe_optional;
  return str_cat("a=", a.a.meta(), " b=", a.b.meta(), " c=", a.c.meta(), " bias=", describe_optional(a.bias),
                 " a_scale=", describe_optional(a.a_scale), " b_scale=", describe_optional(a.b_scale),
                 " topk_weights=", describe_optional(a.topk_weights), expert_gemm::describe_layout(a),
                 expert_gemm::describe_tile(a.tile));
}

}  // namespace warmkey
