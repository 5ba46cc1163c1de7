// cubin_resources reads what ptxas wrote of each kernel (registers, the local-memory frame, static
// shared memory) from real NVRTC cubins, and refuses bytes that are not a cubin without reading
// past them.
#include "warmup/cubin_resources.h"

#include <gtest/gtest.h>

#include "tests/cpu/runtime_axpy.h"
#include "warmup/arch.h"
#include "warmup/compiler.h"
#include "warmup/error.h"

namespace warmkey {
namespace cubin_resources_test {

// A kernel whose per-thread array is indexed at run time (so it lives in local memory: a frame of
// at least 64 floats) with FLOATS floats of static shared memory; test/local.cuh has 256, and
// test/local_big.cuh 512.
constexpr const char* kLocalSource = R"(#pragma once
template <class S>
__global__ void local_kernel(const typename S::x_t* x, const typename S::y_t* y, typename S::out_t* out,
                             typename S::n_t n) {
  __shared__ float tile[FLOATS];
  float slots[64];
  for (int i = 0; i < 64; ++i) slots[i] = x[(threadIdx.x + i) % n];
  tile[threadIdx.x % FLOATS] = slots[static_cast<int>(y[threadIdx.x % n]) & 63];
  __syncthreads();
  if (threadIdx.x < n) out[threadIdx.x] = tile[(threadIdx.x + 1) % FLOATS] * S::SCALE;
}
)";

const SourceSet& sources() {
  static const SourceSet s = [] {
    SourceSet set;
    set.add("test/local.cuh", std::string("#define FLOATS 256\n") + kLocalSource);
    set.add("test/local_big.cuh", std::string("#define FLOATS 512\n") + kLocalSource);
    return set;
  }();
  return s;
}

std::vector<CompiledKernel> compile(const KernelDef& def) {
  NvrtcCompiler compiler(resolved_target());
  return compiler.compile_batch(def, {make_jit_key(test_axpy::key(64, 2, def), compiler.target())});
}

TEST(CubinResources, readsRegistersFrameAndSharedOfRealCubins) {
  const auto plain = compile(test_axpy::axpy_def());
  const std::vector<KernelResources> p = cubin_resources(*plain.at(0).cubin);
  ASSERT_EQ(p.size(), 1U);
  EXPECT_EQ(p[0].name, plain[0].lowered_name);
  EXPECT_GT(p[0].registers, 0);
  EXPECT_LE(p[0].registers, 255);
  EXPECT_EQ(p[0].frame_bytes, 0);
  EXPECT_EQ(p[0].shared_section, 0);  // no shared memory, no section

  KernelDef local = test_axpy::make_def("local", "test/local.cuh", "local_kernel");
  local.sources = &sources();
  KernelDef big = test_axpy::make_def("local_big", "test/local_big.cuh", "local_kernel");
  big.sources = &sources();
  const auto with_frame = compile(local);
  const std::vector<KernelResources> l = cubin_resources(*with_frame.at(0).cubin);
  const std::vector<KernelResources> b = cubin_resources(*compile(big).at(0).cubin);
  ASSERT_EQ(l.size(), 1U);
  ASSERT_EQ(b.size(), 1U);
  EXPECT_EQ(l[0].name, with_frame[0].lowered_name);
  EXPECT_GT(l[0].registers, 0);
  EXPECT_GE(l[0].frame_bytes, 64 * 4) << "the run-time indexed array lives in local memory";
  // The section holds the static __shared__ bytes and what the block reserves besides (1 KiB with
  // NVRTC 13.0 for sm_90): 256 more floats are 1 KiB more.
  EXPECT_GE(l[0].shared_section, 256 * 4);
  EXPECT_EQ(b[0].shared_section - l[0].shared_section, 256 * 4);
}

TEST(CubinResources, refusesWhatIsNotACubinWithoutReadingPastIt) {
  EXPECT_THROW(cubin_resources(""), Error);
  EXPECT_THROW(cubin_resources("not an elf file at all, but long enough to hold a 64-byte header......"), Error);
  const auto compiled = compile(test_axpy::axpy_def());
  const std::string& cubin = *compiled.at(0).cubin;
  // Every truncation either parses (the section table lies before the cut) or throws: no crash,
  // no read past the end (the ASan preset runs this).
  for (std::size_t cut : {std::size_t{64}, cubin.size() / 4, cubin.size() / 2, cubin.size() - 1}) {
    try {
      (void)cubin_resources(std::string_view(cubin).substr(0, cut));
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cubin_resources"), std::string::npos) << e.what();
    }
  }
  std::string bad = cubin;
  bad[0x3e] = static_cast<char>(0xff);  // the string table's index past the section count
  bad[0x3f] = static_cast<char>(0xff);
  EXPECT_THROW(cubin_resources(bad), Error);
}

}  // namespace cubin_resources_test
}  // namespace warmkey
