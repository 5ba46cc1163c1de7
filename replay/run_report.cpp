// The report of `warmkey run`: text table, JSON and JUnit XML.
#include "replay/run_report.h"

#include <cstdio>
#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

#include "warmup/error.h"

namespace warmkey::replay {
namespace {

using nlohmann::json;

std::string fixed(double v, int digits = 2) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string join(const std::vector<std::string>& items, std::string_view sep = ", ") {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : std::string(sep)) + s;
  return out;
}

std::string numerics_cell(const RunKernelRow& k, bool gpu) {
  if (!gpu) return "-";
  if (k.replay.checked == 0 && k.replay.device_errors == 0) return "none";
  return str_cat(k.replay.checked - k.replay.mismatches, "/", k.replay.checked,
                 k.replay.device_errors ? str_cat(" +", k.replay.device_errors, " err") : "");
}

// One JUnit test case of `phase` for kernel k: passed, failed with messages, or skipped.
struct JunitCase {
  std::string name;
  double seconds = 0;
  std::vector<std::string> failures;
  std::string skipped;  // reason; empty when the case ran
};

void junit_suite(std::ostringstream& os, const std::string& config, const std::string& phase,
                 const std::vector<JunitCase>& cases, double seconds) {
  std::size_t failures = 0, skipped = 0;
  for (const auto& c : cases) {
    failures += c.failures.empty() ? 0 : 1;
    skipped += c.skipped.empty() ? 0 : 1;
  }
  os << "  <testsuite name=\"" << xml_escape(phase) << "\" tests=\"" << cases.size() << "\" failures=\"" << failures
     << "\" errors=\"0\" skipped=\"" << skipped << "\" time=\"" << fixed(seconds, 3) << "\">\n";
  for (const auto& c : cases) {
    os << "    <testcase classname=\"warmkey." << xml_escape(config) << "." << xml_escape(phase) << "\" name=\""
       << xml_escape(c.name) << "\" time=\"" << fixed(c.seconds, 3) << "\"";
    if (c.failures.empty() && c.skipped.empty()) {
      os << "/>\n";
      continue;
    }
    os << ">\n";
    if (!c.skipped.empty()) os << "      <skipped message=\"" << xml_escape(c.skipped) << "\"/>\n";
    if (!c.failures.empty()) {
      os << "      <failure message=\"" << xml_escape(c.failures.front().substr(0, c.failures.front().find('\n')))
         << "\" type=\"" << xml_escape(phase) << "\">" << xml_escape(join(c.failures, "\n\n")) << "</failure>\n";
    }
    os << "    </testcase>\n";
  }
  os << "  </testsuite>\n";
}

}  // namespace

std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // XML 1.0 allows tab, newline and carriage return below 0x20, nothing else.
        if (c < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') break;
        out += ch;
    }
  }
  return out;
}

std::string RunKernelRow::verdict() const {
  std::vector<std::string> why;
  if (!warmup_ok()) why.push_back("warmup");
  if (!verify_ok()) why.push_back(verified ? "verify" : "not verified");
  if (!replay.adapter) why.push_back("not replayed");
  if (replay.runtime_compiles > 0) why.push_back("runtime compile");
  if (replay.unwarmed > replay.runtime_compiles) why.push_back("unwarmed key");
  if (replay.errors > 0) why.push_back("invalid launch");
  if (!numerics_ok()) why.push_back("numerics");
  return why.empty() ? "ok" : str_cat("FAIL (", join(why), ")");
}

json RunKernelRow::to_json() const {
  json j{{"kernel", kernel},
         {"warmup",
          {{"compile_keys", compile_keys},
           {"keys", jit_keys},
           {"compiled", compiled},
           {"l1_hits", l1_hits},
           {"disk_hits", disk_hits},
           {"bundle_hits", bundle_hits},
           {"failed", failed},
           {"ready_seconds", ready_seconds},
           {"failures", warmup_failures}}},
         {"verify",
          {{"verified", verified},
           {"cases", cases},
           {"violations", violations},
           {"all_warmed", all_warmed ? json(*all_warmed) : json(nullptr)}}},
         {"replay", replay.to_json()},
         {"verdict", verdict()},
         {"ok", ok()}};
  return j;
}

bool RunReport::ok() const {
  if (kernels.empty()) return false;
  for (const auto& k : kernels) {
    if (!k.ok()) return false;
  }
  return warmup.failed == 0 && verify.violations == 0 && verify.global.empty() && replay.ok();
}

json RunReport::to_json() const {
  json ks = json::array();
  for (const auto& k : kernels) ks.push_back(k.to_json());
  return {{"config", config},
          {"config_source", config_source},
          {"mode", mode},
          {"mutant", mutant.empty() ? json(nullptr) : json(mutant)},
          {"warmup",
           {{"keys", warmup.keys},
            {"compile_keys", warmup.compile_keys},
            {"compiled", warmup.compiled},
            {"l1_hits", warmup.l1_hits},
            {"disk_hits", warmup.disk_hits},
            {"bundle_hits", warmup.bundle_hits},
            {"failed", warmup.failed},
            {"programs", warmup.programs},
            {"jobs", warmup.jobs},
            {"seconds", warmup.seconds},
            {"bundle", warmup.bundle.empty() ? json(nullptr) : json(warmup.bundle)},
            {"bundle_entries", warmup.bundle_entries},
            {"cache_dir", warmup.cache_dir}}},
          {"verify",
           {{"cases", verify.cases},
            {"cases_per_kernel", verify.cases_per_kernel},
            {"seed", verify.seed},
            {"violations", verify.violations},
            {"certificate", verify.certificate},
            {"all_warmed", verify.all_warmed},
            {"properties_violated", verify.properties_violated},
            {"unverified", verify.unverified},
            {"global", verify.global},
            {"seconds", verify.seconds}}},
          {"replay",
           {{"source", replay.source},
            {"batches", replay.batches},
            {"rebalances", replay.rebalances},
            {"launches", replay.launches},
            {"runtime_compiles", replay.runtime_compiles},
            {"unwarmed", replay.unwarmed},
            {"runtime_disk_hits", replay.runtime_disk_hits},
            {"runtime_bundle_hits", replay.runtime_bundle_hits},
            {"errors", replay.errors},
            {"findings", replay.to_json().at("findings")},
            {"seconds", replay.seconds}}},
          {"gpu",
           {{"available", replay.gpu},
            {"reason", replay.gpu_reason},
            {"checked", replay.checked},
            {"mismatches", replay.mismatches},
            {"device_errors", replay.device_errors}}},
          {"kernels", ks},
          {"unused_kernels", unused},
          {"seconds", seconds},
          {"ok", ok()}};
}

std::string RunReport::to_text() const {
  std::ostringstream os;
  os << "warmkey run: config " << config << " (" << config_source << "), " << replay.source << ", "
     << (replay.gpu ? "GPU" : "compile-only");
  if (!mutant.empty()) os << ", MUTANT " << mutant;
  os << "\n\n";
  os << std::left << "  " << std::setw(21) << "kernel" << std::right << std::setw(6) << "keys" << std::setw(9)
     << "compiled" << std::setw(7) << "hits" << std::setw(10) << "ready s" << std::setw(8) << "cases" << std::setw(7)
     << "viol." << std::setw(10) << "launches" << std::setw(9) << "rt comp." << std::setw(10) << "numerics"
     << "  verdict\n";
  for (const auto& k : kernels) {
    os << std::left << "  " << std::setw(21) << k.kernel << std::right << std::setw(6) << k.jit_keys << std::setw(9)
       << k.compiled << std::setw(7) << (k.l1_hits + k.disk_hits + k.bundle_hits) << std::setw(10)
       << fixed(k.ready_seconds) << std::setw(8) << k.cases << std::setw(7) << k.violations << std::setw(10)
       << k.replay.launches << std::setw(9) << k.replay.runtime_compiles << std::setw(10)
       << numerics_cell(k, replay.gpu) << "  " << k.verdict() << '\n';
  }
  if (!unused.empty()) os << "  (not used by this config: " << join(unused) << ")\n";
  os << '\n';
  os << "warmup    " << warmup.keys << " JIT keys (" << warmup.compile_keys << " compile keys): " << warmup.compiled
     << " compiled, " << warmup.disk_hits << " disk hits, " << warmup.bundle_hits << " bundle hits, " << warmup.failed
     << " failed in " << fixed(warmup.seconds) << " s (" << warmup.jobs << " jobs";
  if (!warmup.bundle.empty()) os << ", bundle " << warmup.bundle << " with " << warmup.bundle_entries << " entries";
  os << ")\n";
  os << "verify    " << verify.cases << " random cases (" << verify.cases_per_kernel << " per kernel, seed "
     << verify.seed << ")"
     << (verify.certificate
             ? str_cat(", coverage certificate: ", verify.all_warmed ? "all reachable keys warmed" : "NOT all warmed")
             : "")
     << ", " << verify.violations << " violations in " << fixed(verify.seconds) << " s\n";
  os << "replay    " << replay.batches << " batches, " << replay.rebalances << " rebalances, " << replay.launches
     << " launches: " << replay.runtime_compiles << " runtime compiles, " << replay.unwarmed
     << " lookups of unwarmed keys, " << replay.runtime_disk_hits << " runtime disk hits, " << replay.errors
     << " invalid launches in " << fixed(replay.seconds) << " s\n";
  os << "numerics  ";
  if (replay.gpu) {
    os << replay.checked << " launches checked against the reference, " << replay.mismatches << " mismatches, "
       << replay.device_errors << " device errors\n";
  } else {
    os << "not run (" << (replay.gpu_reason.empty() ? "no GPU" : replay.gpu_reason) << ")\n";
  }

  for (const auto& k : kernels) {
    for (const auto& f : k.warmup_failures) os << "\nwarmup failure: kernel '" << k.kernel << "': " << f << '\n';
    for (const auto& v : k.violation_texts) os << '\n' << v;
  }
  for (const auto& g : verify.global) os << '\n' << g;
  for (const auto& u : verify.unverified)
    os << "\nnot verified: kernel '" << u << "' has no input space in spaces/ (see docs/ADDING_A_KERNEL.md)\n";
  for (const auto& f : replay.findings) os << '\n' << f.to_text() << '\n';

  os << "\nresult: ";
  if (ok()) {
    os << "OK (" << fixed(seconds, 1) << " s)\n";
  } else {
    std::vector<std::string> why;
    if (warmup.failed) why.push_back(str_cat(warmup.failed, " warmup failures"));
    if (verify.violations) why.push_back(str_cat(verify.violations, " verification violations"));
    if (!verify.unverified.empty()) why.push_back(str_cat(verify.unverified.size(), " unverified kernels"));
    if (replay.runtime_compiles) why.push_back(str_cat(replay.runtime_compiles, " runtime compiles"));
    if (replay.unwarmed) why.push_back(str_cat(replay.unwarmed, " lookups of unwarmed keys"));
    if (replay.errors) why.push_back(str_cat(replay.errors, " invalid launches"));
    std::size_t no_adapter = 0;
    for (const auto& k : kernels) no_adapter += k.replay.adapter ? 0 : 1;
    if (no_adapter) why.push_back(str_cat(no_adapter, " kernels without a replay adapter"));
    if (replay.mismatches) why.push_back(str_cat(replay.mismatches, " numeric mismatches"));
    if (replay.device_errors) why.push_back(str_cat(replay.device_errors, " device errors"));
    if (kernels.empty()) why.push_back("the config uses no kernel");
    os << "FAILED: " << join(why) << " (" << fixed(seconds, 1) << " s)\n";
  }
  return os.str();
}

std::string RunReport::to_junit() const {
  std::vector<JunitCase> warm, ver, rep, num;
  for (const auto& k : kernels) {
    JunitCase w{k.kernel, k.ready_seconds, k.warmup_failures, ""};
    if (!k.warmup_ok() && w.failures.empty()) w.failures.push_back(str_cat(k.failed, " keys failed to compile"));
    warm.push_back(std::move(w));

    JunitCase v{k.kernel, k.verify_seconds, k.violation_texts, ""};
    if (!k.verified) v.failures.push_back("no input space in spaces/: the kernel is not verified");
    if (k.verified && k.violations == 0 && !k.all_warmed.value_or(true))
      v.failures.push_back("the coverage certificate found reachable keys that are not warmed");
    ver.push_back(std::move(v));

    JunitCase r{k.kernel, 0, {}, ""};
    if (!k.replay_ok()) {
      r.failures.push_back(str_cat(k.replay.runtime_compiles, " runtime compiles, ", k.replay.unwarmed,
                                   " lookups of unwarmed keys, ", k.replay.errors, " invalid launches",
                                   k.replay.adapter ? "" : ", no replay adapter"));
      for (const auto& t : k.replay_texts) r.failures.push_back(t);
    }
    rep.push_back(std::move(r));

    JunitCase n{k.kernel, 0, {}, ""};
    if (!replay.gpu) {
      n.skipped = str_cat("no GPU: ", replay.gpu_reason.empty() ? "compile-only" : replay.gpu_reason);
    } else if (!k.numerics_ok()) {
      n.failures.push_back(str_cat(k.replay.mismatches, " of ", k.replay.checked,
                                   " checked launches differ from the reference, ", k.replay.device_errors,
                                   " device errors"));
      for (const auto& t : k.numeric_texts) n.failures.push_back(t);
    }
    num.push_back(std::move(n));
  }
  std::size_t tests = 4 * kernels.size(), failures = 0, skipped = 0;
  for (const auto* suite : {&warm, &ver, &rep, &num}) {
    for (const auto& c : *suite) {
      failures += c.failures.empty() ? 0 : 1;
      skipped += c.skipped.empty() ? 0 : 1;
    }
  }
  std::ostringstream os;
  os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  os << "<testsuites name=\"warmkey run " << xml_escape(config) << "\" tests=\"" << tests << "\" failures=\""
     << failures << "\" errors=\"0\" skipped=\"" << skipped << "\" time=\"" << fixed(seconds, 3) << "\">\n";
  junit_suite(os, config, "warmup", warm, warmup.seconds);
  junit_suite(os, config, "verify", ver, verify.seconds);
  junit_suite(os, config, "replay", rep, replay.seconds);
  junit_suite(os, config, "numerics", num, 0);
  os << "</testsuites>\n";
  return os.str();
}

}  // namespace warmkey::replay
