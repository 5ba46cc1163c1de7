// Embedded device sources: include closure and digests.
#include "warmup/source_set.h"

#include <xxhash.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <set>

#include "warmup/error.h"

namespace warmkey {
namespace {
std::mutex g_digest_mutex;
std::atomic<std::uint64_t> g_generation{0};

// Names of `#include "x"` lines in text.
std::vector<std::string> quoted_includes(const std::string& text) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while ((pos = text.find("#include", pos)) != std::string::npos) {
    std::size_t q = text.find_first_of("\"<\n", pos + 8);
    if (q != std::string::npos && text[q] == '"') {
      std::size_t end = text.find('"', q + 1);
      if (end != std::string::npos) out.push_back(text.substr(q + 1, end - q - 1));
    }
    pos += 8;
  }
  return out;
}
}  // namespace

std::string hex_digest(std::string_view bytes) {
  XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return buf;
}

void SourceSet::add(std::string name, std::string text) {
  std::lock_guard lock(g_digest_mutex);
  digests_.clear();
  texts_[std::move(name)] = std::move(text);
  g_generation.fetch_add(1, std::memory_order_acq_rel);
}

std::uint64_t source_generation() { return g_generation.load(std::memory_order_acquire); }

bool SourceSet::contains(std::string_view name) const { return texts_.find(name) != texts_.end(); }

const std::string& SourceSet::text(std::string_view name) const {
  auto it = texts_.find(name);
  if (it == texts_.end()) throw Error(str_cat("device source '", name, "' is not embedded"));
  return it->second;
}

std::vector<std::string> SourceSet::closure(std::string_view name) const {
  std::set<std::string> seen;
  std::vector<std::string> todo{std::string(name)};
  while (!todo.empty()) {
    std::string n = todo.back();
    todo.pop_back();
    if (!seen.insert(n).second) continue;
    for (auto& inc : quoted_includes(text(n))) {
      if (contains(inc)) todo.push_back(inc);
    }
  }
  return {seen.begin(), seen.end()};
}

std::string SourceSet::digest(std::string_view name) const {
  std::lock_guard lock(g_digest_mutex);
  auto it = digests_.find(name);
  if (it != digests_.end()) return it->second;
  std::string all;
  for (auto& n : closure(name)) {
    all += n;
    all.push_back('\0');
    all += text(n);
    all.push_back('\0');
  }
  std::string d = hex_digest(all);
  digests_.emplace(std::string(name), d);
  return d;
}

}  // namespace warmkey
