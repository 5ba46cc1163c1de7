// Seeded mutants of moe_mul_sum: each wraps the real contract and breaks one thing.
#include <memory>

#include "equivalence/mutants/mutant.h"
#include "equivalence/mutants/wrap.h"
#include "kernels/moe_mul_sum/moe_mul_sum.h"

namespace warmkey::equivalence {
namespace {

using Base = Wrap<MoeMulSumArgs>;

// #1: dispatch forgets a field that changes the binary (a single token: num_tokens is the constant
// 1, a loop of one iteration known at compile time). x's alignment was this mutant's field until
// the binary tested it at run time (dropping it from dispatch is now only a P1 round-trip error).
class DispatchForgetsSingleToken : public Base {
 public:
  using Base::Base;
  CompileKey dispatch(const Args& a) const override {
    CompileKey k = real().dispatch(a);
    return k.get_int("num_tokens") == 1 ? k.with("num_tokens", std::int64_t{2}) : k;
  }
};

// #2 (analogue on this kernel): warmup declares the top-k ids as i32 while runtime passes i64.
class WarmupIdsAlwaysI32 : public Base {
 public:
  using Base::Base;
  Args warmup_inputs(const CompileKey& k) const override {
    Args a = real().warmup_inputs(k);
    if (a.topk_ids) a.topk_ids = Tensor::meta(DType::i32, {a.topk_ids->size(0), a.topk_ids->size(1)});
    return a;
  }
};

// #3: the tile recomputed from the warmup tensor's shape: warmup builds T = rep(T) tokens (2 or
// 16), so launch_spec picks the small-batch tile whatever tile the key names.
class WarmupTokensFromRep : public Base {
 public:
  using Base::Base;
  Args warmup_inputs(const CompileKey& k) const override {
    Args a = real().warmup_inputs(k);
    const std::int64_t t = k.get_int("num_tokens"), kk = a.x.size(1), h = a.x.size(2);
    a.x = Tensor::meta(a.x.dtype(), {t, kk, h}, a.x.meta().align_offset);
    a.weights = Tensor::meta(DType::f32, {t, kk});
    if (a.topk_ids) a.topk_ids = Tensor::meta(a.topk_ids->dtype(), {t, kk});
    a.out = Tensor::meta(a.out.dtype(), {t, h}, a.out.meta().align_offset);
    return a;
  }
};

// #5: a warmup output buffer hard-coded to bf16.
class WarmupOutBf16 : public Base {
 public:
  using Base::Base;
  Args warmup_inputs(const CompileKey& k) const override {
    Args a = real().warmup_inputs(k);
    a.out = Tensor::meta(DType::bf16, {a.out.size(0), a.out.size(1)}, a.out.meta().align_offset);
    return a;
  }
};

// #6: launch_spec asks a meta tensor for its address (to check alignment the wrong way).
class LaunchSpecReadsDataPtr : public Base {
 public:
  using Base::Base;
  LaunchSpec launch_spec(const Args& a) const override {
    (void)a.out.data_ptr();
    return real().launch_spec(a);
  }
};

// #7: the signature lists x and out in each other's place (the device entry reads x first).
class SignatureSwapsXAndOut : public Base {
 public:
  explicit SignatureSwapsXAndOut(const Kernel& real) : Base(real), def_(real.def()) {
    std::swap(def_.params.at(def_.param_index("x")), def_.params.at(def_.param_index("out")));
  }
  const KernelDef& def() const override { return def_; }

 private:
  KernelDef def_;
};

// #8: a CompileKey without the dtype of x; warmup then assumes bf16.
CompileKey drop_field(const CompileKey& k, std::string_view field) {
  std::vector<CompileKey::Field> fields;
  for (const auto& f : k.fields()) {
    if (f.first != field) fields.push_back(f);
  }
  return CompileKey(k.kernel(), std::move(fields));
}

class KeyWithoutDtype : public Base {
 public:
  using Base::Base;
  std::vector<CompileKey> warmup_keys(const ModelConfig& c) const override {
    std::vector<CompileKey> keys;
    for (const auto& k : real().warmup_keys(c)) keys.push_back(drop_field(k, "dtype"));
    return dedup(std::move(keys));
  }
  CompileKey dispatch(const Args& a) const override { return drop_field(real().dispatch(a), "dtype"); }
  Args warmup_inputs(const CompileKey& k) const override {
    std::vector<CompileKey::Field> fields{{"dtype", DType::bf16}};
    fields.insert(fields.end(), k.fields().begin(), k.fields().end());
    return real().warmup_inputs(CompileKey(k.kernel(), std::move(fields)));
  }
};

// #9: the raw token count in the key (a runtime-only value: the keys explode).
class KeyHoldsRawTokens : public Base {
 public:
  using Base::Base;
  CompileKey dispatch(const Args& a) const override { return real().dispatch(a).with("num_tokens", a.x.size(0)); }
};

// #10: warmup covers only 16-byte-aligned x and out.
class WarmupOnlyAligned : public Base {
 public:
  using Base::Base;
  std::vector<CompileKey> warmup_keys(const ModelConfig& c) const override {
    std::vector<CompileKey> keys;
    for (const auto& k : real().warmup_keys(c)) {
      if (k.get_bool("x_aligned") && k.get_bool("out_aligned")) keys.push_back(k);
    }
    return keys;
  }
};

// #11: the tile heuristic's large-batch bucket (T > 2048, BLOCK_M = 4) is never enumerated.
class WarmupMissesLargeTile : public Base {
 public:
  using Base::Base;
  std::vector<CompileKey> warmup_keys(const ModelConfig& c) const override {
    std::vector<CompileKey> keys;
    for (const auto& k : real().warmup_keys(c)) {
      if (k.get_int("block_m") != 4) keys.push_back(k);
    }
    return keys;
  }
};

// Found while writing the suite: a key field holding an address (here, of an object the
// contract allocates) agrees with itself in one process but changes in the next one.
class KeyHoldsAnAddress : public Base {
 public:
  explicit KeyHoldsAnAddress(const Kernel& real) : Base(real), anchor_(std::make_unique<int>(0)) {}
  std::vector<CompileKey> warmup_keys(const ModelConfig& c) const override {
    std::vector<CompileKey> keys;
    for (const auto& k : real().warmup_keys(c)) keys.push_back(tagged(k));
    return keys;
  }
  CompileKey dispatch(const Args& a) const override { return tagged(real().dispatch(a)); }
  Args warmup_inputs(const CompileKey& k) const override { return real().warmup_inputs(drop_field(k, "table")); }

 private:
  CompileKey tagged(const CompileKey& k) const {
    auto fields = k.fields();
    fields.emplace_back("table", static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(anchor_.get())));
    return CompileKey(k.kernel(), std::move(fields));
  }
  std::unique_ptr<int> anchor_;
};

}  // namespace

std::vector<Mutant> moe_mul_sum_mutants() {
  const std::string k = "moe_mul_sum";
  return {
      {"moe_mul_sum.dispatch_forgets_single_token",
       k,
       1,
       "dispatch reports one token as the class of 2 (a field that changes the binary is dropped)",
       {"P3"},
       "",
       false,
       make_mutant<DispatchForgetsSingleToken>()},
      {"moe_mul_sum.warmup_ids_always_i32",
       k,
       2,
       "warmup_inputs builds the top-k ids as i32 while serving passes the key's dtype (i64)",
       {"P1"},
       "dsv4-flash-ep8-eplb",
       false,
       make_mutant<WarmupIdsAlwaysI32>()},
      {"moe_mul_sum.warmup_tokens_from_rep",
       k,
       3,
       "warmup_inputs builds rep(T) tokens, so launch_spec recomputes the small-batch tile from that shape",
       {"P1"},
       "",
       false,
       make_mutant<WarmupTokensFromRep>()},
      {"moe_mul_sum.warmup_out_bf16",
       k,
       5,
       "warmup_inputs hard-codes the output buffer to bf16",
       {"P1"},
       "dsv4-flash-f16",
       false,
       make_mutant<WarmupOutBf16>()},
      {"moe_mul_sum.launch_spec_reads_data_ptr",
       k,
       6,
       "launch_spec calls out.data_ptr(), which a meta tensor refuses (warmup crashes at startup)",
       {"P5"},
       "",
       false,
       make_mutant<LaunchSpecReadsDataPtr>()},
      {"moe_mul_sum.signature_swaps_x_and_out",
       k,
       7,
       "the KernelDef lists out first and x fifth while the device entry reads x first",
       {"P5", "PC"},  // named launch arguments: the binder names the swap before NVRTC sees it
       "",
       true,
       make_mutant<SignatureSwapsXAndOut>()},
      {"moe_mul_sum.key_without_dtype",
       k,
       8,
       "the CompileKey drops the dtype of x; warmup assumes bf16",
       {"P3", "P2"},
       "dsv4-flash-f16",
       false,
       make_mutant<KeyWithoutDtype>()},
      {"moe_mul_sum.key_holds_raw_tokens",
       k,
       9,
       "dispatch puts the raw token count in the key instead of rep(T)",
       {"P4"},
       "",
       false,
       make_mutant<KeyHoldsRawTokens>()},
      {"moe_mul_sum.warmup_only_aligned",
       k,
       10,
       "warmup_keys covers only 16-byte-aligned x and out (the binary tests alignment at run time, so only P4)",
       {"P4"},
       "",
       false,
       make_mutant<WarmupOnlyAligned>()},
      {"moe_mul_sum.warmup_misses_large_tile",
       k,
       11,
       "warmup_keys never enumerates the T > 2048 bucket of the tile heuristic (BLOCK_M = 4)",
       {"P4", "P2"},
       "",
       false,
       make_mutant<WarmupMissesLargeTile>()},
      {"moe_mul_sum.key_holds_an_address",
       k,
       0,
       "a key field holds the address of an object the contract allocates (differs between processes)",
       {"P7"},
       "",
       false,
       make_mutant<KeyHoldsAnAddress>()},
  };
}

}  // namespace warmkey::equivalence
