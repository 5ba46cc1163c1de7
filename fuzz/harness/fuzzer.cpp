// The libFuzzer harness of every kernel with an input space: CMake builds this one source once per
// kernel as <stem>_fuzzer, with WARMKEY_FUZZ_KERNEL="<stem>". The input bytes decode into a model
// config and a runtime input (spaces/byte_draw.h), and properties P1-P5 are the oracle
// (equivalence/fuzz_oracle.h).
//
// Built with WARMKEY_FUZZ_KERNEL_FROM_ENV instead (the warmkey_fuzz_any target), one binary serves
// every kernel: the kernel is $WARMKEY_FUZZ_KERNEL, read once. For campaigns on hosts where fifteen
// binaries do not fit (a lent machine's upload limit); ci/fuzz-campaign --any-binary makes the
// per-kernel names for it.
#include <cstddef>
#include <cstdint>

#include "equivalence/fuzz_oracle.h"

#if defined(WARMKEY_FUZZ_KERNEL_FROM_ENV)
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {
const char* fuzz_kernel() {
  static const std::string kernel = [] {
    const char* v = std::getenv("WARMKEY_FUZZ_KERNEL");
    if (v == nullptr || *v == '\0') {
      std::fprintf(stderr, "warmkey_fuzz_any: set WARMKEY_FUZZ_KERNEL to a kernel name (e.g. moe_align)\n");
      std::abort();
    }
    return std::string(v);
  }();
  return kernel.c_str();
}
}  // namespace
#define WARMKEY_FUZZ_KERNEL fuzz_kernel()
#endif

#ifndef WARMKEY_FUZZ_KERNEL
#error "build with -DWARMKEY_FUZZ_KERNEL=\"<stem>\" (fuzz/CMakeLists.txt does)"
#endif

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return warmkey::equivalence::fuzz_entry(WARMKEY_FUZZ_KERNEL, data, size);
}
