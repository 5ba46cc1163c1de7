// dsv4_topk contract: signature, validation, dispatch, warmup enumeration and launch.
#include "kernels/dsv4_topk/dsv4_topk.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/builtin.h"
#include "kernels/common/checks.h"
#include "warmup/domain.h"

namespace warmkey {
namespace {

constexpr std::string_view kName = "dsv4_topk";
constexpr std::int64_t kMaxInt32 = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kWarmupTokens = 1;  // T is not specialised: any count on the key's side of the threshold

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// The smallest positive sentinel id of the key's value class (a representative is a member of its
// own class; the i64 classes are out of reach, the vocabulary fits i32).
std::int64_t sentinel_for(const CompileKey& key) {
  const std::int64_t want = key.get_int("sentinel_lo");
  for (std::int64_t v : class_points(1, kMaxInt32 - kDsv4SentinelCount)) {
    if (rep(v) == want) return v;
  }
  fail_input(kName, "sentinel_lo", "no positive sentinel id inside an i32 vocabulary has value class ", want, " (", key,
             ")");
}

void validate_vector(const Tensor& t, std::string_view field, std::int64_t experts) {
  checks::dtype_in(kName, field, t, {DType::f32});
  checks::dense(kName, field, t, 1);
  checks::dim_is(kName, field, t, 0, experts, "E from logits");
}

}  // namespace

std::int64_t dsv4_topk_block_n(std::int64_t num_experts) {
  std::int64_t n = 1;
  while (n < num_experts) n *= 2;
  return n;
}

bool dsv4_topk_has_vl(const Dsv4TopkArgs& a) { return a.bias_vl.has_value() && a.sentinel_lo > 0; }

bool dsv4_topk_row_per_thread(std::int64_t num_tokens, std::int64_t num_experts, std::int64_t top_k) {
  return num_tokens >= kDsv4TopkRowPerThreadTokens && num_experts % kDsv4TopkThreadExpertStep == 0 &&
         top_k <= kDsv4TopkThreadMaxTopK;
}

std::int64_t dsv4_topk_thread_smem_bytes(std::int64_t num_experts, std::int64_t rows) {
  // RowsLayout: two chunk buffers [rows][36], the group bounds [E / G][rows] (G = 8 up to 512
  // experts, else 16), bias and bias_vl [E + 4] each, a flag per row; floats.
  const std::int64_t groups = num_experts / (num_experts <= 512 ? 8 : 16);
  return static_cast<std::int64_t>(sizeof(float)) * (rows * (2 * 36 + groups + 1) + 2 * (num_experts + 4));
}

std::vector<DType> routing_index_dtypes(const ModelConfig& config) {
  std::vector<DType> out = config.index_dtypes;
  if (config.has_backend("megamoe") && std::find(out.begin(), out.end(), DType::i64) == out.end())
    out.push_back(DType::i64);  // a validated config already lists it; a hand-built one may not
  return out;
}

const KernelDef& Dsv4Topk::kernel_def() {
  using param::floating;
  using param::in;
  using param::in_or_null;
  using param::integer;
  using param::out;
  constexpr auto kNoSpec = Specialize::do_not_specialize;
  constexpr auto kNoAlign = Specialize::do_not_specialize_on_alignment;
  static const KernelDef def = with_pdl_wait(
      KernelDef{std::string(kName),
                "dsv4_topk/dsv4_topk.cuh",
                "dsv4_topk_kernel",
                // has_padding is a key field but no template parameter: every binary checks t < num_unpadded
                // (num_tokens when no count is given, so the check never fires): dsv4-flash 14 -> 7 compiles.
                // THREAD_ROWS: 0 for one warp per row, else the rows (threads) of a thread-per-row block.
                {{"NUM_EXPERTS"}, {"BLOCK_N"}, {"TOP_K"}, {"RENORMALIZE"}, {"THREAD_ROWS"}},
                // logits: the staging loop tests the row start's alignment at run time (dsv4_topk.cuh), so
                // logits_aligned is a CompileKey field that no JitKey needs (it replaces the conditional fold
                // of hash-only keys, whose rows never stage): dsv4-flash 7 -> 4 compiles.
                // bias, bias_vl, input_ids and tid2eid: null at run time when absent, and sentinel_lo a
                // run-time value, so has_vl and has_hash are CompileKey fields that no JitKey needs (the
                // device code tests the pointers): dsv4-flash 8 -> 2 compiles, one per path.
                {in("logits", kNoAlign), in_or_null("bias", DType::f32, kNoAlign),
                 in_or_null("bias_vl", DType::f32, kNoAlign), in_or_null("input_ids", DType::i32, kNoAlign),
                 in_or_null("tid2eid", DType::i32, kNoAlign), out("weights", kNoAlign), out("ids", kNoAlign),
                 integer("num_tokens", kNoSpec), integer("logits_stride", kNoSpec), integer("sentinel_lo", kNoSpec),
                 integer("vocab_size", kNoSpec), integer("num_unpadded", kNoSpec), floating("routed_scaling_factor")},
                &kernel_sources()});
  return def;
}

bool Dsv4Topk::used_by(const ModelConfig& config) const {
  // The router of every MoE layer of a sqrt-softplus model (hash layers included).
  return config.scoring_func == "sqrtsoftplus";
}

std::vector<CompileKey> Dsv4Topk::warmup_keys(const ModelConfig& config) const {
  const std::vector<DType> dtypes = routing_index_dtypes(config);
  // Vision configs serve image rows (VL on) and text-only steps (the engine passes no bias_vl).
  std::vector<KeyValue> vl = {false};
  if (config.vision) vl.push_back(true);
  std::vector<KeyValue> hash = {false};
  if (config.num_hash_layers > 0) hash.push_back(true);
  const std::int64_t sentinel = rep(config.image_sentinel_lo);
  // Both paths where a batch can reach the threshold (prefill), else one warp per row only.
  std::vector<KeyValue> row_per_thread = {false};
  if (dsv4_topk_row_per_thread(config.max_num_batched_tokens, config.n_routed_experts, config.num_experts_per_tok))
    row_per_thread.push_back(true);

  return KeySpace(std::string(kName))
      .choices("num_experts", {config.n_routed_experts})
      .derive("block_n", [](const CompileKey& k) { return dsv4_topk_block_n(k.get_int("num_experts")); })
      .choices("top_k", {config.num_experts_per_tok})
      .choices("ids_dtype", {dtypes.begin(), dtypes.end()})
      .choices("has_vl", vl)
      .derive("sentinel_lo", [sentinel](const CompileKey& k) { return k.get_bool("has_vl") ? sentinel : 0; })
      .choices("has_hash", hash)
      // Padding rows appear whenever a step is padded (CUDA graphs, DP): both are served.
      .choices("has_padding", {false, true})
      .choices("renormalize", {config.norm_topk_prob})
      // PDL is the caller's choice per launch (the card and the stream decide): both are served.
      .choices("launch_pdl", {false, true})
      .choices("logits_aligned", {true, false})
      .choices("row_per_thread", row_per_thread)
      .enumerate();
}

void Dsv4Topk::validate(const Args& a) const {
  checks::dtype_in(kName, "logits", a.logits, {DType::f32});
  checks::rank(kName, "logits", a.logits, 2);
  checks::element_aligned(kName, "logits", a.logits);
  const std::int64_t t = a.logits.size(0), e = a.logits.size(1);
  checks::dim_in(kName, "logits", a.logits, 0, 0, kMaxInt32, "T is an i32 kernel argument");
  checks::dim_in(kName, "logits", a.logits, 1, 1, kDsv4MaxExperts, "a warp covers at most 1024 experts");
  check_input(e == 1 || a.logits.stride(1) == 1, kName, "logits", "needs unit stride along the experts, got ",
              a.logits.meta());
  const std::int64_t row_stride = a.logits.stride(0);
  check_input(t <= 1 || (row_stride >= e && row_stride <= kMaxInt32), kName, "logits", "row stride ", row_stride,
              " must be in [E = ", e, ", 2^31) (", a.logits.meta(), ")");

  checks::dtype_in(kName, "weights", a.weights, {DType::f32});
  checks::dense(kName, "weights", a.weights, 2);
  checks::dim_is(kName, "weights", a.weights, 0, t, "T from logits");
  const std::int64_t k = a.weights.size(1);
  check_input(k >= 1 && k <= e, kName, "top_k", "top-k ", k, " (weights' second dim) must be in [1, E = ", e,
              "]: it exceeds the number of experts");
  check_input(k <= kDsv4MaxTopK, kName, "top_k", "top-k ", k, " exceeds ", kDsv4MaxTopK, " (one slot per lane)");
  checks::dtype_in(kName, "ids", a.ids, {DType::i32, DType::u32, DType::i64});
  checks::dense(kName, "ids", a.ids, 2);
  checks::dim_is(kName, "ids", a.ids, 0, t, "T from logits");
  checks::dim_is(kName, "ids", a.ids, 1, k, "top-k from weights");

  check_input(a.vocab_size >= 1 && a.vocab_size <= kMaxInt32, kName, "vocab_size", "vocabulary ", a.vocab_size,
              " must be in [1, 2^31)");
  check_input(a.sentinel_lo == 0 || (a.sentinel_lo > 0 && a.sentinel_lo + kDsv4SentinelCount <= a.vocab_size), kName,
              "sentinel_lo", "image-sentinel window [", a.sentinel_lo, ", ", a.sentinel_lo + kDsv4SentinelCount,
              ") is outside the vocabulary [0, ", a.vocab_size, ")");
  check_input(a.tid2eid.has_value() || a.bias.has_value(), kName, "bias",
              "the correction bias is required without hash routing (tid2eid)");
  if (a.bias) validate_vector(*a.bias, "bias", e);
  if (a.bias_vl) validate_vector(*a.bias_vl, "bias_vl", e);
  const bool needs_ids = dsv4_topk_has_vl(a) || a.tid2eid.has_value();
  check_input(!needs_ids || a.input_ids.has_value(), kName, "input_ids", "token ids are required with ",
              a.tid2eid ? "hash routing (tid2eid)" : "VL (bias_vl and sentinel_lo > 0)");
  if (a.input_ids) {
    checks::dtype_in(kName, "input_ids", *a.input_ids, {DType::i32});
    checks::dense(kName, "input_ids", *a.input_ids, 1);
    checks::dim_is(kName, "input_ids", *a.input_ids, 0, t, "T from logits");
  }
  if (a.tid2eid) {
    checks::dtype_in(kName, "tid2eid", *a.tid2eid, {DType::i32});
    checks::dense(kName, "tid2eid", *a.tid2eid, 2);
    checks::dim_is(kName, "tid2eid", *a.tid2eid, 0, a.vocab_size, "vocab_size");
    checks::dim_is(kName, "tid2eid", *a.tid2eid, 1, k, "top-k from weights");
  }
  if (a.num_unpadded) {
    check_input(*a.num_unpadded >= 0 && *a.num_unpadded <= t, kName, "num_unpadded", "count ", *a.num_unpadded,
                " must be in [0, T = ", t, "]");
  }
  check_input(std::isfinite(a.routed_scaling_factor), kName, "routed_scaling_factor", "must be finite, got ",
              a.routed_scaling_factor);
}

CompileKey Dsv4Topk::dispatch(const Args& a) const {
  // Field order as warmup_keys declares it.
  const std::int64_t e = a.logits.size(1);
  const bool vl = dsv4_topk_has_vl(a);
  return CompileKey(std::string(kName),
                    {{"num_experts", e},
                     {"block_n", dsv4_topk_block_n(e)},
                     {"top_k", a.weights.size(1)},
                     {"ids_dtype", a.ids.dtype()},
                     {"has_vl", vl},
                     {"sentinel_lo", vl ? rep(a.sentinel_lo) : 0},
                     {"has_hash", a.tid2eid.has_value()},
                     {"has_padding", a.num_unpadded.has_value()},
                     {"renormalize", a.renormalize},
                     {"launch_pdl", a.launch_pdl},
                     {"logits_aligned", a.logits.aligned16()},
                     {"row_per_thread", dsv4_topk_row_per_thread(a.logits.size(0), e, a.weights.size(1))}});
}

Dsv4TopkArgs Dsv4Topk::warmup_inputs(const CompileKey& key) const {
  const std::int64_t e = key.get_int("num_experts");
  const std::int64_t k = key.get_int("top_k");
  const bool row_per_thread = key.get_bool("row_per_thread");
  const std::int64_t t = row_per_thread ? kDsv4TopkRowPerThreadTokens : kWarmupTokens;
  check_input(key.get_int("block_n") == dsv4_topk_block_n(e), kName, "block_n", "key holds ", key.get_int("block_n"),
              " but next_pow2(E = ", e, ") is ", dsv4_topk_block_n(e));
  check_input(!row_per_thread || dsv4_topk_row_per_thread(t, e, k), kName, "row_per_thread",
              "key holds true but E = ", e, ", K = ", k, " never take the thread-per-row path (", key, ")");
  Args a;
  // A misaligned view sits one element past a 16-byte boundary.
  a.logits = Tensor::meta(DType::f32, {t, e}, key.get_bool("logits_aligned") ? 0 : dtype_size(DType::f32));
  a.weights = Tensor::meta(DType::f32, {t, k});
  a.ids = Tensor::meta(key.get_dtype("ids_dtype"), {t, k});
  const bool vl = key.get_bool("has_vl");
  const bool hash = key.get_bool("has_hash");
  a.sentinel_lo = vl ? sentinel_for(key) : 0;
  a.vocab_size = std::max<std::int64_t>(1024, a.sentinel_lo + kDsv4SentinelCount);
  if (!hash) a.bias = Tensor::meta(DType::f32, {e});
  if (vl) a.bias_vl = Tensor::meta(DType::f32, {e});
  if (vl || hash) a.input_ids = Tensor::meta(DType::i32, {t});
  if (hash) a.tid2eid = Tensor::meta(DType::i32, {a.vocab_size, k});
  if (key.get_bool("has_padding")) a.num_unpadded = t;
  a.renormalize = key.get_bool("renormalize");
  a.launch_pdl = key.get_bool("launch_pdl");
  a.routed_scaling_factor = 1.0;
  return a;
}

LaunchSpec Dsv4Topk::launch_spec(const Args& a) const {
  const bool row_per_thread = dsv4_topk_row_per_thread(a.logits.size(0), a.logits.size(1), a.weights.size(1));
  return launch_spec_with(a, row_per_thread ? kDsv4TopkThreadRows : 0);
}

LaunchSpec Dsv4Topk::launch_spec_with(const Args& a, std::int64_t thread_rows) {
  const std::int64_t t = a.logits.size(0), e = a.logits.size(1), k = a.weights.size(1);
  check_input(thread_rows == 0 || (thread_rows % 32 == 0 && thread_rows <= 1024 && e % kDsv4TopkThreadExpertStep == 0 &&
                                   k <= kDsv4TopkThreadMaxTopK),
              kName, "thread_rows", thread_rows, " rows per block (E = ", e, ", K = ", k,
              "): the thread path needs a multiple of 32 up to 1024, E % 32 == 0 and K <= 16");
  const bool vl = dsv4_topk_has_vl(a);
  const bool hash = a.tid2eid.has_value();
  // NOTES: optional pointers are passed from `a` itself (LaunchSpec keeps their addresses), never
  // from a temporary; the ones the key turns off are passed as None.
  const std::optional<Tensor> none;
  LaunchSpec s;
  s.skip = t == 0;
  if (thread_rows > 0) {
    s.grid = {static_cast<unsigned>(std::max<std::int64_t>(1, ceil_div(t, thread_rows))), 1, 1};
    s.block = {static_cast<unsigned>(thread_rows), 1, 1};
    s.shared_bytes = static_cast<unsigned>(dsv4_topk_thread_smem_bytes(e, thread_rows));
  } else {
    s.grid = {static_cast<unsigned>(std::max<std::int64_t>(1, ceil_div(t, kDsv4RowsPerBlock))), 1, 1};
    s.block = {static_cast<unsigned>(32 * kDsv4RowsPerBlock), 1, 1};
  }
  s.constant("NUM_EXPERTS", e).constant("BLOCK_N", dsv4_topk_block_n(e)).constant("TOP_K", k);
  s.constant("RENORMALIZE", a.renormalize ? 1 : 0).constant("THREAD_ROWS", thread_rows);
  // The attribute only: every binary carries the PDL wait (dsv4_topk.cuh), so launch_pdl is a
  // CompileKey field that no JitKey needs.
  s.programmatic_dependent_launch = a.launch_pdl;
  s.ptr("logits", a.logits);
  s.ptr("bias", hash ? none : a.bias);
  s.ptr("bias_vl", vl ? a.bias_vl : none);
  s.ptr("input_ids", vl || hash ? a.input_ids : none);
  s.ptr("tid2eid", a.tid2eid);
  s.ptr("weights", a.weights).ptr("ids", a.ids);
  s.integer("num_tokens", t).integer("logits_stride", t <= 1 ? e : a.logits.stride(0));
  s.integer("sentinel_lo", vl ? a.sentinel_lo : 0).integer("vocab_size", a.vocab_size);
  s.integer("num_unpadded", a.num_unpadded.value_or(t));
  s.floating("routed_scaling_factor", a.routed_scaling_factor);
  return s;
}

std::string Dsv4Topk::describe(const Args& a) const {
  auto opt = [](const std::optional<Tensor>& t) { return t ? t->meta().to_string() : std::string("none"); };
  return str_cat("logits=", a.logits.meta(), " bias=", opt(a.bias), " bias_vl=", opt(a.bias_vl),
                 " input_ids=", opt(a.input_ids), " tid2eid=", opt(a.tid2eid), " weights=", a.weights.meta(),
                 " ids=", a.ids.meta(), " sentinel_lo=", a.sentinel_lo, " vocab_size=", a.vocab_size,
                 " num_unpadded=", a.num_unpadded ? std::to_string(*a.num_unpadded) : std::string("none"),
                 " renormalize=", a.renormalize, " routed_scaling_factor=", a.routed_scaling_factor,
                 " launch_pdl=", a.launch_pdl,
                 " row_per_thread=", dsv4_topk_row_per_thread(a.logits.size(0), a.logits.size(1), a.weights.size(1)));
}

}  // namespace warmkey
