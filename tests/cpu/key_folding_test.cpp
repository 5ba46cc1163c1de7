// Key-level folding: CompileKeys that differ only in a value class the device code never uses
// ('D' of fused_moe's em and num_valid, ...) share one JitKey, so one NVRTC compile and one cache
// entry; a class that changes the code (the constant 1) keeps keys apart, and the folded class
// really reaches no instruction (real NVRTC: the same SASS with and without it).
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "equivalence/kernel_table.h"
#include "warmup/compiler.h"
#include "warmup/cubin_resources.h"
#include "warmup/error.h"
#include "warmup/model_config.h"
#include "warmup/orchestrator.h"

namespace warmkey {
namespace key_folding_test {

// The kernels that fold, and the CompileKey fields their JitKey no longer tells apart: a 'D' class
// (do_not_specialize_on_alignment in the signature, or a conditional fold, KernelDef::fold:
// count_expert_tokens' numel), or a field that is no template parameter of the binary (dsv4_topk's
// launch_pdl and has_padding, and has_vl, sentinel_lo and has_hash (its routing inputs null at run
// time, Param::null_at_run_time, sentinel_lo a run-time value); fused_moe's n, k, top_k (run-time arguments) and
// mul_routed_weight (Param::null_at_run_time), and nvfp4_moe's for its warp-specialised tile; the warp-specialised
// tile's group_m (a run-time argument of fused_moe and nvfp4_moe); the naive layout of fused_moe and
// nvfp4_moe (sorted_token_ids and num_tokens_post_padded null at run time, Param::null_at_run_time,
// NaiveLayout::run_time); pointer alignments tested at run time
// (moe_mul_sum, swiglu_limit, dsv4_topk's logits); moe_align's block_m; the block size read from blockDim,
// KernelDef::block_at_run_time: count_expert_tokens' block_size).
const std::map<std::string, std::set<std::string>>& folded() {
  static const std::map<std::string, std::set<std::string>> f = {
      {"fused_moe", {"em", "num_valid", "n", "k", "top_k", "mul_routed_weight", "group_m", "naive"}},
      {"nvfp4_moe", {"em", "num_valid", "n", "k", "top_k", "mul_routed_weight", "group_m", "naive"}},
      {"moe_mul_sum", {"num_tokens", "x_aligned", "out_aligned"}},
      {"swiglu_limit", {"num_rows", "in_aligned", "out_aligned"}},
      {"compute_identity", {"num_tokens"}},
      {"lora_moe", {"num_rows"}},
      {"batched_moe", {"max_tokens"}},
      {"count_expert_tokens", {"numel", "block_size"}},
      {"dsv4_topk", {"launch_pdl", "logits_aligned", "has_padding", "has_vl", "sentinel_lo", "has_hash"}},
      {"moe_align", {"block_m"}}};
  return f;
}

CompileTarget target() {
  CompileTarget t;
  t.arch = "sm_90";
  t.nvrtc_version = "13.0";
  return t;
}

Plan plan_of(const std::string& config, const std::optional<std::string>& kernel = {}) {
  return plan_warmup(equivalence::builtin_registry(), load_config(config), kernel, target());
}

std::size_t distinct_bound_keys(const Plan& p) {
  std::unordered_set<BoundKey, BoundKeyHash> s;
  for (const auto& e : p.entries) s.insert(e.bound);
  return s.size();
}

// Compile keys and JIT keys per config and kernel: the counters a cold warmup compiles (measured
// before folding: every compile key was its own JIT key; docs/PERFORMANCE.md "Key-level folding").
TEST(KeyFolding, jitKeyCountsPerConfigOfTheFoldedKernels) {
  struct Row {
    const char* config;
    const char* kernel;  // nullptr: the whole config
    std::size_t compile_keys, jit_keys;
  };
  const Row rows[] = {
      {"dsv4-flash", "fused_moe", 36, 3},  // the naive and sorted layouts share the 16 x 64 binary
      {"dsv4-flash", "moe_mul_sum", 28, 4},
      {"dsv4-flash", "swiglu_limit", 8, 1},
      {"dsv4-flash", "count_expert_tokens", 30, 3},
      {"dsv4-flash", "dsv4_topk", 64, 2},  // one binary per path (row_per_thread)
      {"dsv4-flash", "moe_align", 8, 2},
      {"dsv4-flash", nullptr, 174, 15},
      // The warp-specialised tile: GROUP_M 2 and 8 (the tuned file), W13 and W2 share a binary.
      {"dsv4-flash-fp8", "fused_moe", 36, 5},
      {"dsv4-flash-fp8", nullptr, 178, 21},  // fp8_quant: 4 keys, 4 JitKeys
      {"dsv4-flash-f16", "fused_moe", 36, 3},
      {"dsv4-flash-f16", "nvfp4_moe", 28, 5},  // W13 and W2 share the warp-specialised binary only
      {"dsv4-flash-f16", "compute_identity", 12, 8},
      {"dsv4-flash-f16", nullptr, 214, 28},
      {"dsv4-flash-nvfp4", "nvfp4_moe", 28, 5},  // naive and sorted share the streaming binary; no 32 x 64 tile
      {"dsv4-flash-nvfp4", nullptr, 166, 17},
      {"tiny", "lora_moe", 32, 20},
      {"tiny", nullptr, 166, 40},
      {"dsv4-flash-ep8-eplb", "batched_moe", 18, 10},
      {"dsv4-flash-ep8-eplb", "count_expert_tokens", 120, 12},
      {"dsv4-flash-ep8-eplb", "moe_align", 32, 8},
      {"dsv4-flash-ep8-eplb", nullptr, 482, 89},
  };
  for (const Row& r : rows) {
    const Plan p = r.kernel ? plan_of(r.config, std::string(r.kernel)) : plan_of(r.config);
    const std::string what = str_cat(r.config, " ", r.kernel ? r.kernel : "(all kernels)");
    EXPECT_EQ(p.entries.size(), r.compile_keys) << what;
    EXPECT_EQ(p.distinct_jit_keys(), r.jit_keys) << what;
    EXPECT_EQ(distinct_bound_keys(p), r.jit_keys) << what << ": the runtime compiles one per BoundKey";
  }
}

// Within every embedded config, keys that share a JitKey differ only in folded fields, and every
// folded kernel a config runs does fold something.
TEST(KeyFolding, keysSharingAJitKeyDifferOnlyInFoldedClasses) {
  for (const std::string& config : embedded_config_names()) {
    const Plan p = plan_of(config);
    std::map<std::string, std::vector<const PlanEntry*>> by_jit;
    for (const auto& e : p.entries) by_jit[e.jit.digest()].push_back(&e);
    std::set<std::string> kernels_that_fold;
    for (const auto& [digest, group] : by_jit) {
      if (group.size() < 2) continue;
      const std::string& kernel = group.front()->key.kernel();
      kernels_that_fold.insert(kernel);
      ASSERT_TRUE(folded().contains(kernel)) << config << ": " << kernel << " shares a JitKey between compile keys";
      for (const PlanEntry* e : group) {
        for (const std::string& d : diff(group.front()->key, e->key)) {
          const std::string field = d.substr(0, d.find(':'));
          EXPECT_TRUE(folded().at(kernel).contains(field))
              << config << ": " << group.front()->key << " and " << e->key << " share a JitKey but differ in " << d;
        }
      }
    }
    for (const auto& e : p.entries) {
      if (folded().contains(e.key.kernel())) {
        EXPECT_TRUE(kernels_that_fold.contains(e.key.kernel())) << config << ": " << e.key.kernel() << " folds nothing";
      }
    }
  }
}

const PlanEntry& first_key(const Plan& p, const std::function<bool(const CompileKey&)>& pred) {
  for (const auto& e : p.entries) {
    if (pred(e.key)) return e;
  }
  throw Error("key_folding_test: no such key in the plan");
}

JitKey jit_of(const CompileKey& key) {
  const Kernel& k = equivalence::builtin_registry().at(key.kernel());
  return make_jit_key(k.warmup_bound_key(key), target());
}

TEST(KeyFolding, aFoldedClassSharesTheJitKeyACodeChangingFieldDoesNot) {
  const Plan p = plan_of("dsv4-flash", std::string("fused_moe"));
  // W13, sorted layout: em and num_valid divisible by 16 or not, one JitKey.
  const CompileKey w13 =
      first_key(p, [](const CompileKey& k) { return k.get_int("top_k") == 6 && !k.get_bool("naive"); }).key;
  const CompileKey em16 = w13.with("em", std::int64_t{16}), em2 = w13.with("em", std::int64_t{2});
  ASSERT_NE(em16, em2);
  EXPECT_EQ(jit_of(em16), jit_of(em2));
  EXPECT_EQ(jit_of(em16).digest(), jit_of(em2).digest());
  EXPECT_EQ(jit_of(w13.with("num_valid", std::int64_t{16})), jit_of(w13.with("num_valid", std::int64_t{2})));
  // The tile changes the code: another JitKey.
  EXPECT_NE(jit_of(w13), jit_of(w13.with("stages", std::int64_t{3})));
  // W2 (top_k 1), naive layout: num_valid == 1 (one entry: a W2 key no dsv4 warmup needs, but a valid
  // input) is the constant 1, other code; it stays apart from the 'D' and plain classes, which share.
  const CompileKey w2 = first_key(p, [](const CompileKey& k) {
                          return k.get_int("top_k") == 1 && k.get_bool("naive") && k.get_int("num_valid") == 2;
                        }).key;
  const JitKey one = jit_of(w2.with("num_valid", std::int64_t{1}).with("em", std::int64_t{1})), two = jit_of(w2);
  EXPECT_NE(one, two);
  EXPECT_EQ(two, jit_of(w2.with("num_valid", std::int64_t{16}).with("em", std::int64_t{16})));
  EXPECT_FALSE(diff(one, two).empty());

  // The other folded kernels: their folded field alone never splits a JitKey.
  const Plan mms = plan_of("dsv4-flash", std::string("moe_mul_sum"));
  const CompileKey m = first_key(mms, [](const CompileKey& k) { return k.get_int("num_tokens") == 16; }).key;
  EXPECT_EQ(jit_of(m), jit_of(m.with("num_tokens", std::int64_t{2})));
  EXPECT_NE(jit_of(m), jit_of(m.with("num_tokens", std::int64_t{1})));
  EXPECT_NE(jit_of(m), jit_of(m.with("hidden", std::int64_t{2})));  // hidden % 16 picks the vector path
}

// The conditional folds (KernelDef::fold) fold only where the other facts make the class dead,
// and the fields that left the template parameters fold everywhere.
TEST(KeyFolding, conditionalFoldsAndRuntimeFieldsFoldOnlyWhereTheyMayFold) {
  // count_expert_tokens: numel's class folds with an unaligned id pointer, not with an aligned one.
  const Plan cet = plan_of("dsv4-flash", std::string("count_expert_tokens"));
  const CompileKey unaligned =
      first_key(cet, [](const CompileKey& k) { return !k.get_bool("ids_aligned") && k.get_int("numel") == 16; }).key;
  EXPECT_EQ(jit_of(unaligned), jit_of(unaligned.with("numel", std::int64_t{2})));
  EXPECT_NE(jit_of(unaligned), jit_of(unaligned.with("numel", std::int64_t{1}).with("block_size", std::int64_t{1})));
  const CompileKey aligned = unaligned.with("ids_aligned", true);
  EXPECT_NE(jit_of(aligned), jit_of(aligned.with("numel", std::int64_t{2})))
      << "with aligned ids numel % 16 == 0 compiles the scalar tail out: other code";
  EXPECT_NE(jit_of(aligned), jit_of(unaligned));

  // dsv4_topk: launch_pdl, has_padding and logits_aligned never split a JitKey (every binary
  // carries the PDL wait and the padding check, and tests the row start's alignment), nor do the
  // routing inputs (bias, VL, hash: null at run time); the path (row_per_thread) does.
  const Plan topk = plan_of("dsv4-flash", std::string("dsv4_topk"));
  std::set<std::string> routing_binaries;  // one per (hash, VL) combination
  for (bool hash : {false, true}) {
    for (bool vl : {false, true}) {
      const CompileKey k =
          first_key(topk, [&](const CompileKey& c) {
            return c.get_bool("has_hash") == hash && c.get_bool("has_vl") == vl && c.get_bool("logits_aligned");
          }).key;
      EXPECT_EQ(jit_of(k), jit_of(k.with("launch_pdl", !k.get_bool("launch_pdl")))) << k;
      EXPECT_EQ(jit_of(k), jit_of(k.with("has_padding", !k.get_bool("has_padding")))) << k;
      EXPECT_EQ(jit_of(k), jit_of(k.with("logits_aligned", false))) << k;
      routing_binaries.insert(jit_of(k).digest());
    }
  }
  EXPECT_EQ(routing_binaries.size(), 1U);
  const CompileKey warp = first_key(topk, [](const CompileKey& c) { return !c.get_bool("row_per_thread"); }).key;
  EXPECT_NE(jit_of(warp), jit_of(warp.with("row_per_thread", true)));

  // moe_align: block_m is a run-time argument; the warp count (the block size) and the expert count
  // are constexprs (the warp count read from blockDim cost 2-3 % at 1,024-8,192 tokens on the H200:
  // docs/PERFORMANCE.md, "Four more folds").
  const Plan align = plan_of("dsv4-flash", std::string("moe_align"));
  const CompileKey a = align.entries.front().key;
  for (std::int64_t m : {16, 32, 64, 128}) EXPECT_EQ(jit_of(a), jit_of(a.with("block_m", m))) << m;
  const CompileKey other_warps =
      first_key(align, [&](const CompileKey& k) { return k.get_int("num_warps") != a.get_int("num_warps"); }).key;
  EXPECT_NE(jit_of(a), jit_of(other_warps));
  EXPECT_NE(jit_of(a), jit_of(a.with("num_experts", a.get_int("num_experts") / 2)));

  // fused_moe: the W13 and W2 GEMMs of one tile (other N, K, top_k, and weights only in W2) share a
  // binary; the tile and the layout (naive or sorted) do not.
  const Plan fm = plan_of("dsv4-flash", std::string("fused_moe"));
  for (std::int64_t bm : {16, 32, 128}) {
    auto sorted = [&](const CompileKey& k, std::int64_t top_k) {  // the constant 1 is other code
      return k.get_int("top_k") == top_k && !k.get_bool("naive") && k.get_int("block_m") == bm &&
             k.get_int("em") != 1 && k.get_int("num_valid") != 1;
    };
    const CompileKey w13 = first_key(fm, [&](const CompileKey& k) { return sorted(k, 6); }).key;
    const CompileKey w2 = first_key(fm, [&](const CompileKey& k) { return sorted(k, 1); }).key;
    EXPECT_NE(w13.get_int("k"), w2.get_int("k"));
    EXPECT_NE(w13.get_bool("mul_routed_weight"), w2.get_bool("mul_routed_weight"));
    EXPECT_EQ(jit_of(w13), jit_of(w2)) << w13 << " / " << w2;
  }
  // The warp-specialised tile's two buckets (GROUP_M 2 from 24 to 64 entries per expert, 8 above)
  // share its binary: GROUP_M is a run-time argument of that tile.
  auto ws = [&](std::int64_t group_m) {
    return first_key(fm,
                     [&](const CompileKey& k) {
                       return k.get_int("warps") == 12 && k.get_int("group_m") == group_m && k.get_int("top_k") == 6;
                     })
        .key;
  };
  EXPECT_EQ(jit_of(ws(2)), jit_of(ws(8)));

  // nvfp4_moe: the naive and sorted layouts of the streaming tile share its binary (the layout
  // tensors are null at run time in the naive one).
  const Plan nv = plan_of("dsv4-flash-nvfp4", std::string("nvfp4_moe"));
  for (std::int64_t top_k : {6, 1}) {
    const CompileKey naive =
        first_key(nv, [&](const CompileKey& k) { return k.get_int("top_k") == top_k && k.get_bool("naive"); }).key;
    EXPECT_EQ(naive.get_int("block_k"), 128) << naive;
    EXPECT_EQ(jit_of(naive), jit_of(naive.with("naive", false).with("em", std::int64_t{16}))) << naive;
  }

  // fp8 keeps N, K and TOP_K as constexprs: its W13 and W2 never share a binary.
  const Plan fp8 = plan_of("dsv4-flash-fp8", std::string("fused_moe"));
  const CompileKey f13 = first_key(fp8, [](const CompileKey& k) { return k.get_int("top_k") == 6; }).key;
  const CompileKey f2 = first_key(fp8, [&](const CompileKey& k) {
                          return k.get_int("top_k") == 1 && k.get_int("block_m") == f13.get_int("block_m") &&
                                 k.get_bool("naive") == f13.get_bool("naive");
                        }).key;
  EXPECT_NE(jit_of(f13), jit_of(f2));
  EXPECT_NE(jit_of(f13).constexprs.front().second, 0) << "N of an fp8 key is its constexpr";

  // moe_mul_sum and swiglu_limit: the pointers' alignment is tested at run time.
  const Plan mms = plan_of("dsv4-flash", std::string("moe_mul_sum"));
  const CompileKey m = mms.entries.front().key;
  EXPECT_EQ(jit_of(m), jit_of(m.with("x_aligned", !m.get_bool("x_aligned"))));
  EXPECT_EQ(jit_of(m), jit_of(m.with("out_aligned", !m.get_bool("out_aligned"))));
  const Plan sw = plan_of("dsv4-flash", std::string("swiglu_limit"));
  const CompileKey s = sw.entries.front().key;
  EXPECT_EQ(jit_of(s), jit_of(s.with("in_aligned", !s.get_bool("in_aligned"))));
  EXPECT_EQ(jit_of(s), jit_of(s.with("out_aligned", !s.get_bool("out_aligned"))));
}

// ---- the folded class reaches no instruction (real NVRTC, compile-only) --------------------------

// The sections of a cubin whose name starts with `prefix`, by name with the Spec struct's name
// (k_<16 hex>, different per JitKey) masked.
std::map<std::string, std::string> sections(const std::string& elf, const std::string& prefix) {
  std::map<std::string, std::string> out;
  for (const CubinSection& s : cubin_sections(elf)) {
    if (!s.name.starts_with(prefix)) continue;
    out[std::regex_replace(s.name, std::regex("k_[0-9a-f]{16}"), "k_X")] = std::string(s.bytes);
  }
  return out;
}

// The machine code of one key compiled alone: its SASS and its attributes (registers, parameters).
std::map<std::string, std::string> code_of(const KernelDef& def, const JitKey& key) {
  NvrtcCompiler c(target());
  const auto out = c.compile_batch(def, {key});
  auto code = sections(*out.at(0).cubin, ".text.");
  for (auto& [name, bytes] : sections(*out.at(0).cubin, ".nv.info.")) code[name] = bytes;
  return code;
}

// `key` with `param`'s class set as an unfolded signature would bind it: 'D' (attr "D") or the
// constant 1 (type "constexpr", attr "1").
JitKey with_class(JitKey key, const std::string& param, const std::string& type, const std::string& attr) {
  for (ParamKey& p : key.params) {
    if (p.name == param) {
      p.type = type;
      p.attr = attr;
      return key;
    }
  }
  throw Error(str_cat("key_folding_test: no parameter ", param, " in ", key.signature_text()));
}

TEST(KeyFolding, theFoldedDivisibilityReachesNoInstruction) {
  // swiglu_limit: num_rows (a row loop bound); fused_moe: em and num_valid of a W13 BLOCK_M=16 key.
  const Plan sw = plan_of("dsv4-flash", std::string("swiglu_limit"));
  const PlanEntry& s = sw.entries.front();
  ASSERT_EQ(s.jit.params.at(static_cast<std::size_t>(s.kernel->def().param_index("num_rows"))).attr, "");
  const auto plain = code_of(s.kernel->def(), s.jit);
  ASSERT_GE(plain.size(), 2U);  // at least the kernel's .text and .nv.info
  EXPECT_EQ(code_of(s.kernel->def(), with_class(s.jit, "num_rows", "i32", "D")), plain)
      << "num_rows % 16 == 0 changes swiglu_limit's code: it must not be folded";
  // The comparison sees code changes: the constant 1 is other code.
  EXPECT_NE(code_of(s.kernel->def(), with_class(s.jit, "num_rows", "constexpr", "1")), plain);

  const Plan fm = plan_of("dsv4-flash", std::string("fused_moe"));
  const PlanEntry& f = first_key(fm, [](const CompileKey& k) {
    return k.get_int("top_k") == 6 && !k.get_bool("naive") && k.get_int("block_m") == 16;
  });
  const auto folded_code = code_of(f.kernel->def(), f.jit);
  EXPECT_EQ(code_of(f.kernel->def(), with_class(with_class(f.jit, "em", "i32", "D"), "num_valid", "i32", "D")),
            folded_code)
      << "em or num_valid % 16 == 0 changes fused_moe's code: they must not be folded";
}

TEST(KeyFolding, theConditionallyFoldedDivisibilityReachesNoInstruction) {
  // count_expert_tokens, unaligned ids: the key as folded (numel '') and with numel's 'D' restored
  // compile to the same code; with aligned ids the 'D' is other code (the control: the comparison
  // sees the difference the fold must not hide).
  const Plan cet = plan_of("dsv4-flash", std::string("count_expert_tokens"));
  const PlanEntry& u = first_key(cet, [](const CompileKey& k) {
    return !k.get_bool("ids_aligned") && k.get_int("numel") == 16 && k.get_int("block_size") == 1024;
  });
  const KernelDef& def = u.kernel->def();
  ASSERT_EQ(u.jit.params.at(static_cast<std::size_t>(def.param_index("numel"))).attr, "");
  EXPECT_EQ(code_of(def, with_class(u.jit, "numel", "i32", "D")), code_of(def, u.jit))
      << "numel % 16 == 0 changes count_expert_tokens' code with unaligned ids: the fold is wrong";
  const PlanEntry& al = first_key(cet, [](const CompileKey& k) {
    return k.get_bool("ids_aligned") && k.get_int("numel") == 16 && k.get_int("block_size") == 1024;
  });
  ASSERT_EQ(al.jit.params.at(static_cast<std::size_t>(def.param_index("numel"))).attr, "D");
  EXPECT_NE(code_of(def, with_class(al.jit, "numel", "i32", "")), code_of(def, al.jit));
}

}  // namespace key_folding_test
}  // namespace warmkey
