// One exception hierarchy for warmkey: every message names the kernel, the field and the value.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace warmkey {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A runtime input, a warmup input or a configuration failed validation.
class InputError : public Error {
 public:
  using Error::Error;
};

// A value cannot be bound to the kernel's signature (integer overflow, arity or kind mismatch).
class BindError : public Error {
 public:
  using Error::Error;
};

// NVRTC rejected a program; the message carries the JitKey and the NVRTC log.
class CompileError : public Error {
 public:
  using Error::Error;
};

// The monitor (error mode) refused a runtime compile.
class RuntimeCompileError : public Error {
 public:
  using Error::Error;
};

// A runtime-cache miss inside a CUDA-graph capture (CaptureScope): refused in every monitor mode,
// before any disk read, compile or module load; the message names the key and its nearest warmed key.
class CaptureMissError : public RuntimeCompileError {
 public:
  using RuntimeCompileError::RuntimeCompileError;
};

// The CUDA driver is missing or a driver call failed.
class DeviceError : public Error {
 public:
  using Error::Error;
};

// A meta tensor was asked for something only a real tensor has.
class MetaTensorError : public Error {
 public:
  using Error::Error;
};

// A measured figure above the device's peak (warmup/roofline.h): the model or the timing is wrong.
class RooflineError : public Error {
 public:
  using Error::Error;
};

namespace detail {
inline void append_all(std::ostringstream&) {}
template <class T, class... Rest>
void append_all(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  append_all(os, rest...);
}
}  // namespace detail

// Concatenates its arguments with operator<< into one string.
template <class... Parts>
std::string str_cat(const Parts&... parts) {
  std::ostringstream os;
  detail::append_all(os, parts...);
  return os.str();
}

// Throws InputError "kernel 'K': field 'F': <detail>".
template <class... Parts>
[[noreturn]] void fail_input(std::string_view kernel, std::string_view field, const Parts&... detail) {
  throw InputError(str_cat("kernel '", kernel, "': field '", field, "': ", detail...));
}

// Checks a condition on a runtime or warmup input; throws InputError naming kernel and field.
template <class... Parts>
void check_input(bool ok, std::string_view kernel, std::string_view field, const Parts&... detail) {
  if (!ok) fail_input(kernel, field, detail...);
}

}  // namespace warmkey
