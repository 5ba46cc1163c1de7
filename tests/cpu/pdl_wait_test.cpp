// KernelDef::pdl_wait is a promise about device code: a kernel that sets it may be launched with
// programmatic dependent launch (warmup/contract.h, LaunchOptions::pdl), which is only as ordered
// as a plain launch if the kernel's entry waits (griddepcontrol.wait) before it reads anything. The
// test reads each such kernel's embedded device source: its entry's body must call the wait
// (wk::pdl_entry() or wk::pdl_wait<true>()), with no __ldg before it. A launch option asked of a
// kernel without the promise is ignored.
#include <gtest/gtest.h>

#include <string>

#include "equivalence/kernel_table.h"
#include "warmup/contract.h"
#include "warmup/source_set.h"

namespace warmkey {
namespace pdl_wait_test {

// The body of `entry`'s __global__ definition in `text` (its braces included), or "".
std::string entry_body(const std::string& text, const std::string& entry) {
  std::size_t at = 0;
  while ((at = text.find(entry + "(", at)) != std::string::npos) {
    const std::size_t global = text.rfind("__global__", at);
    const std::size_t semi = text.rfind(';', at);
    if (global != std::string::npos && (semi == std::string::npos || semi < global)) {
      const std::size_t open = text.find(") {", at);
      if (open == std::string::npos) return "";
      int depth = 0;  // up to the matching closing brace
      for (std::size_t i = open + 2; i < text.size(); ++i) {
        depth += text[i] == '{' ? 1 : text[i] == '}' ? -1 : 0;
        if (depth == 0) return text.substr(open + 2, i - open - 1);
      }
      return "";
    }
    at += entry.size();
  }
  return "";
}

TEST(PdlWait, everyKernelThatPromisesTheWaitWaitsFirst) {
  int promised = 0;
  for (const equivalence::KernelDescriptor& row : equivalence::kernel_table()) {
    const KernelDef& def = row.contract().def();
    if (!def.pdl_wait) continue;
    ++promised;
    ASSERT_NE(def.sources, nullptr) << def.name;
    const std::string body = entry_body(def.sources->text(def.header), def.entry);
    ASSERT_FALSE(body.empty()) << def.name << ": no __global__ " << def.entry << " in " << def.header;
    std::size_t wait = body.find("wk::pdl_entry();");
    if (wait == std::string::npos) wait = body.find("wk::pdl_wait<true>();");
    ASSERT_NE(wait, std::string::npos) << def.name << ": KernelDef::pdl_wait is set, but " << def.entry
                                       << " never waits (griddepcontrol.wait)";
    EXPECT_EQ(body.substr(0, wait).find("__ldg"), std::string::npos)
        << def.name << ": a global read comes before the wait";
  }
  // The decode layer's kernels: router, GEMMs, SwiGLU, quantisation, the sum, EPLB, identity.
  EXPECT_GE(promised, 8);
}

// The body finder is not vacuous: a kernel without the wait is told apart.
TEST(PdlWait, aBodyWithoutTheWaitIsFound) {
  const std::string src =
      "template <class S>\n__global__ void k_kernel(const float* x) {\n  float v = __ldg(x);\n}\n"
      "template <class S>\n__global__ void j_kernel(const float* x) {\n  wk::pdl_entry();\n  float v = __ldg(x);\n}\n";
  EXPECT_EQ(entry_body(src, "k_kernel").find("wk::pdl_entry();"), std::string::npos);
  EXPECT_NE(entry_body(src, "j_kernel").find("wk::pdl_entry();"), std::string::npos);
  EXPECT_EQ(entry_body(src, "missing_kernel"), "");
}

}  // namespace pdl_wait_test
}  // namespace warmkey
