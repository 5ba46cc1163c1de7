// The loaded NVRTC's version (warmup/nvrtc_version.h).
#include "warmup/nvrtc_version.h"

#include <nvrtc.h>

#include "warmup/error.h"

namespace warmkey {

const std::string& nvrtc_library_version() {
  static const std::string version = [] {
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return std::string("unknown");
    return str_cat(major, ".", minor);
  }();
  return version;
}

}  // namespace warmkey
