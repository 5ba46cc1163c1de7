// The verification run behind `warmkey verify`.
#include "equivalence/verify.h"

#include <chrono>
#include <cstdio>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "equivalence/compile_check.h"
#include "equivalence/determinism.h"
#include "equivalence/numerics.h"
#include "equivalence/properties/case_checker.h"
#include "equivalence/shrink.h"
#include "spaces/byte_draw.h"
#include "warmup/runtime.h"

namespace warmkey::equivalence {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A stable stream id per (kernel, config): FNV-1a of both names.
std::uint64_t stream_of(const std::string& kernel, const std::string& config) {
  std::uint64_t h = 1469598103934665603ULL;
  for (const std::string* s : {&kernel, &config}) {
    for (unsigned char c : *s) h = (h ^ c) * 1099511628211ULL;
    h = (h ^ 0xff) * 1099511628211ULL;
  }
  return h;
}

std::string quoted_if_needed(const std::string& s) {
  if (s.find_first_of(" \t'\"[],;&|<>()$") == std::string::npos) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

class KernelRun {
 public:
  KernelRun(const WarmSet& warm, const VerifyOptions& o, const std::string& config_ref, KernelReport& r)
      : warm_(warm), o_(o), checker_(warm), r_(r) {
    repro_ = str_cat(o.program, " --config ", quoted_if_needed(config_ref), " --kernel ", warm.kernel().name());
    if (o.mutant) repro_ += str_cat(" --mutant ", o.mutant->name);
  }

  void random_cases() {
    std::uint64_t stream = stream_of(warm_.kernel().name(), warm_.config().name);
    for (std::size_t i = 0; i < o_.cases; ++i) {
      std::uint64_t seed = spaces::case_seed(o_.seed, stream, i);
      spaces::ByteDraw d = spaces::ByteDraw::seeded(seed);
      d.set_labelling(false);
      spaces::CaseFacts f = warm_.space().run_case(warm_.kernel(), d, warm_.config(), &checker_);
      ++r_.cases;
      if (!f.flagged) continue;
      PropertyMask m = checker_.failed(f);
      if (m == 0) continue;
      count_failure(m);
      if ((m & ~reported_random_) == 0 || reports_full()) continue;
      report_bytes(d.take_recorded(), m, str_cat("random case ", i, " of seed ", o_.seed));
    }
  }

  void replay(const std::vector<std::uint8_t>& bytes) {
    spaces::ByteDraw d(bytes);
    d.set_labelling(false);
    spaces::CaseFacts f = warm_.space().run_case(warm_.kernel(), d, warm_.config(), &checker_);
    ++r_.cases;
    PropertyMask m = f.flagged ? checker_.failed(f) : 0;
    if (m == 0) return;
    count_failure(m);
    report_bytes(bytes, m, "the given --input");
  }

 private:
  bool reports_full() const { return r_.violations.size() >= 16 * o_.max_reports; }

  void count_failure(PropertyMask m) {
    ++r_.failing_cases;
    for (Property p : properties_in(m)) ++r_.failures_by_property[std::string(property_id(p))];
  }

  PropertyMask evaluate(const std::vector<std::uint8_t>& bytes, bool labels, spaces::CaseFacts* out,
                        std::vector<std::string>* label_out) {
    spaces::ByteDraw d(bytes);
    d.set_labelling(labels);
    spaces::CaseFacts f = warm_.space().run_case(warm_.kernel(), d, warm_.config(), &checker_);
    PropertyMask m = f.flagged ? checker_.failed(f) : 0;
    if (label_out) *label_out = d.labels();
    if (out) *out = std::move(f);
    return m;
  }

  // Shrinks a failing input for its first unreported property and reports what the small input breaks.
  void report_bytes(std::vector<std::uint8_t> bytes, PropertyMask m, const std::string& found) {
    std::size_t original = bytes.size();
    PropertyMask target = 0;
    for (Property p : properties_in(m & ~reported_random_)) {
      target = bit(p);
      break;
    }
    if (o_.shrink && target) {
      bytes = shrink_bytes(bytes, [&](const std::vector<std::uint8_t>& c) {
        return (evaluate(c, false, nullptr, nullptr) & target) != 0;
      });
    }
    spaces::CaseFacts f;
    std::vector<std::string> labels;
    PropertyMask now = evaluate(bytes, true, &f, &labels);
    PropertyMask fresh = now & ~reported_random_;
    if (fresh == 0) fresh = now;  // (the shrunk input fails only what was reported already)
    std::string found_by = found;
    if (o_.shrink) found_by += str_cat(", shrunk from ", original, " to ", bytes.size(), " input bytes");
    std::string reproduce = str_cat(repro_, " --input ", bytes.empty() ? "00" : spaces::to_hex(bytes));
    for (auto& v : checker_.explain(f, fresh, labels, found_by, reproduce)) r_.violations.push_back(std::move(v));
    reported_random_ |= fresh;
  }

  const WarmSet& warm_;
  const VerifyOptions& o_;
  CaseChecker checker_;
  KernelReport& r_;
  std::string repro_;
  PropertyMask reported_random_ = 0;
};

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

std::string fmt_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fs", s);
  return buf;
}

}  // namespace

nlohmann::json KernelReport::to_json() const {
  nlohmann::json vs = nlohmann::json::array();
  for (const auto& v : violations) vs.push_back(v.to_json());
  nlohmann::json j{{"name", kernel},
                   {"config", config},
                   {"used", used},
                   {"keys", keys},
                   {"jit_keys", jit_keys},
                   {"cases", cases},
                   {"failing_cases", failing_cases},
                   {"failures_by_property", failures_by_property},
                   {"violations", vs},
                   {"seconds", seconds}};
  if (!numerics.empty()) j["numerics"] = numerics;
  if (certificate) {
    j["classes"] = certificate->classes_explored;
    j["jit_keys_reachable"] = certificate->jit_keys_reachable;
    j["all_warmed"] = certificate->all_warmed ? "yes" : "no";
  }
  return j;
}

std::size_t VerifyReport::violation_count() const {
  std::size_t n = global.size();
  for (const auto& k : kernels) n += k.violations.size();
  return n;
}

std::vector<std::string> VerifyReport::fired() const {
  std::set<std::string> ids;
  for (const auto& v : global) ids.insert(std::string(property_id(v.property)));
  for (const auto& k : kernels) {
    for (const auto& v : k.violations) ids.insert(std::string(property_id(v.property)));
  }
  return {ids.begin(), ids.end()};
}

nlohmann::json VerifyReport::to_json() const {
  std::string config_text = join_names(configs);
  nlohmann::json ks = nlohmann::json::array();
  for (const auto& k : kernels) ks.push_back(k.to_json());
  nlohmann::json gs = nlohmann::json::array();
  for (const auto& v : global) gs.push_back(v.to_json());
  return {{"config", config_text},
          {"configs", configs},
          {"seed", seed},
          {"cases", cases},
          {"mutant", mutant.empty() ? nlohmann::json(nullptr) : nlohmann::json(mutant)},
          {"violations", violation_count()},
          {"properties_violated", fired()},
          {"kernels", ks},
          {"global", gs},
          {"unverified", unverified},
          {"seconds", seconds}};
}

std::string VerifyReport::to_text() const {
  std::ostringstream os;
  std::string config_text = join_names(configs);
  os << "warmkey verify: config " << config_text << ", seed " << seed << ", " << cases << " random cases per kernel";
  if (!mutant.empty()) os << ", mutant " << mutant;
  os << "\n\n";
  os << std::left << "  " << std::setw(22) << "kernel" << std::setw(22) << "config" << std::right << std::setw(6)
     << "keys" << std::setw(6) << "jit" << std::setw(9) << "classes" << std::setw(7) << "reach" << std::setw(8)
     << "cases" << std::setw(9) << "failing" << std::setw(7) << "viol." << std::setw(9) << "time"
     << "  all warmed\n";
  for (const auto& k : kernels) {
    std::string cfg = k.config.size() > 20 ? k.config.substr(0, 19) + "~" : k.config;
    const auto* c = k.certificate ? &*k.certificate : nullptr;
    os << std::left << "  " << std::setw(22) << k.kernel << std::setw(22) << cfg << std::right << std::setw(6) << k.keys
       << std::setw(6) << k.jit_keys << std::setw(9) << (c ? std::to_string(c->classes_explored) : "-") << std::setw(7)
       << (c ? std::to_string(c->jit_keys_reachable) : "-") << std::setw(8) << k.cases << std::setw(9)
       << k.failing_cases << std::setw(7) << k.violations.size() << std::setw(9) << fmt_seconds(k.seconds) << "  "
       << (!k.used ? "not used"
           : c     ? (c->all_warmed ? "yes" : "NO")
                   : "-")
       << '\n';
  }
  for (const auto& k : kernels) {
    if (!k.numerics.empty()) os << "  P6 numerics, " << k.kernel << " under " << k.config << ": " << k.numerics << '\n';
  }
  for (const auto& u : unverified) os << "  " << u << ": no input space in spaces/ (not verified)\n";
  for (const auto& k : kernels) {
    for (const auto& v : k.violations) os << '\n' << v.to_text();
  }
  for (const auto& v : global) os << '\n' << v.to_text();
  os << '\n';
  if (violation_count() == 0) {
    os << "result: OK, no violations (" << fmt_seconds(seconds) << ")\n";
  } else {
    os << "result: " << violation_count() << " violation(s) of ";
    for (const auto& id : fired()) os << id << ' ';
    os << "\nreproduce the run with: --seed " << seed << " --cases " << cases
       << " (each report above also names the input that replays it alone)\n";
  }
  return os.str();
}

VerifyReport run_verify(const Registry& registry, const VerifyOptions& options) {
  auto t_run = Clock::now();
  std::vector<ModelConfig> configs = options.configs;
  std::vector<std::string> refs = options.config_refs;
  if (configs.empty()) {
    configs.push_back(default_config());
    refs = {configs.back().name};
  }
  refs.resize(configs.size());
  for (std::size_t i = 0; i < configs.size(); ++i) {
    if (refs[i].empty()) refs[i] = configs[i].name;
  }
  Subjects subjects(registry, options.kernel, options.mutant, options.rows);
  VerifyReport report;
  report.seed = options.seed;
  report.cases = options.input ? 1 : options.cases;
  report.mutant = options.mutant ? options.mutant->name : "";
  report.unverified = subjects.unverified();
  std::unique_ptr<JitRuntime> runtime;  // P6 only
  for (std::size_t ci = 0; ci < configs.size(); ++ci) {
    const ModelConfig& config = configs[ci];
    report.configs.push_back(config.name);
    for (const KernelUnderTest& kt : subjects.kernels()) {
      auto t0 = Clock::now();
      KernelReport r;
      r.kernel = kt.kernel->name();
      r.config = config.name;
      WarmSet warm(*kt.space, *kt.kernel, config);
      r.used = warm.used();
      r.keys = warm.keys().size();
      r.jit_keys = warm.distinct_jit_keys();
      for (const auto& v : warm.warmup_violations()) {
        if (++r.failures_by_property[std::string(property_id(v.property))] > options.max_reports) continue;
        r.violations.push_back(v);
        r.violations.back().reproduce =
            str_cat(options.program, " --config ", quoted_if_needed(refs[ci]), " --kernel ", r.kernel,
                    options.mutant ? " --mutant " + options.mutant->name : "", " --cases 0 --no-classes");
      }
      if (warm.used()) {
        KernelRun run(warm, options, refs[ci], r);
        if (options.classes && !options.input) {
          std::string repro = str_cat(options.program, " --config ", quoted_if_needed(refs[ci]), " --kernel ", r.kernel,
                                      options.mutant ? " --mutant " + options.mutant->name : "", " --certificate FILE");
          r.certificate = enumerate_classes(warm, options.max_classes, repro);
          for (auto& v : r.certificate->violations) {
            ++r.failures_by_property[std::string(property_id(v.property))];
            r.violations.push_back(v);
          }
          if (!r.certificate->all_warmed && r.certificate->violations.empty()) {
            Violation v;
            v.property = Property::P2;
            v.kernel = r.kernel;
            v.config = config.name;
            v.found_by = "class enumeration";
            v.detail = r.certificate->truncated ? str_cat("the enumeration stopped at ", options.max_classes,
                                                          " classes: coverage is not proven")
                                                : "a reachable class is not warmed";
            r.violations.push_back(std::move(v));
          }
        }
        if (options.input)
          run.replay(*options.input);
        else
          run.random_cases();
        if (options.compile) {
          for (auto& v : check_compiles(warm)) r.violations.push_back(std::move(v));
        }
        if (options.numerics) {
          if (!runtime) runtime = std::make_unique<JitRuntime>();
          NumericsResult n = check_numerics(*kt.kernel, config, *runtime, options.seed, options.numeric_cases,
                                            options.numerics_dir, options.rows);
          r.numerics = n.skipped ? "skipped: " + n.skip_reason : str_cat(n.cases, " cases");
          for (auto& v : n.violations) r.violations.push_back(std::move(v));
        }
      }
      r.seconds = seconds_since(t0);
      report.kernels.push_back(std::move(r));
    }
    if (options.determinism) {
      for (auto& v : check_determinism_in_process(subjects, config, options.kernel))
        report.global.push_back(std::move(v));
    }
    if (!options.child_argv.empty()) {
      for (auto& v : check_determinism_across_processes(subjects, config, options.child_argv, options.kernel))
        report.global.push_back(std::move(v));
    }
  }
  report.seconds = seconds_since(t_run);
  return report;
}

Certificate make_certificate(const Registry& registry, const ModelConfig& config,
                             const std::optional<std::string>& kernel, const equivalence::Mutant* mutant,
                             std::size_t max_classes, const std::vector<KernelDescriptor>* rows) {
  Subjects subjects(registry, kernel, mutant, rows);
  Certificate cert;
  cert.config = config.name;
  cert.unverified = subjects.unverified();
  for (const KernelUnderTest& kt : subjects.kernels()) {
    WarmSet warm(*kt.space, *kt.kernel, config);
    cert.kernels.push_back(enumerate_classes(warm, max_classes));
  }
  return cert;
}

}  // namespace warmkey::equivalence
