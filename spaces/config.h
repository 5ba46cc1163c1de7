// Model configurations for fuzzing and properties: an embedded configuration with its serving
// knobs varied (activation dtype, token budget, EP size, EPLB replicas, vision, LoRA, backends,
// index dtypes), valid by construction and named after what was changed.
#pragma once

#include "spaces/draw.h"
#include "warmup/model_config.h"

namespace warmkey::spaces {

// "dsv4-flash[act=f16,tokens=3000,ep=4,eplb=16,...]"; throws nothing for any draw.
ModelConfig draw_config(Draw& d);

}  // namespace warmkey::spaces
