// `warmkey verify`: runs properties P1-P5 and P7 (PC and P6 on request) over every registered kernel
// with the generators of spaces/, writes coverage certificates, and selects seeded mutants.
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "equivalence/determinism.h"
#include "equivalence/kernel_table.h"
#include "equivalence/verify.h"
#include "spaces/byte_draw.h"
#include "tools/warmkey/commands.h"
#include "warmup/error.h"

namespace warmkey::cli {
namespace {

struct VerifyCliOptions {
  std::vector<std::string> configs;
  std::string kernel;
  std::size_t cases = 10000;
  std::optional<std::uint64_t> seed;
  bool json = false;
  std::string certificate;
  std::string mutant;
  bool list_mutants = false;
  std::string input;
  bool no_shrink = false;
  bool no_classes = false;
  bool no_cross_process = false;
  bool compile = false;
  bool numerics = false;
  std::size_t numeric_cases = 8;
  std::size_t max_classes = 200000;
};

std::string joined(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (const auto& s : items) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}

void list_mutants() {
  std::cout << "seeded mutants (each a known way to break a contract; never active by default):\n";
  for (const equivalence::Mutant& m : equivalence::mutant_catalogue()) {
    std::string caught = joined(m.caught_by, "/");
    std::cout << "  " << m.name << "  [KERNELS.md #" << m.entry << ", caught by " << caught << "]\n      " << m.what
              << '\n';
  }
}

void write_certificate(const std::string& path, const equivalence::VerifyReport& report) {
  std::vector<equivalence::Certificate> certs;
  for (const auto& name : report.configs) {
    equivalence::Certificate c;
    c.config = name;
    c.unverified = report.unverified;
    for (const auto& k : report.kernels) {
      if (k.config == name && k.certificate) c.kernels.push_back(*k.certificate);
    }
    certs.push_back(std::move(c));
  }
  nlohmann::json j;
  if (certs.size() == 1) {
    j = certs.front().to_json();
  } else {
    j = {{"configs", nlohmann::json::array()}};
    for (const auto& c : certs) j["configs"].push_back(c.to_json());
  }
  std::ofstream out(path);
  if (!out) throw InputError(str_cat("--certificate: cannot write '", path, "'"));
  out << j.dump(2) << '\n';
  if (!out) throw Error(str_cat("--certificate: writing '", path, "' failed"));
}

int run(const VerifyCliOptions& o) {
  if (equivalence::emit_manifest_if_requested()) return 0;  // a P7 child re-executed by a parent verify
  if (o.list_mutants) {
    list_mutants();
    return 0;
  }
  equivalence::VerifyOptions v;
  std::vector<std::string> refs = o.configs.empty() ? std::vector<std::string>{"dsv4-flash"} : o.configs;
  if (refs.size() == 1 && refs[0] == "all") refs = embedded_config_names();
  for (const auto& ref : refs) {
    v.configs.push_back(load_config(ref));
    v.config_refs.push_back(ref);
  }
  if (!o.kernel.empty()) v.kernel = o.kernel;
  v.cases = o.cases;
  v.seed = o.seed ? *o.seed : std::random_device{}() * 0x100000001ULL + std::random_device{}();
  v.classes = !o.no_classes || !o.certificate.empty();
  v.max_classes = o.max_classes;
  v.shrink = !o.no_shrink;
  v.compile = o.compile;
  v.numerics = o.numerics;
  v.numeric_cases = o.numeric_cases;
  if (!o.no_cross_process) v.child_argv = {"/proc/self/exe", "verify"};
  if (!o.input.empty()) v.input = spaces::from_hex(o.input);
  if (!o.mutant.empty()) {
    v.mutant = equivalence::find_mutant(o.mutant);
    if (v.mutant == nullptr) {
      std::vector<std::string> names;
      for (const auto& m : equivalence::mutant_catalogue()) names.push_back(m.name);
      std::string known = joined(names, ", ");
      throw InputError(str_cat("--mutant: unknown mutant '", o.mutant, "' (known: ", known, ")"));
    }
  }
  equivalence::VerifyReport report = equivalence::run_verify(equivalence::builtin_registry(), v);
  if (!o.certificate.empty()) write_certificate(o.certificate, report);
  if (o.json) {
    std::cout << report.to_json().dump(2) << '\n';
  } else {
    std::cout << report.to_text();
    if (!o.certificate.empty()) std::cout << "certificate written to " << o.certificate << '\n';
  }
  if (report.violation_count() > 0) {
    std::cerr << "warmkey verify: " << report.violation_count() << " violation(s); reproduce with --seed "
              << report.seed << " --cases " << report.cases << '\n';
    return 1;
  }
  return 0;
}

}  // namespace

void register_verify_command(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<VerifyCliOptions>();
  CLI::App* sub = app.add_subcommand(
      "verify", "Prove that runtime dispatch only hits warmed keys (properties P1-P7) and write coverage certificates");
  sub->add_option("--config", o->configs,
                  "Embedded configuration name or JSON file (repeatable; 'all': every embedded one)")
      ->default_str("dsv4-flash");
  sub->add_option("--kernel", o->kernel, "Only this kernel");
  sub->add_option("--cases", o->cases, "Random cases per kernel and config")->capture_default_str();
  sub->add_option("--seed", o->seed, "Seed of the random cases (default: a fresh one, printed)");
  sub->add_flag("--json", o->json, "Print one JSON object {config, cases, violations, kernels: [...]}");
  sub->add_option("--certificate", o->certificate, "Write the coverage certificate (JSON) to this file");
  sub->add_option("--mutant", o->mutant, "Verify with this seeded mutant in place of its kernel (see --list-mutants)");
  sub->add_flag("--list-mutants", o->list_mutants, "List the seeded-mutant catalogue and exit");
  sub->add_option("--input", o->input, "Replay one input (hex bytes, as a report prints them) instead of random cases");
  sub->add_flag("--no-shrink", o->no_shrink, "Report failing inputs as drawn, without shrinking them");
  sub->add_flag("--no-classes", o->no_classes, "Skip the exhaustive class enumeration (certificate)");
  sub->add_flag("--no-cross-process", o->no_cross_process, "Check determinism (P7) in this process only");
  sub->add_flag("--compile", o->compile, "Also compile one warmup key per kernel with NVRTC (PC; no GPU needed)");
  sub->add_flag("--numerics", o->numerics,
                "Also check P6 on the GPU: each kernel's oracle cases against the reference (skips without a device)");
  sub->add_option("--numeric-cases", o->numeric_cases, "Oracle cases per kernel for --numerics")->capture_default_str();
  sub->add_option("--max-classes", o->max_classes, "Cap of the class enumeration per kernel")->capture_default_str();
  sub->callback([o, exit_code] { *exit_code = run(*o); });
}

}  // namespace warmkey::cli
