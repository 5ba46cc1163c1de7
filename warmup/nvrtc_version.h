// The version of the NVRTC library this process loaded: part of every JitKey and of the arch
// checks' messages. Kept apart from the compiler so that warmup/arch.h can name it without
// depending on the compiler.
#pragma once

#include <string>

namespace warmkey {

// "13.0"; "unknown" when NVRTC does not answer. Cached.
const std::string& nvrtc_library_version();

}  // namespace warmkey
