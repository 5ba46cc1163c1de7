// Violation text and JSON.
#include "equivalence/report.h"

#include <nlohmann/json.hpp>
#include <sstream>

namespace warmkey::equivalence {
namespace {

std::string joined(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (const auto& s : items) {
    if (!out.empty()) out += sep;
    out += s;
  }
  return out;
}

}  // namespace

std::string Violation::to_text() const {
  std::ostringstream os;
  os << property_id(property) << ' ' << property_name(property) << " violated: kernel " << kernel << ", config "
     << config << '\n';
  auto line = [&](std::string_view label, const std::string& value) {
    if (!value.empty())
      os << "  " << label << std::string(label.size() < 13 ? 13 - label.size() : 1, ' ') << value << '\n';
  };
  line("claim:", std::string(property_claim(property)));
  line("input:", input);
  line("classes:", joined(classes, " "));
  line("dispatch:", dispatched ? dispatched->to_string() : "");
  line("warmup key:", expected ? expected->to_string() : "");
  line("key diff:", joined(key_diff, "; "));
  line("JitKey(x):", jit_key);
  line("JitKey(warm):", expected_jit_key);
  line("JitKey diff:", joined(jit_diff, "; "));
  line("why:", detail);
  line("found by:", found_by);
  line("reproduce:", reproduce);
  return os.str();
}

nlohmann::json Violation::to_json() const {
  nlohmann::json j{{"property", std::string(property_id(property))},
                   {"name", std::string(property_name(property))},
                   {"claim", std::string(property_claim(property))},
                   {"kernel", kernel},
                   {"config", config},
                   {"input", input},
                   {"classes", classes},
                   {"dispatch", dispatched ? nlohmann::json(dispatched->to_string()) : nlohmann::json(nullptr)},
                   {"warmup_key", expected ? nlohmann::json(expected->to_string()) : nlohmann::json(nullptr)},
                   {"key_diff", key_diff},
                   {"jit_key", jit_key},
                   {"warmup_jit_key", expected_jit_key},
                   {"jit_key_diff", jit_diff},
                   {"detail", detail},
                   {"found_by", found_by},
                   {"reproduce", reproduce}};
  return j;
}

}  // namespace warmkey::equivalence
