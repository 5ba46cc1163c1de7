// Bytes -> config and runtime input -> properties, for libFuzzer and the regression replay.
#include "equivalence/fuzz_oracle.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>

#include "equivalence/config_projection.h"
#include "equivalence/kernel_table.h"
#include "equivalence/properties/case_checker.h"
#include "spaces/byte_draw.h"
#include "spaces/config.h"

namespace warmkey::equivalence {
namespace {

struct TransparentHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Draws through a ByteDraw and records every result. draw_config is a function of its draws'
// results, so two inputs whose config draws give the same results decode to the same config (name
// included), whatever their bytes: libFuzzer's mutations of the config bytes mostly keep them (a
// flag reads one bit of a byte, a pick the byte modulo its count).
class TracingDraw final : public spaces::Draw {
 public:
  explicit TracingDraw(spaces::ByteDraw& inner) : inner_(inner) {
    set_labelling(false);
    trace_.reserve(256);  // draw_config draws at most about 25 times: one allocation
  }
  std::string take_trace() { return std::move(trace_); }

 protected:
  std::int64_t draw_integer(std::string_view name, std::int64_t lo, std::int64_t hi,
                            std::span<const std::int64_t> marks) override {
    return note(inner_.integer(name, lo, hi, marks));
  }
  std::size_t draw_pick(std::string_view name, std::size_t n) override { return note(inner_.pick(name, n)); }
  std::size_t draw_pick_within_class(std::string_view name, std::size_t n) override {
    return note(inner_.pick_within_class(name, n));
  }

 private:
  template <class T>
  T note(T v) {
    trace_.append(reinterpret_cast<const char*>(&v), sizeof v);
    return v;
  }
  spaces::ByteDraw& inner_;
  std::string trace_;
};

// One kernel's state across inputs: the warm set of each config seen, found by the results of its
// draws, and the warmup evaluations of its keys (which do not depend on the config) shared by all
// of them. A draw hit skips warmup_keys() and the set. (Every input's config is decoded: a table of
// the byte prefixes configs were decoded from, probed at each prefix length before decoding, took
// more CPU in cache misses than the decoding it spared; docs/PERFORMANCE.md, sixth pass.)
// A new config whose projection on the kernel's warmup-key fields (its row's projection:
// spaces/projection.h, equivalence/config_projection.h) was seen before shares that config's warm
// set: the same keys (the projection property), so the same verdicts; only its name (in reports)
// and the runtime input's draws are its own. A new projection whose warmup identity (the
// kernel's, where it declares one) was seen before shares that set too, for the same reason (the
// identity property).
struct FuzzState {
  // Past this many keys and configs in all, the oldest warm sets are dropped, one or two per
  // new config: bounded memory without a pause (dropping thousands of sets at once once stalled an
  // input past libFuzzer's -timeout on a loaded machine: fuzz/regressions/compute_identity/reports/).
  // 2^17 since warm sets are shared by projection (2^15 before): fused_moe peaks at 766 MB over
  // 100,000 runs (ASan quarantine included), and evicting less spares recomputing warmup_keys.
  static constexpr std::size_t kMaxKeys = std::size_t{1} << 17;

  // A warm set and, when it was made for a new identity, that identity (a key of by_identity).
  struct Set {
    std::shared_ptr<const WarmSet> warm;
    const std::string* identity = nullptr;
  };
  // One decoded config and its warm set (shared by the configs of one projection or identity).
  struct Entry {
    ModelConfig config;
    Set set;
    std::optional<std::string> projection;  // the key of the set in by_projection, when shared
  };
  // The set of a projection and the configs (entries) of that projection.
  struct Projected {
    Set set;
    std::size_t configs = 0;
  };

  const spaces::InputSpace* space = nullptr;
  const Kernel* kernel = nullptr;
  std::unique_ptr<Kernel> planted;  // WARMKEY_FUZZ_MUTANT's mutant, when it names one of this kernel
  // The kernel's warmup-key fields and identity; nullopt and nullptr (a set per config) without a
  // declaration or with a planted mutant (which may read other fields than the contract it mutates).
  std::optional<KeyFields> fields;
  WarmupIdentity identity = nullptr;
  WarmupMemo memo;
  std::unordered_map<std::string, Entry, TransparentHash, std::equal_to<>> by_trace;
  std::unordered_map<std::string, Projected, TransparentHash, std::equal_to<>> by_projection;
  std::unordered_map<std::string, std::shared_ptr<const WarmSet>, TransparentHash, std::equal_to<>> by_identity;
  std::deque<std::string> order;  // by_trace's ids, oldest first
  std::size_t keys = 0;           // warmup keys of the sets, plus one per set and per config
  // Counters (WARMKEY_FUZZ_STATS=1 prints them at exit).
  std::size_t trace_hits = 0, misses = 0, projection_hits = 0, identity_hits = 0, evicted = 0;

  // The warm set of a new projection (or of a config without one): the set of an equal identity,
  // else a new one.
  Set set_for(const ModelConfig& config, bool projected) {
    std::string id;
    if (projected && identity != nullptr && identity(config, id)) {
      auto it = by_identity.find(id);
      if (it != by_identity.end()) {
        ++identity_hits;
        return {it->second, &it->first};
      }
      auto warm = make_set(config);
      it = by_identity.emplace(std::move(id), warm).first;
      return {std::move(warm), &it->first};
    }
    return {make_set(config), nullptr};
  }

  std::shared_ptr<const WarmSet> make_set(const ModelConfig& config) {
    auto warm = std::make_shared<const WarmSet>(*space, *kernel, config, verification_target(), /*lazy=*/true, &memo);
    keys += warm->keys().size() + 1;
    return warm;
  }

  // The entry of the config whose draws gave `trace`; made from `config` when no earlier input's
  // draws gave the same.
  const Entry& add(std::string trace, ModelConfig config) {
    evict();  // first: it may drop the set this input's draws would find
    auto it = by_trace.find(trace);
    if (it != by_trace.end()) {
      ++trace_hits;
    } else {
      ++misses;
      Entry e;
      if (fields) e.projection = project(config, *fields);
      if (e.projection) {
        auto p = by_projection.find(*e.projection);
        if (p != by_projection.end()) {
          ++projection_hits;
        } else {
          Set set = set_for(config, /*projected=*/true);
          p = by_projection.emplace(*e.projection, Projected{std::move(set), 0}).first;
        }
        ++p->second.configs;
        e.set = p->second.set;
      } else {
        e.set = set_for(config, /*projected=*/false);
      }
      e.config = std::move(config);
      ++keys;
      order.push_back(trace);
      it = by_trace.emplace(std::move(trace), std::move(e)).first;
    }
    return it->second;
  }

  void evict() {
    while (keys >= kMaxKeys && !order.empty()) {
      ++evicted;
      auto old = by_trace.find(order.front());
      Entry& e = old->second;
      --keys;
      // A projection goes with its last config; the set with its last projection or config (the
      // projection's entry and by_identity hold one more reference each).
      if (e.projection) {
        auto p = by_projection.find(*e.projection);
        if (--p->second.configs == 0) by_projection.erase(p);
      }
      if (e.set.warm.use_count() == (e.set.identity != nullptr ? 2 : 1)) {
        keys -= e.set.warm->keys().size() + 1;
        if (e.set.identity != nullptr) by_identity.erase(by_identity.find(*e.set.identity));
      }
      by_trace.erase(old);
      order.pop_front();
    }
  }
};

FuzzState& state_of(std::string_view kernel) {
  // Never destroyed: freeing the warm sets and configs at exit took 6 % of a 40,000-run
  // fused_moe process's CPU time (perf), and the process is ending anyway.
  static auto& states =
      *new std::unordered_map<std::string, std::unique_ptr<FuzzState>, TransparentHash, std::equal_to<>>();
  static std::pair<std::string, FuzzState*> last;  // a harness asks for one kernel, input after input
  if (last.second != nullptr && last.first == kernel) return *last.second;
  static const bool print_stats = [] {
    const char* e = std::getenv("WARMKEY_FUZZ_STATS");
    if (e != nullptr && *e != '\0' && *e != '0') {
      std::atexit([] {
        for (auto& [name, st] : states)
          std::fprintf(stderr,
                       "warmkey fuzz stats: %s: configs hit by their draws %zu, new %zu "
                       "(of which sharing the warm set of an equal projection %zu, of an equal warmup identity %zu), "
                       "evicted %zu, memo keys %zu\n",
                       name.c_str(), st->trace_hits, st->misses, st->projection_hits, st->identity_hits, st->evicted,
                       st->memo.size());
      });
    }
    return true;
  }();
  (void)print_stats;
  auto it = states.find(kernel);
  if (it == states.end()) {
    const KernelDescriptor* row = find_kernel(kernel);
    if (row == nullptr || !row->space)
      throw InputError(str_cat("fuzz: kernel '", kernel, "' has no input space in its row of the kernel table"));
    auto st = std::make_unique<FuzzState>();
    st->space = &*row->space;
    st->kernel = &row->contract();
    // A planted bug (the campaign tool's own test, or "would fuzzing catch this?"): the harness
    // then judges the named seeded mutant instead of the real contract.
    if (const char* m = std::getenv("WARMKEY_FUZZ_MUTANT"); m != nullptr && *m != '\0') {
      auto mutant =
          std::find_if(row->mutants.begin(), row->mutants.end(), [&](const Mutant& x) { return x.name == m; });
      if (mutant == row->mutants.end())
        throw InputError(str_cat("fuzz: WARMKEY_FUZZ_MUTANT='", m, "' is no mutant of kernel '", kernel, "'"));
      st->planted = mutant->make(row->contract());
      st->kernel = st->planted.get();
    }
    if (!st->planted && row->projection) {
      st->fields = row->projection->fields;
      st->identity = row->projection->identity;
    }
    it = states.emplace(std::string(kernel), std::move(st)).first;
  }
  last = {it->first, it->second.get()};
  return *it->second;
}

}  // namespace

std::vector<Violation> fuzz_one_input(std::string_view kernel, const std::uint8_t* data, std::size_t size) {
  FuzzState& st = state_of(kernel);
  const spaces::InputSpace* space = st.space;
  const Kernel& k = *st.kernel;
  // The runtime input is drawn from the bytes after the config's (zeros past the end).
  spaces::ByteDraw d({data, size});
  d.set_labelling(false);
  TracingDraw traced(d);
  ModelConfig decoded = spaces::draw_config(traced);
  const std::size_t config_bytes = d.consumed();
  // Lazy warm sets: a new config costs warmup_keys(), and each key is warmed when an input reaches it.
  const FuzzState::Entry* found = &st.add(traced.take_trace(), std::move(decoded));
  const WarmSet& warm = *found->set.warm;
  const ModelConfig& config = found->config;
  std::vector<Violation> out;
  if (!warm.used()) return warm.warmup_violations();
  // Lazy: warmup findings appear as inputs reach keys; this input answers for the ones it adds.
  const std::size_t known = warm.warmup_violations().size();
  CaseChecker checker(warm, &config.name);
  spaces::CaseFacts f = space->run_case(k, d, config, &checker);
  PropertyMask m = f.flagged ? checker.failed(f) : 0;
  if (m != 0) {
    // Re-decode with labels for the report.
    spaces::ByteDraw again({data, size});
    spaces::draw_config(again);
    space->run_case(k, again, config, nullptr);
    std::vector<std::uint8_t> bytes(data, data + size);
    auto vs = checker.explain(
        f, m, again.labels(), "fuzz input",
        str_cat("replay the input file with the ", kernel, "_fuzzer harness (config from its first ", config_bytes,
                " bytes), or add it to fuzz/regressions/", kernel, "/; hex: ", spaces::to_hex(bytes)));
    out.insert(out.end(), vs.begin(), vs.end());
  }
  // P1 and P5 of the warmup keys this input reached first (a shared set names the config of the
  // input that made it; the finding is this input's).
  for (auto v = warm.warmup_violations().begin() + static_cast<std::ptrdiff_t>(known);
       v != warm.warmup_violations().end(); ++v) {
    out.push_back(*v);
    out.back().config = config.name;
  }
  return out;
}

int fuzz_entry(std::string_view kernel, const std::uint8_t* data, std::size_t size) {
  std::vector<Violation> vs = fuzz_one_input(kernel, data, size);
  if (vs.empty()) return 0;
  // The campaign tool asks for the violations as JSON (it replays each minimised finding once).
  if (const char* path = std::getenv("WARMKEY_FUZZ_REPORT"); path != nullptr && *path != '\0') {
    nlohmann::json all = nlohmann::json::array();
    for (const Violation& v : vs) all.push_back(v.to_json());
    if (std::FILE* f = std::fopen(path, "w")) {
      std::fputs(all.dump(1).c_str(), f);
      std::fclose(f);
    }
  }
  std::fprintf(stderr, "\nwarmkey: property violated on this input:\n%s\n", vs.front().to_text().c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace warmkey::equivalence
