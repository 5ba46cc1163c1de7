// The class enumeration behind coverage certificates.
#include "equivalence/certificate.h"

#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <unordered_set>

#include "spaces/enum_draw.h"

namespace warmkey::equivalence {
namespace {

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) {
    if (!out.empty()) out += ' ';
    out += s;
  }
  return out;
}

constexpr std::size_t kMaxUncoveredListed = 20;

}  // namespace

KernelCertificate enumerate_classes(const WarmSet& warm, std::size_t max_classes, const std::string& reproduce) {
  KernelCertificate cert;
  cert.kernel = warm.kernel().name();
  cert.config = warm.config().name;
  cert.warmup_keys = warm.keys().size();
  cert.jit_keys_warmed = warm.distinct_jit_keys();
  if (!warm.used()) {
    cert.used = false;
    cert.all_warmed = true;
    return cert;
  }
  CaseChecker checker(warm);
  std::unordered_set<BoundKey, BoundKeyHash> reachable, uncovered;
  std::set<std::string> labels;
  PropertyMask reported = 0;
  spaces::EnumDraw d;
  do {
    if (cert.classes_explored >= max_classes) {
      cert.truncated = true;
      break;
    }
    d.begin();
    spaces::CaseFacts f = warm.space().run_case(warm.kernel(), d, warm.config(), &checker);
    ++cert.classes_explored;
    labels.insert(d.labels().begin(), d.labels().end());
    if (f.launches && f.bound) {
      ++cert.launching_classes;
      reachable.insert(*f.bound);
      if (!warm.warmed_by(*f.bound) && uncovered.insert(*f.bound).second &&
          cert.uncovered.size() < kMaxUncoveredListed) {
        UncoveredClass u;
        u.classes = joined(d.labels());
        u.input = f.input;
        u.jit_key = warm.jit_key(*f.bound).signature_text();
        auto [nb, nk] = warm.nearest_warmed(*f.bound);
        if (nb) {
          u.nearest_warmed = warm.jit_key(*nb).signature_text();
          u.jit_diff = diff(warm.jit_key(*f.bound), warm.jit_key(*nb));
        }
        cert.uncovered.push_back(std::move(u));
      }
    }
    PropertyMask m = checker.failed(f);
    if (m & ~reported) {
      auto vs = checker.explain(f, m & ~reported, d.labels(),
                                str_cat("class enumeration, class ", cert.classes_explored), reproduce);
      for (auto& v : vs) cert.violations.push_back(std::move(v));
      reported |= m;
    }
  } while (d.advance());
  cert.jit_keys_reachable = reachable.size();
  cert.uncovered_jit_keys = uncovered.size();
  cert.class_labels.assign(labels.begin(), labels.end());
  cert.all_warmed = uncovered.empty() && !cert.truncated;
  return cert;
}

nlohmann::json KernelCertificate::to_json() const {
  nlohmann::json un = nlohmann::json::array();
  for (const auto& u : uncovered)
    un.push_back({{"class", u.classes},
                  {"input", u.input},
                  {"jit_key", u.jit_key},
                  {"nearest_warmed", u.nearest_warmed},
                  {"jit_key_diff", u.jit_diff}});
  return {{"name", kernel},
          {"config", config},
          {"used", used},
          {"classes_explored", classes_explored},
          {"launching_classes", launching_classes},
          {"jit_keys_reachable", jit_keys_reachable},
          {"warmup_keys", warmup_keys},
          {"jit_keys_warmed", jit_keys_warmed},
          {"uncovered_jit_keys", uncovered_jit_keys},
          {"truncated", truncated},
          {"all_warmed", all_warmed ? "yes" : "no"},
          {"class_labels", class_labels},
          {"uncovered", un}};
}

bool Certificate::all_warmed() const {
  for (const auto& k : kernels) {
    if (!k.all_warmed) return false;
  }
  return true;
}

nlohmann::json Certificate::to_json() const {
  nlohmann::json ks = nlohmann::json::array();
  for (const auto& k : kernels) ks.push_back(k.to_json());
  return {{"config", config}, {"all_warmed", all_warmed() ? "yes" : "no"}, {"kernels", ks}, {"unverified", unverified}};
}

std::string Certificate::to_text() const {
  std::ostringstream os;
  os << "coverage certificate for " << config << ": "
     << (all_warmed() ? "every reachable JitKey is warmed" : "NOT all warmed") << '\n';
  for (const auto& k : kernels) {
    if (!k.used) {
      os << "  " << k.kernel << ": not used by this config\n";
      continue;
    }
    os << "  " << k.kernel << ": " << k.classes_explored << " classes, " << k.jit_keys_reachable
       << " reachable JitKeys, " << k.jit_keys_warmed << " warmed (" << k.warmup_keys
       << " warmup keys), all warmed: " << (k.all_warmed ? "yes" : "no") << (k.truncated ? " (truncated)" : "") << '\n';
    for (const auto& u : k.uncovered) {
      os << "    uncovered: " << u.jit_key << "\n      class: " << u.classes << "\n      input: " << u.input << '\n';
      if (!u.jit_diff.empty()) {
        os << "      vs nearest warmed:";
        for (auto& d : u.jit_diff) os << ' ' << d << ';';
        os << '\n';
      }
    }
  }
  for (const auto& u : unverified) os << "  " << u << ": no input space (not verified)\n";
  return os.str();
}

}  // namespace warmkey::equivalence
