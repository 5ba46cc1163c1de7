// PC through the real NVRTC compiler.
#include "equivalence/compile_check.h"

#include <unordered_set>

#include "warmup/compiler.h"

namespace warmkey::equivalence {

std::vector<Violation> check_compiles(const WarmSet& warm, std::size_t max_keys) {
  if (!warm.used() || warm.keys().empty()) return {};
  std::vector<JitKey> keys;
  std::unordered_set<std::string> seen;
  const CompileKey* first = nullptr;
  for (const CompileKey& k : warm.keys()) {
    const BoundKey* b = warm.bound_of(k);
    if (b == nullptr) continue;
    JitKey jk = warm.jit_key(*b);
    if (!seen.insert(jk.digest()).second) continue;
    if (!first) first = &k;
    keys.push_back(std::move(jk));
    if (keys.size() >= max_keys) break;
  }
  if (keys.empty()) return {};
  try {
    NvrtcCompiler compiler(warm.target());
    compiler.compile_batch(warm.kernel().def(), keys);
  } catch (const std::exception& e) {
    Violation v;
    v.property = Property::PC;
    v.kernel = warm.kernel().name();
    v.config = warm.config().name;
    v.expected = *first;
    v.expected_jit_key = keys.front().signature_text();
    v.found_by = str_cat("NVRTC compile of ", keys.size(), " warmup key(s)");
    std::string what = e.what();
    if (what.size() > 4000) what = what.substr(0, 4000) + " ...";
    v.detail = str_cat("NVRTC rejects the generated instantiation: ", what);
    return {v};
  }
  return {};
}

}  // namespace warmkey::equivalence
