// P5 valid warmup inputs: warmup_inputs(k) validate, bind and launch.
#include "equivalence/properties/warmup_inputs_are_valid.h"

namespace warmkey::equivalence {

bool check_warmup_inputs_are_valid(const spaces::WarmupFacts& f, const WarmupKeyContext& ctx,
                                   std::vector<Violation>& out) {
  if (!f.inputs_error.empty()) {
    Violation v = warmup_violation(Property::P5, f, ctx);
    v.detail = str_cat("warmup_inputs(k) threw: ", f.inputs_error);
    out.push_back(std::move(v));
    return false;
  }
  if (!f.invalid.empty()) {
    Violation v = warmup_violation(Property::P5, f, ctx);
    v.detail = str_cat("validate(warmup_inputs(k)) rejects the warmup inputs: ", f.invalid);
    out.push_back(std::move(v));
  }
  if (!f.bind_error.empty()) {
    Violation v = warmup_violation(Property::P5, f, ctx);
    v.detail = str_cat("launch_spec/bind of warmup_inputs(k) threw (warmup would crash at startup): ", f.bind_error);
    out.push_back(std::move(v));
  } else if (!f.launches) {
    Violation v = warmup_violation(Property::P5, f, ctx);
    v.detail = "warmup_inputs(k) launch nothing (an empty batch): the key cannot be compiled from them";
    out.push_back(std::move(v));
  }
  return true;
}

Violation warmup_keys_threw(const Kernel& kernel, const ModelConfig& config, const std::exception& e) {
  Violation v;
  v.property = Property::P5;
  v.kernel = kernel.name();
  v.config = config.name;
  v.detail = str_cat("warmup_keys(C) threw: ", e.what());
  v.found_by = "warmup_keys";
  return v;
}

}  // namespace warmkey::equivalence
