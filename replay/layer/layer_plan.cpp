// The launch plan of one DSv4 MoE layer (layer_plan.h lists the steps and the choices).
#include "replay/layer/layer_plan.h"

#include <algorithm>
#include <mutex>
#include <sstream>
#include <unordered_set>

#include "spaces/fused_moe.h"
#include "spaces/serving.h"
#include "warmup/error.h"

namespace warmkey::replay::layer {
namespace {

bool has_format(const ModelConfig& c, std::string_view f) {
  return std::find(c.expert_weight_formats.begin(), c.expert_weight_formats.end(), f) != c.expert_weight_formats.end();
}

std::int64_t shared_inter(const ModelConfig& c) { return c.n_shared_experts * c.moe_intermediate_size; }

// The engine's tile for one GEMM of T tokens: the tuned file's when it tunes the shape, else none
// (fused_moe's heuristic decides).
std::optional<FusedMoeTile> tuned_tile(const ModelConfig& c, std::int64_t t, std::int64_t n, std::int64_t k, DType d) {
  if (c.fused_moe_tuned_config.empty()) return std::nullopt;
  return spaces::FusedMoeSpace::tuning(c.fused_moe_tuned_config).tile_for(std::max<std::int64_t>(t, 1), n, k, d);
}

DType gemm_dtype(const ModelConfig& c, LayerBackend b) { return b == LayerBackend::fp8 ? DType::f8e4m3 : c.act_dtype; }

// The kernel the backend's grouped GEMMs run and the config backend that warms it.
std::string_view gemm_backend(LayerBackend b) { return b == LayerBackend::nvfp4 ? "nvfp4" : "triton"; }

void check_batch(const ModelConfig& c, LayerBackend backend, const LayerBatch& b) {
  const std::string what = str_cat("layer '", c.name, "' ", backend_name(backend));
  if (b.num_tokens < 1 || b.num_tokens > c.max_num_batched_tokens)
    throw InputError(str_cat(what, ": num_tokens ", b.num_tokens,
                             " is outside [1, max_num_batched_tokens = ", c.max_num_batched_tokens, "]"));
  if (std::find(c.index_dtypes.begin(), c.index_dtypes.end(), b.ids_dtype) == c.index_dtypes.end())
    throw InputError(str_cat(what, ": ids dtype ", dtype_name(b.ids_dtype), " is not among the config's index_dtypes"));
  if (c.eplb && b.ids_dtype == DType::u32)
    throw InputError(str_cat(what, ": ids dtype u32 with EPLB (eplb_map maps signed ids only)"));
  if (b.image_tokens < 0 || b.image_tokens > b.num_tokens)
    throw InputError(
        str_cat(what, ": image_tokens ", b.image_tokens, " is outside [0, num_tokens = ", b.num_tokens, "]"));
  if (b.image_tokens > 0 && !c.vision)
    throw InputError(str_cat(what, ": image_tokens ", b.image_tokens, " but the config has no vision"));
  if (b.hash_layer && c.num_hash_layers == 0)
    throw InputError(str_cat(what, ": a hash layer, but the config has num_hash_layers = 0"));
  const bool served = backend == LayerBackend::bf16  ? has_format(c, "bf16")
                      : backend == LayerBackend::fp8 ? has_format(c, "fp8")
                                                     : has_format(c, "nvfp4");
  if (!served)
    throw InputError(str_cat(what, ": the config's expert_weight_formats have no '", backend_name(backend), "'"));
  if (c.n_shared_experts > 1)
    throw InputError(
        str_cat(what, ": n_shared_experts ", c.n_shared_experts,
                ": the plan puts the shared expert's rows in gate_up (2I wide), so I_s = I (one shared expert)"));
  if (!c.has_backend(gemm_backend(backend)))
    throw InputError(str_cat(what, ": the plan runs the grouped-GEMM path (",
                             backend == LayerBackend::nvfp4 ? "nvfp4_moe" : "fused_moe", "), the config has no '",
                             gemm_backend(backend), "' backend"));
  if (backend == LayerBackend::nvfp4 && nvfp4_moe_act_dtype(c.act_dtype) != c.act_dtype)
    throw InputError(str_cat(what, ": act_dtype ", dtype_name(c.act_dtype),
                             ": nvfp4_moe takes bf16 or f16 activations and the plan has no cast step"));
}

}  // namespace

std::string_view backend_name(LayerBackend b) {
  switch (b) {
    case LayerBackend::bf16: return "bf16";
    case LayerBackend::fp8: return "fp8";
    case LayerBackend::nvfp4: return "nvfp4";
  }
  return "?";
}

LayerBackend parse_backend(std::string_view name) {
  for (LayerBackend b : {LayerBackend::bf16, LayerBackend::fp8, LayerBackend::nvfp4})
    if (backend_name(b) == name) return b;
  throw InputError(str_cat("layer: backend '", name, "' is not one of bf16, fp8, nvfp4"));
}

std::vector<LayerBackend> config_backends(const ModelConfig& c) {
  std::vector<LayerBackend> out;
  const bool triton = c.has_backend("triton");
  if (triton && has_format(c, "bf16")) out.push_back(LayerBackend::bf16);
  if (triton && has_format(c, "fp8")) out.push_back(LayerBackend::fp8);
  if (c.has_backend("nvfp4") && has_format(c, "nvfp4") && nvfp4_moe_act_dtype(c.act_dtype) == c.act_dtype)
    out.push_back(LayerBackend::nvfp4);
  return out;
}

std::string LayerBatch::to_string() const {
  return str_cat("T=", num_tokens, decode ? " decode" : " prefill", hash_layer ? ", hash layer" : ", routed layer",
                 ", images=", image_tokens, ", ids ", dtype_name(ids_dtype));
}

std::int64_t LayerBuffer::numel() const {
  std::int64_t n = 1;
  for (std::int64_t s : sizes) n *= s;
  return n;
}

std::int64_t LayerBuffer::bytes() const { return numel() * static_cast<std::int64_t>(dtype_size(dtype)); }

Tensor MetaLayerTensors::view(const LayerBuffer& buffer, std::vector<std::int64_t> sizes, std::int64_t elem_offset) {
  // Buffers start 16-byte aligned (allocations are); a view's class follows its byte offset.
  const int align = static_cast<int>((elem_offset * static_cast<std::int64_t>(dtype_size(buffer.dtype))) % 16);
  return Tensor::meta(buffer.dtype, std::span<const std::int64_t>(sizes), align);
}

const LayerBuffer& LayerPlan::buffer(std::string_view name) const {
  for (const LayerBuffer& b : buffers)
    if (b.name == name) return b;
  throw Error(str_cat("layer plan: no buffer '", name, "'"));
}

std::vector<LayerBuffer> layer_buffers(const ModelConfig& c, LayerBackend backend, const LayerBatch& b) {
  check_batch(c, backend, b);
  const std::int64_t t = b.num_tokens, k = c.num_experts_per_tok, h = c.hidden_size, i = c.moe_intermediate_size;
  const std::int64_t e_routed = c.n_routed_experts, p = c.num_physical_experts(), e_local = c.num_local_experts();
  const std::int64_t is = shared_inter(c), rows = t * k + (is > 0 ? t : 0);
  const DType act = c.act_dtype, gd = gemm_dtype(c, backend);
  const bool fp4 = backend == LayerBackend::nvfp4;
  // nvfp4: two e2m1 codes per byte along K
  const DType wd = fp4 ? DType::u8 : gd;
  const std::int64_t pack = fp4 ? 2 : 1;
  std::vector<LayerBuffer> out = {
      {"hidden", act, {t, h}, BufferInit::random},
      {"router_logits", DType::f32, {t, e_routed}, BufferInit::random},
      {"input_ids", DType::i32, {t}, BufferInit::token_ids},
      {"topk_weights", DType::f32, {t, k}, BufferInit::none},
      // [T*K] routed ids, then T zeros: the shared expert's rows of the SwiGLU launch.
      {"topk_ids", b.ids_dtype, {rows}, BufferInit::zero},
      {"w13", wd, {e_local, 2 * i, h / pack}, BufferInit::weights},
      {"w2", wd, {e_local, h, i / pack}, BufferInit::weights},
      {"gate_up", act, {rows, 2 * i}, BufferInit::none},
      {"act", act, {rows, i}, BufferInit::none},
      {"expert_out", act, {t * k, h}, BufferInit::none},
      {"sum_weights", DType::f32, {t, k}, BufferInit::ones},
      {"out", act, {t, h}, BufferInit::none},
  };
  if (b.hash_layer) {
    out.push_back({"tid2eid", DType::i32, {c.vocab_size, k}, BufferInit::expert_ids});
  } else {
    out.push_back({"router_bias", DType::f32, {e_routed}, BufferInit::random});
  }
  if (b.image_tokens > 0) out.push_back({"router_bias_vl", DType::f32, {e_routed}, BufferInit::random});
  if (c.eplb) {
    out.push_back({"replica_count", DType::i64, {e_routed}, BufferInit::eplb_counts});
    out.push_back({"l2p", DType::i64, {e_routed, c.eplb_max_slots}, BufferInit::eplb_map});
    out.push_back({"eplb_record", DType::i32, {1}, BufferInit::ones});
    out.push_back({"eplb_load", DType::i32, {p}, BufferInit::zero});
  }
  if (c.ep_size > 1) out.push_back({"expert_map", DType::i32, {p}, BufferInit::ep_map});
  if (c.n_identity_experts > 0) out.push_back({"identity_out", act, {t, h}, BufferInit::none});
  if (is > 0) {
    out.push_back({"shared_w13", act, {2 * is, h}, BufferInit::random});
    out.push_back({"shared_w2", act, {h, is}, BufferInit::random});
    if (b.decode) out.push_back({"shared_out", act, {t, h}, BufferInit::none});  // lane 1's W2 output
  }
  if (backend == LayerBackend::fp8) {
    const DType sd = c.fp8_scale_dtype;
    out.push_back({"w13_scale", sd, {e_local, (2 * i + 127) / 128, h / 128}, BufferInit::weights});
    out.push_back({"w2_scale", sd, {e_local, (h + 127) / 128, i / 128}, BufferInit::weights});
    out.push_back({"hidden_q", DType::f8e4m3, {t, h}, BufferInit::none});
    out.push_back({"hidden_scale", sd, {t, h / 128}, BufferInit::none});
    out.push_back({"act_q", DType::f8e4m3, {t * k, i}, BufferInit::none});
    out.push_back({"act_scale", sd, {t * k, i / 128}, BufferInit::none});
  }
  if (fp4) {
    out.push_back({"w13_scale", DType::f8e4m3, {e_local, 2 * i, h / 16}, BufferInit::weights});
    out.push_back({"w2_scale", DType::f8e4m3, {e_local, h, i / 16}, BufferInit::weights});
    out.push_back({"w13_global_scale", DType::f32, {e_local}, BufferInit::weights});
    out.push_back({"w2_global_scale", DType::f32, {e_local}, BufferInit::weights});
  }
  // The sorted layout (none in the naive one): sized for the larger of the two GEMMs' BLOCK_M.
  const bool naive = c.ep_size == 1 && fused_moe_naive(t, k, p);
  if (!naive) {
    for (std::string_view g : {"w13", "w2"}) {
      const bool w13 = g == "w13";
      std::int64_t bm = 0;
      if (fp4) {
        bm = nvfp4_moe_tile((w13 ? t : t * k) * (w13 ? k : 1), e_local, w13 ? h : i).block_m;
      } else {
        FusedMoeArgs probe;
        probe.top_k = w13 ? k : 1;
        probe.a = Tensor::meta(gd, {w13 ? t : t * k, w13 ? h : i});
        probe.b = Tensor::meta(gd, {e_local, w13 ? 2 * i : h, w13 ? h : i});
        probe.tile = tuned_tile(c, t, w13 ? 2 * i : h, w13 ? h : i, gd);
        bm = FusedMoe::tile_of(probe).block_m;
      }
      const std::string suffix = w13 ? "" : "_w2";
      out.push_back({"sorted_token_ids" + suffix, DType::i32, {moe_align_sorted_size(t * k, p, bm)}, BufferInit::none});
      out.push_back({"block_expert_ids" + suffix, DType::i32, {moe_align_max_blocks(t * k, p, bm)}, BufferInit::none});
      out.push_back({"num_tokens_post_padded" + suffix, DType::i32, {1}, BufferInit::none});
    }
  }
  return out;
}

namespace {

// Builds the steps of one plan; `buf` finds a declared buffer, `view` takes a view of it.
class Planner {
 public:
  Planner(LayerPlan& plan, LayerTensors& tensors) : plan_(plan), tensors_(tensors), c_(plan.config) {}

  Tensor view(std::string_view name, std::vector<std::int64_t> sizes, std::int64_t offset = 0) {
    return tensors_.view(plan_.buffer(name), std::move(sizes), offset);
  }
  bool has(std::string_view name) const {
    return std::any_of(plan_.buffers.begin(), plan_.buffers.end(),
                       [&](const LayerBuffer& b) { return b.name == name; });
  }
  void jit(std::string name, LayerArgs args, std::string note) {
    const std::string kernel = std::visit(
        [](const auto& a) {
          using C = typename std::decay_t<decltype(a)>::Contract;
          return C::kernel_def().name;
        },
        args);
    plan_.steps.push_back({std::move(name), kernel, std::move(args), std::nullopt, std::move(note)});
  }
  // fp8_quant of rows x width of buffer x (the first rows: the shared expert's act rows stay bf16)
  // into q and its scales of the config's scale dtype.
  Fp8QuantArgs quant(std::string_view x, std::string_view q, std::string_view scale, std::int64_t rows,
                     std::int64_t width) {
    Fp8QuantArgs a;
    a.x = view(x, {rows, width});
    a.q = view(q, {rows, width});
    a.scale = view(scale, {rows, width / c_.quant_block});
    a.group_size = c_.quant_block;
    return a;
  }
  void plain(std::string name, PlainOp op, std::string note) {
    plan_.steps.push_back({std::move(name), "plain", std::nullopt, op, std::move(note)});
  }

  void build() {
    const LayerBatch& b = plan_.batch;
    const std::int64_t t = b.num_tokens, k = c_.num_experts_per_tok, h = c_.hidden_size, i = c_.moe_intermediate_size;
    const std::int64_t p = c_.num_physical_experts(), is = shared_inter(c_);
    const bool fp8 = plan_.backend == LayerBackend::fp8, ep = c_.ep_size > 1;
    plan_.naive = !ep && fused_moe_naive(t, k, p);

    // router
    Dsv4TopkArgs r;
    r.logits = view("router_logits", {t, c_.n_routed_experts});
    if (!b.hash_layer) r.bias = view("router_bias", {c_.n_routed_experts});
    if (b.image_tokens > 0) r.bias_vl = view("router_bias_vl", {c_.n_routed_experts});
    if (b.image_tokens > 0 || b.hash_layer) r.input_ids = view("input_ids", {t});
    if (b.hash_layer) r.tid2eid = view("tid2eid", {c_.vocab_size, k});
    r.weights = view("topk_weights", {t, k});
    r.ids = view("topk_ids", {t, k});
    r.sentinel_lo = b.image_tokens > 0 ? c_.image_sentinel_lo : 0;
    r.vocab_size = c_.vocab_size;
    r.renormalize = c_.norm_topk_prob;
    r.routed_scaling_factor = c_.routed_scaling_factor;
    r.launch_pdl = b.decode;
    jit("router", r,
        str_cat(b.hash_layer ? "hash routing (tid2eid) for text rows" : "biased top-k",
                b.image_tokens > 0 ? ", VL" : "", ", ids ", dtype_name(b.ids_dtype)));

    // identity experts, on the logical ids (EPLB maps them to -1)
    if (c_.n_identity_experts > 0) {
      ComputeIdentityArgs ci;
      ci.x = view("hidden", {t, h});
      ci.topk_ids = view("topk_ids", {t, k});
      ci.topk_weights = view("topk_weights", {t, k});
      ci.out = view("identity_out", {t, h});
      ci.first_identity = c_.n_routed_experts;
      ci.num_identity = c_.n_identity_experts;
      jit("identity", ci, str_cat(c_.n_identity_experts, " zero-compute experts from id ", c_.n_routed_experts));
    }

    if (c_.eplb) {
      EplbMapArgs em;
      em.ids = view("topk_ids", {t, k});
      em.replica_count = view("replica_count", {c_.n_routed_experts});
      em.l2p = view("l2p", {c_.n_routed_experts, c_.eplb_max_slots});
      em.record = view("eplb_record", {1});
      em.load = view("eplb_load", {p});
      em.out = em.ids;
      em.max_replicas = spaces::eplb_state(c_, 0).max_replicas;
      jit("eplb", em, str_cat("logical -> physical in place, ", p, " physical experts"));
    }

    // the grouped GEMMs' args (layout filled below): fused_moe, or nvfp4_moe on the nvfp4 backend
    const bool fp4 = plan_.backend == LayerBackend::nvfp4;
    LayerArgs w13, w2;
    if (fp4) {
      w13 = nvfp4_args(true);
      w2 = nvfp4_args(false);
    } else {
      w13 = gemm_args(true, fp8);
      w2 = gemm_args(false, fp8);
    }
    if (plan_.naive) {
      set_layout(w13, std::nullopt, view("topk_ids", {t, k}), std::nullopt);
      set_layout(w2, std::nullopt, view("topk_ids", {t, k}), std::nullopt);
    } else {
      const std::int64_t bm13 = block_m(w13), bm2 = block_m(w2);
      const Layout l13 = align("align", "", bm13);
      set_layout(w13, l13.sorted, l13.blocks, l13.post);
      const Layout l2 = bm2 == bm13 ? l13 : align("align_w2", "_w2", bm2);
      set_layout(w2, l2.sorted, l2.blocks, l2.post);
    }

    if (c_.n_identity_experts > 0) {
      PlainOp op;
      op.kind = PlainOp::Kind::memset;
      op.c = "expert_out";
      op.m = t * k;
      op.n = h;
      plain("clear_expert_out", op, "zero-compute slots are never written by W2: moe_mul_sum reads zeros there");
    }
    if (fp8) jit("quant_hidden", quant("hidden", "hidden_q", "hidden_scale", t, h), "per token per 128 columns, e4m3");
    jit("w13", w13, str_cat("N=", 2 * i, " K=", h, " top_k=", k, plan_.naive ? ", naive" : ", sorted"));
    if (is > 0) {
      PlainOp op;
      op.kind = PlainOp::Kind::gemm;
      op.a = "hidden";
      op.b = "shared_w13";
      op.c = "gate_up";
      op.c_offset = t * k * 2 * i;
      op.m = t;
      op.n = 2 * is;
      op.k = h;
      plain("shared_w13", op, "the shared expert's gate/up: a dense GEMM into the tail rows of gate_up");
      if (b.decode) on_lane_1();
    }
    SwigluLimitArgs sw;
    const std::int64_t rows = t * k + (is > 0 ? t : 0);
    sw.input = view("gate_up", {rows, 2 * i});
    sw.topk_ids = view("topk_ids", {rows});
    sw.out = view("act", {rows, i});
    sw.num_experts = p;
    if (ep) sw.expert_map = view("expert_map", {p});
    sw.limit = c_.swiglu_limit;
    jit("swiglu", sw, str_cat(t * k, " routed rows", is > 0 ? str_cat(" + ", t, " shared rows") : std::string()));
    const bool side = b.decode && is > 0;
    if (side) {
      plan_.steps.back().after = {"shared_w13"};
      plain("shared_w2", shared_w2_op(false), "the shared expert's down GEMM into shared_out, beside W2 and mul_sum");
      on_lane_1();
      plan_.steps.back().after = {"swiglu"};
    }
    if (fp8) jit("quant_act", quant("act", "act_q", "act_scale", t * k, i), str_cat(t * k, " routed rows"));
    jit("w2", w2, str_cat("N=", h, " K=", i, " top_k=1, routed weight", plan_.naive ? ", naive" : ", sorted"));

    MoeMulSumArgs ms;
    ms.x = view("expert_out", {t, k, h});
    ms.weights = view("sum_weights", {t, k});
    if (ep) {
      ms.topk_ids = view("topk_ids", {t, k});
      ms.expert_map = view("expert_map", {p});
    }
    ms.out = view("out", {t, h});
    jit("mul_sum", ms, "unit weights: W2 applied the routed weight");

    if (c_.n_identity_experts > 0) {
      PlainOp op;
      op.kind = PlainOp::Kind::add;
      op.a = "identity_out";
      op.c = "out";
      op.m = t;
      op.n = h;
      plain("add_identity", op, "out += the zero-compute experts' share");
    }
    if (side) {
      PlainOp op;
      op.kind = PlainOp::Kind::add;
      op.a = "shared_out";
      op.c = "out";
      op.m = t;
      op.n = h;
      plain("add_shared", op, "out += shared_out (the shared expert's lane joins)");
      plan_.steps.back().after = {"shared_w2"};
    } else if (is > 0) {
      plain("shared_w2", shared_w2_op(true), "the shared expert's down GEMM, accumulated into out");
    }
    if (b.decode) mark_pdl();
  }

 private:
  void on_lane_1() { plan_.steps.back().lane = 1; }

  // out (+)= act[T*K:, :] * shared_w2^T; lane 1 writes shared_out instead.
  PlainOp shared_w2_op(bool into_out) const {
    const std::int64_t t = plan_.batch.num_tokens, k = c_.num_experts_per_tok;
    PlainOp op;
    op.kind = PlainOp::Kind::gemm;
    op.a = "act";
    op.a_offset = t * k * c_.moe_intermediate_size;
    op.b = "shared_w2";
    op.c = into_out ? "out" : "shared_out";
    op.m = t;
    op.n = c_.hidden_size;
    op.k = shared_inter(c_);
    op.accumulate = into_out;
    return op;
  }

  // Programmatic dependent launch for each JIT step whose kernel waits on the device and whose
  // predecessor on its lane is a JIT step, unless it waits for the other lane (an event wait
  // between the two launches).
  void mark_pdl() {
    const LayerStep* last[2] = {nullptr, nullptr};
    for (LayerStep& s : plan_.steps) {
      const LayerStep* prev = last[s.lane];
      if (s.args && prev != nullptr && prev->args && s.after.empty()) {
        s.pdl = visit_contract(*s.args, [](const auto& contract, const auto&) { return contract.def().pdl_wait; });
      }
      last[s.lane] = &s;
    }
  }

  FusedMoeArgs gemm_args(bool w13, bool fp8) {
    const LayerBatch& b = plan_.batch;
    const std::int64_t t = b.num_tokens, k = c_.num_experts_per_tok, h = c_.hidden_size, i = c_.moe_intermediate_size;
    const std::int64_t el = c_.num_local_experts(), n = w13 ? 2 * i : h, kk = w13 ? h : i, m = w13 ? t : t * k;
    FusedMoeArgs a;
    if (fp8) {
      a.a = view(w13 ? "hidden_q" : "act_q", {m, kk});
      a.a_scale = view(w13 ? "hidden_scale" : "act_scale", {m, kk / 128});
      a.b_scale = view(w13 ? "w13_scale" : "w2_scale", {el, (n + 127) / 128, kk / 128});
    } else {
      a.a = view(w13 ? "hidden" : "act", {m, kk});
    }
    a.b = view(w13 ? "w13" : "w2", {el, n, kk});
    a.c = view(w13 ? "gate_up" : "expert_out", {t * k, n});
    if (!w13) a.topk_weights = view("topk_weights", {t, k});
    a.top_k = w13 ? k : 1;
    a.tile = tuned_tile(c_, t, n, kk, fp8 ? DType::f8e4m3 : c_.act_dtype);
    return a;
  }

  // The nvfp4 backend's GEMM: packed weights, block and global scales; activations of the model's dtype.
  Nvfp4MoeArgs nvfp4_args(bool w13) {
    const LayerBatch& b = plan_.batch;
    const std::int64_t t = b.num_tokens, k = c_.num_experts_per_tok, h = c_.hidden_size, i = c_.moe_intermediate_size;
    const std::int64_t el = c_.num_local_experts(), n = w13 ? 2 * i : h, kk = w13 ? h : i, m = w13 ? t : t * k;
    const std::string w = w13 ? "w13" : "w2";
    Nvfp4MoeArgs a;
    a.a = view(w13 ? "hidden" : "act", {m, kk});
    a.b = view(w, {el, n, kk / 2});
    a.b_scale = view(w + "_scale", {el, n, kk / 16});
    a.b_global_scale = view(w + "_global_scale", {el});
    a.c = view(w13 ? "gate_up" : "expert_out", {t * k, n});
    if (!w13) a.topk_weights = view("topk_weights", {t, k});
    a.top_k = w13 ? k : 1;
    return a;
  }

  static std::int64_t block_m(const LayerArgs& args) {
    if (const auto* f = std::get_if<FusedMoeArgs>(&args)) return FusedMoe::tile_of(*f).block_m;
    return Nvfp4Moe::tile_of(std::get<Nvfp4MoeArgs>(args)).block_m;
  }

  static void set_layout(LayerArgs& args, std::optional<Tensor> sorted, Tensor blocks, std::optional<Tensor> post) {
    std::visit(
        [&](auto& a) {
          if constexpr (requires { a.sorted_token_ids = sorted; }) {
            a.sorted_token_ids = sorted;
            a.expert_ids = blocks;
            a.num_tokens_post_padded = post;
          }
        },
        args);
  }

  struct Layout {
    Tensor sorted, blocks, post;
  };

  Layout align(const std::string& name, const std::string& suffix, std::int64_t block_m) {
    const std::int64_t t = plan_.batch.num_tokens, k = c_.num_experts_per_tok, p = c_.num_physical_experts();
    MoeAlignArgs al;
    al.topk_ids = view("topk_ids", {t, k});
    if (c_.ep_size > 1) al.expert_map = view("expert_map", {p});
    al.sorted_token_ids = view("sorted_token_ids" + suffix, {plan_.buffer("sorted_token_ids" + suffix).sizes[0]});
    al.expert_ids = view("block_expert_ids" + suffix, {plan_.buffer("block_expert_ids" + suffix).sizes[0]});
    al.num_tokens_post_padded = view("num_tokens_post_padded" + suffix, {1});
    al.num_experts = p;
    al.block_m = block_m;
    Layout out{al.sorted_token_ids, al.expert_ids, al.num_tokens_post_padded};
    jit(name, al, str_cat(t * k, " entries over ", p, " experts, BLOCK_M ", block_m));
    return out;
  }

  LayerPlan& plan_;
  LayerTensors& tensors_;
  const ModelConfig& c_;
};

}  // namespace

LayerPlan plan_layer(const ModelConfig& config, LayerBackend backend, const LayerBatch& batch, LayerTensors& tensors) {
  LayerPlan plan;
  plan.config = config;
  plan.backend = backend;
  plan.batch = batch;
  plan.buffers = layer_buffers(config, backend, batch);
  Planner(plan, tensors).build();
  return plan;
}

bool LayerPlan::lanes() const {
  return std::any_of(steps.begin(), steps.end(), [](const LayerStep& s) { return s.lane != 0; });
}

std::string LayerPlan::to_text() const {
  std::ostringstream os;
  os << "layer plan: config " << config.name << ", backend " << backend_name(backend) << ", " << batch.to_string()
     << (naive ? ", naive layout" : ", sorted layout") << "\n";
  int n = 0;
  for (const LayerStep& s : steps) {
    os << "  " << ++n << ". " << s.name << "  [" << s.kernel << "]  " << s.note;
    if (s.lane != 0) os << "  (lane " << s.lane << ")";
    for (const std::string& a : s.after) os << "  (after " << a << ")";
    if (s.pdl) os << "  (PDL)";
    os << "\n";
    if (s.args) {
      os << "       "
         << visit_contract(*s.args, [](const auto& contract, const auto& a) { return contract.describe(a); }) << "\n";
    } else if (s.plain) {
      const PlainOp& op = *s.plain;
      os << "       ";
      switch (op.kind) {
        case PlainOp::Kind::gemm:
          os << op.c << "[+" << op.c_offset << "] " << (op.accumulate ? "+=" : "=") << " " << op.a << "[+"
             << op.a_offset << "] (" << op.m << "x" << op.k << ") * " << op.b << "^T (" << op.n << "x" << op.k << ")";
          break;
        case PlainOp::Kind::add: os << op.c << " += " << op.a << " (" << op.m << "x" << op.n << ")"; break;
        case PlainOp::Kind::memset: os << op.c << " = 0 (" << op.m << "x" << op.n << ")"; break;
      }
      os << "\n";
    }
  }
  return os.str();
}

namespace {

// What warmup compiles for one kernel under one config: its CompileKeys and their bound keys.
struct Warmed {
  std::unordered_set<std::string> keys;
  std::unordered_set<BoundKey, BoundKeyHash> bound;
};

const Warmed& warmed(const ModelConfig& config, const Kernel& kernel) {
  static std::mutex mu;
  static std::map<std::pair<std::string, std::string>, Warmed> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto [it, fresh] = cache.try_emplace({config.name, kernel.name()});
  if (fresh) {
    for (const CompileKey& k : kernel.warmup_keys(config)) {
      it->second.keys.insert(k.to_string());
      it->second.bound.insert(kernel.warmup_bound_key(k));
    }
  }
  return it->second;
}

}  // namespace

std::vector<std::string> unwarmed_steps(const LayerPlan& plan) {
  std::vector<std::string> problems;
  for (const LayerStep& s : plan.steps) {
    if (!s.jit()) continue;
    visit_contract(*s.args, [&](const auto& contract, const auto& args) {
      const std::string where = str_cat(plan.config.name, " ", backend_name(plan.backend), " ", plan.batch.to_string(),
                                        " step ", s.name, " (", s.kernel, ")");
      try {
        contract.validate(args);
      } catch (const Error& e) {
        problems.push_back(str_cat(where, ": invalid: ", e.what()));
        return 0;
      }
      if (!contract.used_by(plan.config)) problems.push_back(str_cat(where, ": the config does not use the kernel"));
      if (!contract.launches(args)) problems.push_back(str_cat(where, ": launches nothing"));
      const Warmed& w = warmed(plan.config, contract);
      const CompileKey key = contract.dispatch(args);
      if (!w.keys.count(key.to_string()))
        problems.push_back(str_cat(where, ": CompileKey not warmed: ", key.to_string()));
      if (!w.bound.count(contract.bound_key(args)))
        problems.push_back(str_cat(where, ": JitKey not warmed (a runtime compile): ", contract.describe(args)));
      return 0;
    });
  }
  return problems;
}

RoutedExperts count_routed_experts(std::span<const std::int64_t> ids, std::int64_t num_experts) {
  std::vector<bool> seen(static_cast<std::size_t>(std::max<std::int64_t>(num_experts, 0)), false);
  RoutedExperts r;
  for (std::int64_t id : ids) {
    if (id < 0 || id >= num_experts) continue;
    ++r.entries;
    if (!seen[static_cast<std::size_t>(id)]) {
      seen[static_cast<std::size_t>(id)] = true;
      ++r.experts;
    }
  }
  return r;
}

LayerCost layer_cost(const ModelConfig& c, LayerBackend backend, const LayerBatch& batch, const RoutedExperts& routed) {
  // The plan's own buffers, so the model follows their dtypes and shapes (scales included).
  const std::vector<LayerBuffer> buffers = layer_buffers(c, backend, batch);
  auto bytes_of = [&](std::string_view name) -> double {
    for (const LayerBuffer& b : buffers)
      if (b.name == name) return static_cast<double>(b.bytes());
    return 0;
  };
  const double t = static_cast<double>(batch.num_tokens), k = static_cast<double>(c.num_experts_per_tok);
  const double h = static_cast<double>(c.hidden_size), i = static_cast<double>(c.moe_intermediate_size);
  const double is = static_cast<double>(shared_inter(c)), e_local = static_cast<double>(c.num_local_experts());
  if (routed.experts < 0 || routed.experts > c.num_local_experts() || routed.entries < 0 ||
      routed.entries > batch.num_tokens * c.num_experts_per_tok)
    throw Error(str_cat("layer_cost: ", routed.experts, " routed experts and ", routed.entries, " entries for ",
                        batch.to_string(), " over ", c.num_local_experts(), " experts"));
  LayerCost cost;
  cost.routed_experts = routed.experts;
  cost.routed_entries = routed.entries;
  // Every per-expert buffer is [E_local, ...]: one expert's share is its bytes / E_local.
  double per_expert = 0;
  for (std::string_view w : {"w13", "w2", "w13_scale", "w2_scale", "w13_global_scale", "w2_global_scale"})
    per_expert += bytes_of(w) / e_local;
  cost.expert_weight_bytes = static_cast<double>(routed.experts) * per_expert;
  cost.shared_weight_bytes = bytes_of("shared_w13") + bytes_of("shared_w2");
  // hidden is read on the device by the shared expert's GEMM and compute_identity, and by W13
  // unless the fp8 backend quantises it first (on the host: W13 reads hidden_q and its scales).
  const bool fp8 = backend == LayerBackend::fp8;
  const bool hidden_read = !fp8 || is > 0 || c.n_identity_experts > 0;
  cost.activation_bytes =
      (hidden_read ? bytes_of("hidden") : 0) + bytes_of("hidden_q") + bytes_of("hidden_scale") + bytes_of("out");
  const double id_bytes = static_cast<double>(dtype_size(batch.ids_dtype));
  cost.routing_bytes = bytes_of("router_logits") + bytes_of("router_bias") + bytes_of("router_bias_vl") +
                       (batch.hash_layer || batch.image_tokens > 0 ? bytes_of("input_ids") : 0) +
                       (batch.hash_layer ? (t - static_cast<double>(batch.image_tokens)) * k * 4 : 0) +
                       t * k * (4 + id_bytes);
  cost.flops = 2 * (static_cast<double>(routed.entries) * 3 * h * i + t * 3 * h * is);
  return cost;
}

}  // namespace warmkey::replay::layer
