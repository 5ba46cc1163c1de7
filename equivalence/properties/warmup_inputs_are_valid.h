// P5 valid warmup inputs: warmup_keys(C) can be listed, and warmup_inputs(k) pass validate(), bind
// and launch like a runtime input (else warmup would crash at startup or compile nothing). Checked
// on each warmup key as a WarmSet warms it.
#pragma once

#include <exception>
#include <vector>

#include "equivalence/properties/common.h"

namespace warmkey::equivalence {

// Appends to out the P5 violations of warmup key ctx.key. Returns false when warmup_inputs(k)
// threw: then nothing else can be checked for k.
bool check_warmup_inputs_are_valid(const spaces::WarmupFacts& f, const WarmupKeyContext& ctx,
                                   std::vector<Violation>& out);

// The P5 violation of a warmup_keys(config) that threw e.
Violation warmup_keys_threw(const Kernel& kernel, const ModelConfig& config, const std::exception& e);

}  // namespace warmkey::equivalence
