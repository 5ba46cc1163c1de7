// libFuzzer harness for dsv4_topk: the input bytes decode into a model config and a runtime input
// (spaces/byte_draw.h), and properties P1-P5 are the oracle (equivalence/fuzz_oracle.h).
#include <cstddef>
#include <cstdint>

#include "equivalence/fuzz_oracle.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return warmkey::equivalence::fuzz_entry("dsv4_topk", data, size);
}
