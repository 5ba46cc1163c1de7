// A process-wide count of device-source edits, so a runtime notices an edit after start-up.
#pragma once

#include <cstdint>

namespace warmkey {

// Bumped by every SourceSet::add (of any set). A runtime compares it with the value it last saw on
// each lookup (one atomic load on the hit path): when it moved, in-memory entries whose JitKey is
// no longer the one their bound key makes now are dropped, so the old text's binary is never served.
std::uint64_t source_generation();

}  // namespace warmkey
