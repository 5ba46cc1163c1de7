// Identical-code folding (warmup/compiler.h, off in warmups): the PTX folding on hand-written PTX,
// and real compiles of the axpy kernel whose keys differ only in what its code ignores.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/cpu/runtime_axpy.h"
#include "warmup/arch.h"
#include "warmup/compiler.h"
#include "warmup/ptx_fold.h"

namespace warmkey {
namespace ptx_fold_test {

const std::string kA = "k_00000000000000aa", kB = "k_00000000000000bb", kC = "k_00000000000000cc";

// One entry of owner `k`: `body` inside, a Spec global no code reads, a debug string reference.
std::string entry(const std::string& k, int function, const std::string& body, int info) {
  return "\t// .globl\t_Z1fIN3gen18" + k + "EEvv\n.global .align 4 .u32 _ZN3gen18" + k +
         "7n_classE = " + std::to_string(function * 16) + ";\n.visible .entry _Z1fIN3gen18" + k +
         "EEvv(\n\t.param .u64 _Z1fIN3gen18" + k +
         "EEvv_param_0\n)\n.maxntid 128, 1, 1\n{\n\t.reg .b32 \t%r<4>;\n\t.loc\t1 3 7, function_name $L__info_string" +
         std::to_string(info) + ", inlined_at 1 9 2\n\t" + body + "\n\t@%p1 bra \t$L__BB" + std::to_string(function) +
         "_2;\n\t{ // inline asm\n\tmov.u32 %r1, 1;\n\t}\n$L__BB" + std::to_string(function) + "_2:\n\tret;\n\n}\n";
}

std::string module(const std::vector<std::string>& entries) {
  std::string ptx = "//\n// Generated\n//\n\n.version 9.0\n.target sm_90\n.address_size 64\n\n";
  for (const std::string& e : entries) ptx += e;
  ptx +=
      "\t.file\t1 \"x.cu\"\n\t.section\t.debug_str\n\t{\n$L__info_string0:\n.b8 95,90,0\n"
      "$L__info_string1:\n.b8 95,90,0\n$L__info_string2:\n.b8 95,89,0\n\n\t}\n";
  return ptx;
}

TEST(PtxFold, identicalEntriesFoldOntoTheFirstAndTheirItemsGo) {
  // A and B: same body, other function numbers, other debug labels with the same text, other
  // values in an unread Spec global. C: another body.
  const std::string ptx = module({entry(kA, 0, "add.s32 %r2, %r1, 3;", 0), entry(kB, 1, "add.s32 %r2, %r1, 3;", 1),
                                  entry(kC, 2, "add.s32 %r2, %r1, 4;", 0)});
  const PtxFold f = fold_identical_ptx(ptx, {kA, kB, kC});
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.rep, (std::vector<std::size_t>{0, 0, 2}));
  EXPECT_NE(f.ptx.find(".entry _Z1fIN3gen18" + kA), std::string::npos);
  EXPECT_EQ(f.ptx.find(".entry _Z1fIN3gen18" + kB), std::string::npos);
  EXPECT_EQ(f.ptx.find("_ZN3gen18" + kB + "7n_classE"), std::string::npos);  // B's items go with it
  EXPECT_NE(f.ptx.find(".entry _Z1fIN3gen18" + kC), std::string::npos);
  EXPECT_NE(f.ptx.find(".section\t.debug_str"), std::string::npos);  // shared items stay
  EXPECT_NE(f.ptx.find(".target sm_90"), std::string::npos);
}

TEST(PtxFold, aDifferentDebugStringOrInstructionKeepsEntriesApart) {
  // Same body, but the inlined function's name differs ($L__info_string2 is "_Y").
  PtxFold f = fold_identical_ptx(
      module({entry(kA, 0, "add.s32 %r2, %r1, 3;", 0), entry(kB, 1, "add.s32 %r2, %r1, 3;", 2)}), {kA, kB});
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.rep, (std::vector<std::size_t>{0, 1}));
  // One character of an instruction.
  f = fold_identical_ptx(module({entry(kA, 0, "add.s32 %r2, %r1, 3;", 0), entry(kB, 1, "add.s32 %r2, %r1, 5;", 0)}),
                         {kA, kB});
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.rep, (std::vector<std::size_t>{0, 1}));
}

TEST(PtxFold, aReadGlobalOfTheOwnerIsPartOfItsCode) {
  // Both bodies read their own n_class global, whose values differ (0 and 16): not identical.
  const std::string body = "ld.global.u32 %r2, [_ZN3gen18OWNER7n_classE];";
  auto with = [&](const std::string& k) {
    std::string b = body;
    b.replace(b.find("OWNER"), 5, k);
    return b;
  };
  const PtxFold f = fold_identical_ptx(module({entry(kA, 0, with(kA), 0), entry(kB, 1, with(kB), 1)}), {kA, kB});
  ASSERT_TRUE(f.ok);
  EXPECT_EQ(f.rep, (std::vector<std::size_t>{0, 1}));
}

TEST(PtxFold, refusesAnItemOfTwoOwnersOrAnOwnerWithoutItems) {
  std::string shared = entry(kA, 0, "mov.u64 %rd1, _ZN3gen18" + kB + "7n_classE;", 0);
  EXPECT_FALSE(fold_identical_ptx(module({shared, entry(kB, 1, "add.s32 %r2, %r1, 3;", 1)}), {kA, kB}).ok);
  EXPECT_FALSE(fold_identical_ptx(module({entry(kA, 0, "add.s32 %r2, %r1, 3;", 0)}), {kA, kB}).ok);
  EXPECT_FALSE(fold_identical_ptx(module({entry(kA, 0, "add.s32 %r2, %r1, 3;", 0)}), {kA, kA}).ok);  // one name twice
}

// Real NVRTC + nvJitLink: axpy keys with n = 64 (n:D) and n = 65 compile to the same code (the
// kernel only asks whether n is the constant 1); SCALE 3 is other code.
TEST(PtxFold, realCompileSharesTheEntryOfKeysWithIdenticalCode) {
  if (!NvrtcCompiler::ptx_linker_available()) GTEST_SKIP() << "nvJitLink of NVRTC's version is not installed";
  NvrtcCompiler c(resolved_target());
  c.set_share_identical_code(true);
  const std::vector<JitKey> keys{make_jit_key(test_axpy::key(64, 2), c.target()),
                                 make_jit_key(test_axpy::key(65, 2), c.target()),
                                 make_jit_key(test_axpy::key(64, 3), c.target())};
  ASSERT_NE(keys[0].digest(), keys[1].digest());
  const auto out = c.compile_batch(test_axpy::axpy_def(), keys);
  ASSERT_EQ(out.size(), 3U);
  EXPECT_EQ(c.shared_instantiations(), 1);
  EXPECT_EQ(out[1].lowered_name, out[0].lowered_name);
  EXPECT_NE(out[2].lowered_name, out[0].lowered_name);
  EXPECT_EQ(out[0].cubin, out[2].cubin);  // one cubin for the program
  EXPECT_NE(out[0].cubin->find(out[0].lowered_name), std::string::npos);
  EXPECT_NE(out[0].cubin->find(out[2].lowered_name), std::string::npos);
  for (std::size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(out[i].digest, keys[i].digest());

  // Off (the default): NVRTC's own cubin, every key its own entry.
  NvrtcCompiler plain(resolved_target());
  EXPECT_FALSE(plain.share_identical_code());
  const auto own = plain.compile_batch(test_axpy::axpy_def(), keys);
  EXPECT_EQ(plain.shared_instantiations(), 0);
  EXPECT_NE(own[1].lowered_name, own[0].lowered_name);
}

}  // namespace ptx_fold_test
}  // namespace warmkey
