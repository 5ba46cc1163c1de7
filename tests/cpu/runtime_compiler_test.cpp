// NvrtcCompiler: real NVRTC compiles of the axpy test kernel (no GPU needed).
#include <gtest/gtest.h>

#include <atomic>
#include <regex>

#include <signal.h>
#include <sys/wait.h>
#include <set>
#include <thread>

#include "tests/cpu/runtime_axpy.h"
#include "tests/support/sanitizer.h"
#include "warmup/arch.h"
#include "warmup/compile_workers.h"
#include "warmup/compiler.h"
#include "warmup/error.h"

namespace warmkey {
namespace runtime_compiler_test {

using test_axpy::axpy_def;
using test_axpy::key;

std::vector<JitKey> scale_keys(const NvrtcCompiler& c, int count, const KernelDef& def = axpy_def()) {
  std::vector<JitKey> out;
  for (int s = 1; s <= count; ++s) out.push_back(make_jit_key(key(64, s, def), c.target()));
  return out;
}

std::string compile_error_of(const NvrtcCompiler& c, const KernelDef& def, const std::vector<JitKey>& keys) {
  try {
    c.compile_batch(def, keys);
  } catch (const CompileError& e) {
    return e.what();
  }
  ADD_FAILURE() << "compile of " << def.name << " did not throw CompileError";
  return "";
}

TEST(NvrtcCompiler, versionIsMajorDotMinorAndFillsTheTarget) {
  NvrtcCompiler c(resolved_target());
  EXPECT_TRUE(std::regex_match(NvrtcCompiler::nvrtc_version(), std::regex(R"(\d+\.\d+)")))
      << NvrtcCompiler::nvrtc_version();
  EXPECT_EQ(c.target().nvrtc_version, NvrtcCompiler::nvrtc_version());
  EXPECT_EQ(c.target().arch, default_arch());  // the device's, else WARMKEY_ARCH's first, else sm_90
}

TEST(NvrtcCompiler, cudaIncludeDirPrefersCudaHome) {
  test_axpy::TempDir home;
  std::filesystem::create_directories(home.path() / "include");
  {
    test_axpy::ScopedEnv env("CUDA_HOME", home.path().string());
    EXPECT_EQ(NvrtcCompiler::cuda_include_dir(), (home.path() / "include").string());
  }
  {
    test_axpy::ScopedEnv env("CUDA_HOME", std::nullopt);
    std::string dir = NvrtcCompiler::cuda_include_dir();
    EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(dir) / "cuda_fp16.h")) << dir;
  }
}

TEST(NvrtcCompiler, compileProducesACubinHoldingTheLoweredName) {
  NvrtcCompiler c(resolved_target());
  JitKey jk = make_jit_key(key(64), c.target());
  std::vector<CompiledKernel> out = c.compile_batch(axpy_def(), {jk});
  ASSERT_EQ(out.size(), 1u);
  const CompiledKernel& k = out[0];
  EXPECT_EQ(k.key, jk);
  EXPECT_EQ(k.digest, jk.digest());
  ASSERT_TRUE(k.cubin);
  EXPECT_EQ(k.cubin->substr(0, 4),
            "\x7f"
            "ELF");
  EXPECT_EQ(k.lowered_name.substr(0, 2), "_Z") << k.lowered_name;
  EXPECT_NE(k.cubin->find(k.lowered_name), std::string::npos) << k.lowered_name;
  EXPECT_EQ(c.programs_compiled(), 1);
  EXPECT_EQ(c.instantiations_compiled(), 1);
}

TEST(NvrtcCompiler, manyKeysShareOneProgramThroughNameExpressions) {
  NvrtcCompiler c(resolved_target());
  std::vector<JitKey> keys = scale_keys(c, 6);
  std::vector<CompiledKernel> out = c.compile_batch(axpy_def(), keys);
  ASSERT_EQ(out.size(), keys.size());
  EXPECT_EQ(c.programs_compiled(), 1);
  EXPECT_EQ(c.instantiations_compiled(), 6);
  std::set<std::string> lowered;
  for (std::size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i].key, keys[i]);
    EXPECT_EQ(out[i].cubin, out[0].cubin) << "one program, one cubin";
    EXPECT_NE(out[i].cubin->find(out[i].lowered_name), std::string::npos) << out[i].lowered_name;
    lowered.insert(out[i].lowered_name);
  }
  EXPECT_EQ(lowered.size(), keys.size()) << "each key has its own instantiation";
}

TEST(NvrtcCompiler, oneProgramPerKeyGivesTheSameLoweredNames) {
  NvrtcCompiler batched(resolved_target()), single(resolved_target());
  std::vector<JitKey> keys = scale_keys(batched, 3);
  std::vector<CompiledKernel> together = batched.compile_batch(axpy_def(), keys);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    std::vector<CompiledKernel> alone = single.compile_batch(axpy_def(), {keys[i]});
    EXPECT_EQ(alone[0].lowered_name, together[i].lowered_name);
    EXPECT_NE(alone[0].cubin, together[i].cubin);
  }
  EXPECT_EQ(single.programs_compiled(), 3);
  EXPECT_EQ(batched.programs_compiled(), 1);
}

TEST(NvrtcCompiler, programSourceIncludesTheHeaderAndEveryInstantiation) {
  NvrtcCompiler c(resolved_target());
  std::vector<JitKey> keys = scale_keys(c, 2);
  std::string src = NvrtcCompiler::program_source(axpy_def(), keys);
  EXPECT_NE(src.find("struct warmkey_same_type"), std::string::npos);
  EXPECT_NE(src.find("#include \"test/axpy.cuh\""), std::string::npos);
  for (const JitKey& k : keys) EXPECT_NE(src.find("k_" + k.digest().substr(0, 16)), std::string::npos);
  EXPECT_EQ(src.find("/usr/"), std::string::npos) << "no file-system path in the program";
}

TEST(NvrtcCompiler, constexprOneAndMisalignedKeysCompile) {
  NvrtcCompiler c(resolved_target());
  BoundKey one = key(1);
  BoundKey misaligned = key(63, 2, axpy_def(), DType::f32, 4);
  JitKey jk_one = make_jit_key(one, c.target());
  JitKey jk_mis = make_jit_key(misaligned, c.target());
  EXPECT_NE(jk_one.signature_text().find("n:constexpr=1"), std::string::npos) << jk_one;
  EXPECT_NE(jk_mis.signature_text().find("x:*fp32,"), std::string::npos) << jk_mis;
  EXPECT_EQ(c.compile_batch(axpy_def(), {jk_one, jk_mis}).size(), 2u);
}

TEST(NvrtcCompiler, cudaHeadersComeFromTheIncludeFolder) {
  NvrtcCompiler c(resolved_target());
  JitKey jk = make_jit_key(key(64, 2, test_axpy::axpy_bf16_def(), DType::bf16), c.target());
  EXPECT_NE(jk.signature_text().find("*bf16"), std::string::npos) << jk;
  std::vector<CompiledKernel> out = c.compile_batch(test_axpy::axpy_bf16_def(), {jk});
  EXPECT_FALSE(out[0].lowered_name.empty());
}

TEST(NvrtcCompiler, compileErrorNamesEveryKeyAndCarriesTheLog) {
  NvrtcCompiler c(resolved_target());
  std::vector<JitKey> keys = scale_keys(c, 2, test_axpy::broken_def());
  std::string msg = compile_error_of(c, test_axpy::broken_def(), keys);
  EXPECT_NE(msg.find("kernel 'axpy_broken'"), std::string::npos) << msg;
  for (const JitKey& k : keys) EXPECT_NE(msg.find(k.signature_text()), std::string::npos) << msg;
  EXPECT_NE(msg.find("NVRTC log"), std::string::npos) << msg;
  EXPECT_NE(msg.find("no_such_member"), std::string::npos) << msg;
}

// Mutant "signature and device kernel disagree": the static_assert of every instantiation fires.
TEST(NvrtcCompiler, deviceEntryDisagreeingWithTheSignatureFailsToCompile) {
  NvrtcCompiler c(resolved_target());
  // Positive control: the agreeing entry of the same signature compiles.
  EXPECT_NO_THROW(c.compile_batch(axpy_def(), {make_jit_key(key(64), c.target())}));
  JitKey jk = make_jit_key(key(64, 2, test_axpy::swapped_def()), c.target());
  std::string msg = compile_error_of(c, test_axpy::swapped_def(), {jk});
  EXPECT_NE(msg.find("disagrees with the host signature of kernel axpy_swapped"), std::string::npos) << msg;
  EXPECT_NE(msg.find(jk.signature_text()), std::string::npos) << msg;
}

TEST(NvrtcCompiler, refusesAKeyMadeForAnotherNvrtc) {
  NvrtcCompiler c(resolved_target());
  JitKey jk = make_jit_key(key(64), c.target());
  jk.nvrtc_version = "0.0";
  std::string msg = compile_error_of(c, axpy_def(), {jk});
  EXPECT_NE(msg.find("NVRTC '0.0'"), std::string::npos) << msg;
  EXPECT_EQ(c.programs_compiled(), 0);
}

TEST(NvrtcCompiler, concurrentBatchesAllSucceed) {
  NvrtcCompiler c(resolved_target());
  std::vector<JitKey> keys = scale_keys(c, 4);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (const JitKey& k : keys) {
    threads.emplace_back([&, k] {
      try {
        if (c.compile_batch(axpy_def(), {k}).size() == 1) ok.fetch_add(1);
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 4);
  EXPECT_EQ(c.programs_compiled(), 4);
}

// ---- compile_batch_forked: the same program compiled in a child process --------------------------

TEST(NvrtcCompiler, aForkedCompileGivesTheSameCubinAndNamesAsAnInProcessOne) {
  NvrtcCompiler c(resolved_target());
  const std::vector<JitKey> keys = scale_keys(c, 3);
  const std::vector<CompiledKernel> here = c.compile_batch(axpy_def(), keys);
  const std::vector<CompiledKernel> forked = c.compile_batch_forked(axpy_def(), keys);
  ASSERT_EQ(forked.size(), keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(forked[i].key, keys[i]);
    EXPECT_EQ(forked[i].digest, keys[i].digest());
    EXPECT_EQ(forked[i].lowered_name, here[i].lowered_name);
    EXPECT_EQ(*forked[i].cubin, *here[i].cubin) << "NVRTC is deterministic: the child's cubin is the same bytes";
  }
  EXPECT_EQ(forked[0].cubin, forked[2].cubin) << "the keys of one program share its cubin";
  // The child's compile is counted here, as an in-process one is.
  EXPECT_EQ(c.programs_compiled(), 2);
  EXPECT_EQ(c.instantiations_compiled(), 6);
  EXPECT_EQ(c.forked_fallbacks(), 0);
}

TEST(NvrtcCompiler, aForkedCompileErrorIsTheSameCompileError) {
  NvrtcCompiler c(resolved_target());
  const std::vector<JitKey> keys = scale_keys(c, 2, test_axpy::broken_def());
  const std::string here = compile_error_of(c, test_axpy::broken_def(), keys);
  std::string forked;
  try {
    c.compile_batch_forked(test_axpy::broken_def(), keys);
    ADD_FAILURE() << "a broken program compiled in a child did not throw";
  } catch (const CompileError& e) {
    forked = e.what();
  }
  EXPECT_EQ(forked, here);
  EXPECT_NE(forked.find("no_such_member"), std::string::npos) << forked;
  EXPECT_EQ(c.programs_compiled(), 2) << "a failed program counts, in the child as here";
  EXPECT_EQ(c.forked_fallbacks(), 0);
  // Keys made for another NVRTC: refused in the child with the same message, nothing compiled.
  JitKey other = make_jit_key(key(64), c.target());
  other.nvrtc_version = "0.0";
  EXPECT_THROW(c.compile_batch_forked(axpy_def(), {other}), CompileError);
  EXPECT_EQ(c.programs_compiled(), 2) << "refused before NVRTC runs: nothing counted";
}

TEST(NvrtcCompiler, forkedCompilesFromManyThreadsAllSucceed) {
  NvrtcCompiler c(resolved_target());
  const std::vector<JitKey> keys = scale_keys(c, 6);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (const JitKey& k : keys) {
    threads.emplace_back([&, k] {
      try {
        const auto out = c.compile_batch_forked(axpy_def(), {k});
        if (out.size() == 1 && !out[0].cubin->empty()) ok.fetch_add(1);
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 6);
  EXPECT_EQ(c.programs_compiled(), 6);
#if WARMKEY_TEST_ASAN
  // clang 14's ASan does not hold its allocator's locks across fork(): a child forked while another
  // thread allocates can hang (1 to 4 of these 6 did, in 10 repetitions). The compiler kills such a
  // child (no answer, no CPU for 5 s) and compiles here: every program still succeeds.
  EXPECT_LE(c.forked_fallbacks(), 6);
#else
  EXPECT_EQ(c.forked_fallbacks(), 0);
#endif
}

// A child that never answers and uses no CPU (as one forked while another thread held a lock it
// needs) is killed after 5 s, and the program is compiled in this process: same result.
TEST(NvrtcCompiler, aStuckForkedChildIsKilledAndTheProgramCompiledHere) {
  NvrtcCompiler c(resolved_target());
  const std::vector<JitKey> keys = scale_keys(c, 2);
  const std::vector<CompiledKernel> here = c.compile_batch(axpy_def(), keys);
  ::setenv("WARMKEY_TEST_FORKED_CHILD_HANG", "1", 1);
  std::vector<CompiledKernel> forked;
  try {
    forked = c.compile_batch_forked(axpy_def(), keys);
  } catch (...) {
    ::unsetenv("WARMKEY_TEST_FORKED_CHILD_HANG");
    throw;
  }
  ::unsetenv("WARMKEY_TEST_FORKED_CHILD_HANG");
  EXPECT_EQ(c.forked_fallbacks(), 1);
  ASSERT_EQ(forked.size(), here.size());
  for (std::size_t i = 0; i < here.size(); ++i) {
    EXPECT_EQ(*forked[i].cubin, *here[i].cubin);
    EXPECT_EQ(forked[i].lowered_name, here[i].lowered_name);
  }
}

TEST(NvrtcWorkerPool, workersCompileRequestsAndADeadWorkerFallsBackInProcess) {
  NvrtcCompiler c(resolved_target());
  const std::vector<JitKey> keys = scale_keys(c, 4);
  std::vector<const KernelDef*> defs(keys.size(), &axpy_def());
  std::vector<const JitKey*> ptrs;
  for (const JitKey& k : keys) ptrs.push_back(&k);
  const std::vector<CompiledKernel> here = c.compile_batch(axpy_def(), keys);
  {
    NvrtcWorkerPool pool(c, defs, ptrs, 2);
    ASSERT_EQ(pool.size(), 2);
    // Worker 0 serves two requests in a row; each answer is what compile_batch gives.
    const auto a = pool.compile(0, {0, 1});
    const auto b = pool.compile(0, {3});
    ASSERT_EQ(a.size(), 2u);
    ASSERT_EQ(b.size(), 1u);
    EXPECT_EQ(a[1].lowered_name, here[1].lowered_name);
    EXPECT_EQ(b[0].key, keys[3]);
    EXPECT_EQ(b[0].lowered_name, here[3].lowered_name);
    EXPECT_EQ(c.forked_fallbacks(), 0);
    // A worker killed between requests: the request is compiled here, correctly, and counted.
    const int victim = pool.pid(1);
    ASSERT_GT(victim, 0);
    ASSERT_EQ(::kill(victim, SIGKILL), 0);
    const auto d = pool.compile(1, {2});
    ASSERT_EQ(d.size(), 1u);
    EXPECT_EQ(d[0].lowered_name, here[2].lowered_name);
    EXPECT_EQ(c.forked_fallbacks(), 1);
    EXPECT_EQ(pool.pid(1), -1);
  }  // the pool reaps its children: none is left behind
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1) << "a worker was not reaped";
  EXPECT_EQ(c.programs_compiled(), 1 + 2 + 1) << "in-process, two in worker 0, one after the fallback";
}

}  // namespace runtime_compiler_test
}  // namespace warmkey
