// Device sources embedded in the binary, handed to NVRTC as named headers.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace warmkey {

// A set of named device headers ("moe_mul_sum/moe_mul_sum.cuh" -> text). Includes between them
// use these names, so no file-system path ever reaches NVRTC or a key.
class SourceSet {
 public:
  void add(std::string name, std::string text);
  bool contains(std::string_view name) const;
  const std::string& text(std::string_view name) const;  // throws Error when absent
  // `name` and every header it includes from this set, transitively, sorted by name.
  std::vector<std::string> closure(std::string_view name) const;
  // Hex digest over the names and texts of closure(name); cached.
  std::string digest(std::string_view name) const;
  const std::map<std::string, std::string, std::less<>>& all() const { return texts_; }

 private:
  std::map<std::string, std::string, std::less<>> texts_;
  mutable std::map<std::string, std::string, std::less<>> digests_;
};

// Hex of XXH3-128 over bytes: the digest used for keys and files.
std::string hex_digest(std::string_view bytes);

// A process-wide count of device-source edits: bumped by every SourceSet::add (of any set). A
// runtime compares it with the value it last saw on each lookup (one atomic load on the hit path):
// when it moved, in-memory entries whose JitKey is no longer the one their bound key makes now are
// dropped, so the old text's binary is never served.
std::uint64_t source_generation();

}  // namespace warmkey
