// The libFuzzer harness of every kernel with an input space: CMake builds this one source once per
// kernel as <stem>_fuzzer, with WARMKEY_FUZZ_KERNEL="<stem>". The input bytes decode into a model
// config and a runtime input (spaces/byte_draw.h), and properties P1-P5 are the oracle
// (equivalence/fuzz_oracle.h).
#include <cstddef>
#include <cstdint>

#include "equivalence/fuzz_oracle.h"

#ifndef WARMKEY_FUZZ_KERNEL
#error "build with -DWARMKEY_FUZZ_KERNEL=\"<stem>\" (fuzz/CMakeLists.txt does)"
#endif

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return warmkey::equivalence::fuzz_entry(WARMKEY_FUZZ_KERNEL, data, size);
}
