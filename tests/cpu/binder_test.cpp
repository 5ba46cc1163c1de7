// The binder agrees with Triton 3.6's cache keys value for value (docs/DESIGN.md §3), for every rule.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "warmup/arch.h"
#include "warmup/binder.h"
#include "warmup/error.h"
#include "warmup/jit_key.h"

namespace warmkey {
namespace binder_test {

constexpr __int128 kTwo31 = static_cast<__int128>(1) << 31;
constexpr __int128 kTwo32 = static_cast<__int128>(1) << 32;
constexpr __int128 kTwo63 = static_cast<__int128>(1) << 63;
constexpr __int128 kTwo64 = static_cast<__int128>(1) << 64;

// f(x_ptr, n, BLOCK): the kernel Triton's keys were recorded on.
KernelDef make_def(Specialize n_policy = Specialize::specialize, Specialize x_policy = Specialize::specialize) {
  KernelDef d;
  d.name = "f";
  d.entry = "f_kernel";
  d.header = "f.cuh";
  d.constexprs = {{"BLOCK"}};
  d.params = {param::in("x_ptr", x_policy), param::integer("n", n_policy)};
  return d;
}

std::string bind_int(__int128 n, Specialize policy = Specialize::specialize) {
  KernelDef d = make_def(policy);
  Tensor x = Tensor::meta(DType::f32, {64});
  LaunchSpec s;
  s.constant("BLOCK", 128).ptr("x_ptr", x).integer("n", n);
  return triton_repr(d, bind(d, s), 1);
}

struct IntCase {
  const char* label;
  __int128 value;
  const char* expected;  // Triton 3.6.0's key entry
};

class IntegerRule : public ::testing::TestWithParam<IntCase> {};

TEST_P(IntegerRule, matchesTriton36) { EXPECT_EQ(bind_int(GetParam().value), GetParam().expected) << GetParam().label; }

INSTANTIATE_TEST_SUITE_P(
    Triton36, IntegerRule,
    ::testing::Values(IntCase{"0", 0, "('i32', 'D')"}, IntCase{"1", 1, "('constexpr', 1)"},
                      IntCase{"-1", -1, "('i32', '')"}, IntCase{"2", 2, "('i32', '')"},
                      IntCase{"15", 15, "('i32', '')"}, IntCase{"16", 16, "('i32', 'D')"},
                      IntCase{"17", 17, "('i32', '')"}, IntCase{"-16", -16, "('i32', 'D')"},
                      IntCase{"32", 32, "('i32', 'D')"}, IntCase{"2^31-1", kTwo31 - 1, "('i32', '')"},
                      IntCase{"-2^31", -kTwo31, "('i32', 'D')"}, IntCase{"2^31", kTwo31, "('i64', 'D')"},
                      IntCase{"2^32", kTwo32, "('i64', 'D')"}, IntCase{"-2^31-1", -kTwo31 - 1, "('i64', '')"},
                      IntCase{"2^63-1", kTwo63 - 1, "('i64', '')"}, IntCase{"2^63", kTwo63, "('u64', 'D')"},
                      IntCase{"2^64-1", kTwo64 - 1, "('u64', '')"}, IntCase{"-2^63", -kTwo63, "('i64', 'D')"}),
    [](const auto& info) {
      std::string s = info.param.label;
      for (char& c : s) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return "v" + s;
    });

TEST(IntegerRule, overflowBeyond64BitsIsAnErrorNamingKernelParamAndValue) {
  try {
    bind_int(kTwo64);
    FAIL() << "2^64 must not bind";
  } catch (const BindError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("kernel 'f'"), std::string::npos) << m;
    EXPECT_NE(m.find("param 'n'"), std::string::npos) << m;
    EXPECT_NE(m.find("18446744073709551616"), std::string::npos) << m;
  }
  EXPECT_THROW(bind_int(-kTwo63 - 1), BindError);
}

TEST(IntegerRule, doNotSpecializeKeepsTheWidthOnly) {
  // Triton 3.6 renders a do_not_specialize entry with None (its binder's own keys, checked
  // over 1316 argument values on the H200 host): width only, no specialisation.
  EXPECT_EQ(bind_int(1, Specialize::do_not_specialize), "('i32', None)");
  EXPECT_EQ(bind_int(16, Specialize::do_not_specialize), "('i32', None)");
  EXPECT_EQ(bind_int(0, Specialize::do_not_specialize), "('i32', None)");
  EXPECT_EQ(bind_int(kTwo32, Specialize::do_not_specialize), "('i64', None)");
  EXPECT_EQ(bind_int(kTwo63, Specialize::do_not_specialize), "('u64', None)");
}

TEST(IntegerRule, doNotSpecializeOnAlignmentKeepsTheConstantOneButNeverD) {
  EXPECT_EQ(bind_int(1, Specialize::do_not_specialize_on_alignment), "('constexpr', 1)");
  EXPECT_EQ(bind_int(16, Specialize::do_not_specialize_on_alignment), "('i32', '')");
  EXPECT_EQ(bind_int(0, Specialize::do_not_specialize_on_alignment), "('i32', '')");
  EXPECT_EQ(bind_int(kTwo32, Specialize::do_not_specialize_on_alignment), "('i64', '')");
}

std::string bind_pointer_offset(int offset_bytes, Specialize policy = Specialize::specialize, DType dt = DType::f32) {
  KernelDef d = make_def(Specialize::specialize, policy);
  Tensor x = Tensor::meta(dt, {64}, offset_bytes);
  LaunchSpec s;
  s.constant("BLOCK", 128).ptr("x_ptr", x).integer("n", 7);
  return triton_repr(d, bind(d, s), 0);
}

TEST(PointerRule, alignmentOfEveryOffsetFrom0To16Bytes) {
  for (int off = 0; off <= 16; ++off) {
    std::string expected = off % 16 == 0 ? "('*fp32', 'D')" : "('*fp32', '')";
    EXPECT_EQ(bind_pointer_offset(off), expected) << "offset " << off;
  }
}

TEST(PointerRule, realTensorAlignmentComesFromItsAddress) {
  alignas(16) static float storage[64];
  KernelDef d = make_def();
  for (int off = 0; off < 4; ++off) {
    Tensor x = Tensor::view(DType::f32, storage + off, {8});
    LaunchSpec s;
    s.constant("BLOCK", 1).ptr("x_ptr", x).integer("n", 3);
    EXPECT_EQ(triton_repr(d, bind(d, s), 0), off == 0 ? "('*fp32', 'D')" : "('*fp32', '')") << "float offset " << off;
  }
}

TEST(PointerRule, doNotSpecializePoliciesDropD) {
  EXPECT_EQ(bind_pointer_offset(0, Specialize::do_not_specialize), "('*fp32', None)");
  EXPECT_EQ(bind_pointer_offset(0, Specialize::do_not_specialize_on_alignment), "('*fp32', '')");
}

TEST(PointerRule, pointeeDtypeNamesFollowTriton) {
  EXPECT_EQ(bind_pointer_offset(0, Specialize::specialize, DType::bf16), "('*bf16', 'D')");
  EXPECT_EQ(bind_pointer_offset(0, Specialize::specialize, DType::f16), "('*fp16', 'D')");
  EXPECT_EQ(bind_pointer_offset(0, Specialize::specialize, DType::i64), "('*i64', 'D')");
  EXPECT_EQ(bind_pointer_offset(0, Specialize::specialize, DType::u8), "('*u8', 'D')");
  EXPECT_EQ(bind_pointer_offset(2, Specialize::specialize, DType::f8e4m3), "('*fp8e4nv', '')");
}

TEST(PointerRule, missingOptionalPointerIsTheConstexprNone) {
  KernelDef d = make_def();
  LaunchSpec s;
  s.constant("BLOCK", 128).ptr("x_ptr", std::optional<Tensor>{}).integer("n", 16);
  BoundKey k = bind(d, s);
  EXPECT_EQ(triton_repr(d, k, 0), "('constexpr', None)");
  JitKey jk = make_jit_key(k, resolved_target());
  EXPECT_EQ(jk.params[0].type, "constexpr");
  EXPECT_EQ(jk.params[0].attr, "None");
}

TEST(ScalarRule, boolsAndFloatsAreTypeOnly) {
  KernelDef d;
  d.name = "g";
  d.entry = "g_kernel";
  d.params = {param::boolean("flag"), param::floating("scale")};
  for (bool b : {true, false}) {
    for (double f : {1.0, 0.5, 0.0, -3.25}) {
      LaunchSpec s;
      s.flag("flag", b).floating("scale", f);
      BoundKey k = bind(d, s);
      EXPECT_EQ(triton_repr(d, k, 0), "('u1', None)");
      EXPECT_EQ(triton_repr(d, k, 1), "('fp32', None)");
    }
  }
  LaunchSpec a, b;
  a.flag("flag", true).floating("scale", 1.0);
  b.flag("flag", false).floating("scale", 0.5);
  EXPECT_EQ(bind(d, a), bind(d, b)) << "bool and float values never enter the key";
}

TEST(ConstexprRule, exactValueOfEachConstexprIsInTheKey) {
  KernelDef d = make_def();
  Tensor x = Tensor::meta(DType::f32, {64});
  for (std::int64_t v :
       {std::int64_t{0}, std::int64_t{1}, std::int64_t{-1}, std::int64_t{128}, std::int64_t{1} << 40}) {
    LaunchSpec a, b;
    a.constant("BLOCK", v).ptr("x_ptr", x).integer("n", 5);
    b.constant("BLOCK", v + 1).ptr("x_ptr", x).integer("n", 5);
    EXPECT_NE(bind(d, a), bind(d, b)) << v;
    JitKey jk = make_jit_key(bind(d, a), resolved_target());
    ASSERT_EQ(jk.constexprs.size(), 1u);
    EXPECT_EQ(jk.constexprs[0].second, v);
  }
}

TEST(LaunchOptions, blockSizeIsInTheKey) {
  KernelDef d = make_def();
  Tensor x = Tensor::meta(DType::f32, {64});
  LaunchSpec a, b;
  a.constant("BLOCK", 1).ptr("x_ptr", x).integer("n", 5);
  b = a;
  b.block = {256, 1, 1};
  EXPECT_NE(bind(d, a), bind(d, b));
  EXPECT_NE(make_jit_key(bind(d, a), resolved_target()).digest(), make_jit_key(bind(d, b), resolved_target()).digest());
}

// A kernel that reads its block size at run time (KernelDef::block_at_run_time): launches with
// different blocks bind to one BoundKey and one JitKey, whose text says so; the launch keeps its block.
TEST(LaunchOptions, aBlockReadAtRunTimeLeavesTheKey) {
  KernelDef d = make_def();
  d.block_at_run_time = true;
  Tensor x = Tensor::meta(DType::f32, {64});
  LaunchSpec a, b;
  a.constant("BLOCK", 1).ptr("x_ptr", x).integer("n", 5);
  b = a;
  a.block = {8, 1, 1};
  b.block = {1024, 1, 1};
  const BoundKey ka = bind(d, a), kb = bind(d, b);
  EXPECT_EQ(ka, kb);
  EXPECT_EQ(ka.hash, kb.hash);
  EXPECT_EQ(ka.block, kBlockAtRunTime);
  const JitKey ja = make_jit_key(ka, resolved_target());
  EXPECT_EQ(ja.digest(), make_jit_key(kb, resolved_target()).digest());
  EXPECT_NE(ja.signature_text().find("){block=any}"), std::string::npos) << ja.signature_text();
  EXPECT_EQ(a.block[0], 8u) << "the launch itself keeps its block";
  // The same kernel without the flag: the block is part of the key (a different binary).
  d.block_at_run_time = false;
  EXPECT_NE(bind(d, a), bind(d, b));
  EXPECT_NE(make_jit_key(bind(d, a), resolved_target()).digest(), ja.digest());
  // The constexprs still split keys.
  d.block_at_run_time = true;
  LaunchSpec c = a;
  c.constexprs[0] = 2;
  EXPECT_NE(bind(d, a), bind(d, c));
}

// An optional pointer the kernel tests for null at run time (Param::null_at_run_time): a call
// without the tensor binds like a call with one of the declared dtype (one binary), where Triton's
// rule (the default) makes a missing pointer the constexpr None (another binary).
TEST(LaunchOptions, aPointerNullAtRunTimeSharesTheBinaryOfAPresentOne) {
  KernelDef d = make_def();
  d.params.push_back(param::in_or_null("w_ptr", DType::f32, Specialize::do_not_specialize));
  Tensor x = Tensor::meta(DType::f32, {64});
  Tensor w = Tensor::meta(DType::f32, {64}, 4);  // misaligned: do_not_specialize ignores it
  const std::optional<Tensor> none;
  LaunchSpec with, without;
  with.constant("BLOCK", 1).ptr("x_ptr", x).integer("n", 5).ptr("w_ptr", w);
  without.constant("BLOCK", 1).ptr("x_ptr", x).integer("n", 5).ptr("w_ptr", none);
  const BoundKey kw = bind(d, with), kn = bind(d, without);
  EXPECT_EQ(kw, kn);
  EXPECT_EQ(kw.hash, kn.hash);
  const JitKey jw = make_jit_key(kw, resolved_target());
  EXPECT_EQ(jw.digest(), make_jit_key(kn, resolved_target()).digest());
  EXPECT_NE(jw.signature_text().find("w_ptr:*fp32"), std::string::npos) << jw.signature_text();
  // Another dtype when present is another binary (the pointer's type is still in the key).
  Tensor w16 = Tensor::meta(DType::f16, {64});
  LaunchSpec with16 = without;
  with16.args[static_cast<std::size_t>(with16.num_args - 1)].tensor = &w16;
  EXPECT_NE(bind(d, with16), kn);
  // Without the policy, a missing pointer is Triton's constexpr None: another key.
  d.params.back() = param::in("w_ptr", Specialize::do_not_specialize);
  EXPECT_NE(bind(d, with), bind(d, without));
  EXPECT_NE(make_jit_key(bind(d, without), resolved_target()).signature_text().find("w_ptr:constexpr=None"),
            std::string::npos);
}

TEST(BinderErrors, arityAndKindMismatchesNameTheKernelAndParam) {
  KernelDef d = make_def();
  Tensor x = Tensor::meta(DType::f32, {64});
  LaunchSpec few;
  few.constant("BLOCK", 1).ptr("x_ptr", x);
  EXPECT_THROW(bind(d, few), BindError);
  LaunchSpec wrong;
  wrong.constant("BLOCK", 1).integer("x_ptr", 3).integer("n", 4);
  try {
    bind(d, wrong);
    FAIL();
  } catch (const BindError& e) {
    EXPECT_NE(std::string(e.what()).find("x_ptr"), std::string::npos) << e.what();
  }
  LaunchSpec no_constexpr;
  no_constexpr.ptr("x_ptr", x).integer("n", 4);
  EXPECT_THROW(bind(d, no_constexpr), BindError);
}

TEST(BinderErrors, argumentsInTheWrongOrderNameBothParameters) {
  // Two same-typed integers swapped bind silently by position alone; the names catch it.
  KernelDef d;
  d.name = "h";
  d.entry = "h_kernel";
  d.constexprs = {{"BLOCK_M"}, {"BLOCK_N"}};
  d.params = {param::integer("num_tokens"), param::integer("hidden")};
  LaunchSpec ok;
  ok.constant("BLOCK_M", 16).constant("BLOCK_N", 64).integer("num_tokens", 7).integer("hidden", 4096);
  EXPECT_NO_THROW(bind(d, ok));
  LaunchSpec swapped;
  swapped.constant("BLOCK_M", 16).constant("BLOCK_N", 64).integer("hidden", 4096).integer("num_tokens", 7);
  try {
    bind(d, swapped);
    FAIL() << "swapped integers bound";
  } catch (const BindError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("kernel 'h'"), std::string::npos) << m;
    EXPECT_NE(m.find("'hidden'"), std::string::npos) << m;
    EXPECT_NE(m.find("'num_tokens'"), std::string::npos) << m;
    EXPECT_NE(m.find("swapped"), std::string::npos) << m;
  }
  LaunchSpec swapped_constexprs;
  swapped_constexprs.constant("BLOCK_N", 64).constant("BLOCK_M", 16).integer("num_tokens", 7).integer("hidden", 1);
  try {
    bind(d, swapped_constexprs);
    FAIL() << "swapped constexprs bound";
  } catch (const BindError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("constexpr #0"), std::string::npos) << m;
    EXPECT_NE(m.find("'BLOCK_M'"), std::string::npos) << m;
    EXPECT_NE(m.find("'BLOCK_N'"), std::string::npos) << m;
  }
  LaunchSpec unknown;
  unknown.constant("BLOCK_M", 16).constant("BLOCK_N", 64).integer("num_token", 7).integer("hidden", 1);
  try {
    bind(d, unknown);
    FAIL() << "a misspelt name bound";
  } catch (const BindError& e) {
    EXPECT_NE(std::string(e.what()).find("'num_token' is not a parameter"), std::string::npos) << e.what();
  }
}

TEST(ValueClass, representativesAndNames) {
  EXPECT_EQ(rep(1), 1);
  EXPECT_EQ(rep(0), 16);
  EXPECT_EQ(rep(16), 16);
  EXPECT_EQ(rep(-16), 16);
  EXPECT_EQ(rep(7), 2);
  EXPECT_EQ(rep(-1), 2);
  EXPECT_EQ(rep(2147483647), 2);
  EXPECT_EQ(rep(2147483648LL), std::int64_t{1} << 32);
  EXPECT_EQ(rep((std::int64_t{1} << 32) + 3), (std::int64_t{1} << 32) + 2);
  EXPECT_EQ(value_class_name(1), "1");
  EXPECT_EQ(value_class_name(4096), "i32:D");
  EXPECT_EQ(value_class_name(4095), "i32");
  EXPECT_EQ(value_class_name(std::int64_t{1} << 33), "i64:D");
  // The representative binds exactly like every member of its class.
  for (std::int64_t v : {std::int64_t{0}, std::int64_t{1}, std::int64_t{5}, std::int64_t{-32}, std::int64_t{4096},
                         std::int64_t{1} << 31, (std::int64_t{1} << 35) + 1}) {
    EXPECT_EQ(bind_int(v), bind_int(rep(v))) << static_cast<long long>(v);
  }
}

TEST(JitKeyText, readableFormAndDigestCoverEveryField) {
  KernelDef d = make_def();
  Tensor x = Tensor::meta(DType::bf16, {64});
  LaunchSpec s;
  s.constant("BLOCK", 256).ptr("x_ptr", x).integer("n", 1);
  s.block = {128, 1, 1};
  CompileTarget t;
  t.arch = "sm_90";
  t.nvrtc_version = "13.0";
  JitKey k = make_jit_key(bind(d, s), t);
  EXPECT_EQ(k.signature_text(), "f[BLOCK=256](x_ptr:*bf16:D, n:constexpr=1){block=128,1,1}");
  EXPECT_NE(k.text().find("arch=sm_90"), std::string::npos);
  EXPECT_NE(k.text().find("nvrtc=13.0"), std::string::npos);
  EXPECT_EQ(k.text().find("/usr/"), std::string::npos) << "no absolute path in a key";
  EXPECT_EQ(k.digest().size(), 32u);
  JitKey other = k;
  other.arch = "sm_100";
  EXPECT_NE(k.digest(), other.digest());
  ASSERT_EQ(diff(k, other).size(), 1u);
  EXPECT_EQ(diff(k, other)[0], "arch: sm_90 -> sm_100");
  other = k;
  other.options.push_back("-G");
  EXPECT_NE(k.digest(), other.digest());
  other = k;
  other.nvrtc_version = "13.1";
  EXPECT_NE(k.digest(), other.digest());
  other = k;
  other.params[1].attr = "D";
  other.params[1].type = "i32";
  EXPECT_EQ(diff(k, other), std::vector<std::string>{"param n: n:constexpr=1 -> n:i32:D"});
}

TEST(JitKeyText, instantiationIsGeneratedFromTheKeyAlone) {
  KernelDef d = make_def();
  Tensor x = Tensor::meta(DType::f32, {64}, 4);
  LaunchSpec s;
  s.constant("BLOCK", 64).ptr("x_ptr", x).integer("n", 32);
  JitKey k = make_jit_key(bind(d, s), resolved_target());
  std::string src = instantiation_source(k, "k_test");
  EXPECT_NE(src.find("static constexpr long long BLOCK = 64LL;"), std::string::npos) << src;
  EXPECT_NE(src.find("using x_ptr_t = float;"), std::string::npos) << src;
  EXPECT_NE(src.find("static constexpr bool x_ptr_aligned = false;"), std::string::npos) << src;
  EXPECT_NE(src.find("using n_t = int;"), std::string::npos) << src;
  EXPECT_NE(src.find("static constexpr int n_class = 16;"), std::string::npos) << src;
  EXPECT_NE(src.find("static_assert"), std::string::npos) << src;
  EXPECT_EQ(name_expression(k, "k_test"), "f_kernel<warmkey_gen::k_test>");
}

// A tensor map binds by kind alone: the shape it describes never reaches the key (the binary reads
// the descriptor at run time), the JitKey names the parameter "tmap", the generated instantiation
// declares warmkey_tensor_map for it, and passing another kind where the signature has a map fails.
TEST(TensorMapRule, bindsByKindAloneAndReachesTheInstantiation) {
  KernelDef d;
  d.name = "tma_kernel";
  d.header = "tma.cuh";
  d.entry = "tma_kernel";
  d.params = {param::in("x"), param::tensor_map("x_map")};
  const Tensor x = Tensor::meta(DType::bf16, {64, 128});
  const Tensor y = Tensor::meta(DType::bf16, {256, 64});
  auto spec_of = [&](std::optional<TensorMapDesc> desc) {
    LaunchSpec s;
    s.ptr("x", x).tensor_map("x_map", desc);
    return s;
  };
  const TensorMapDesc small{&x, 2, {128, 64}, {256}, {64, 1}, 128};
  const TensorMapDesc large{&y, 2, {64, 256}, {128}, {64, 256}, 128};
  const BoundKey a = bind(d, spec_of(small)), b = bind(d, spec_of(large)), none = bind(d, spec_of({}));
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, none);
  const JitKey k = make_jit_key(a, CompileTarget{"sm_90a", {}, "13.0"});
  EXPECT_NE(k.signature_text().find("x_map:tmap"), std::string::npos) << k.signature_text();
  const std::string inst = instantiation_source(k, "k_test");
  EXPECT_NE(inst.find("using x_map_t = warmkey_tensor_map;"), std::string::npos) << inst;
  EXPECT_NE(instantiation_prelude().find("struct alignas(64) warmkey_tensor_map"), std::string::npos);
  LaunchSpec wrong;
  wrong.ptr("x", x).integer("x_map", 3);
  try {
    bind(d, wrong);
    ADD_FAILURE() << "an integer bound where the signature has a tensor map";
  } catch (const BindError& e) {
    EXPECT_NE(std::string(e.what()).find("declared tensor map but launch spec passes integer"), std::string::npos)
        << e.what();
  }
  // A launch spec holds at most kMaxTensorMaps descriptors, and each needs a tensor and a rank.
  LaunchSpec bad;
  EXPECT_THROW(bad.tensor_map("m", TensorMapDesc{nullptr, 2}), BindError);
  EXPECT_THROW(bad.tensor_map("m", TensorMapDesc{&x, 6}), BindError);
}

}  // namespace binder_test
}  // namespace warmkey
