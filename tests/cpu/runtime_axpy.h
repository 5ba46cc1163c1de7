// The axpy test kernel of the runtime tests: embedded device sources, KernelDefs, launch specs, temp dirs.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>

#include "warmup/binder.h"
#include "warmup/signature.h"
#include "warmup/source_set.h"
#include "warmup/tensor.h"

namespace warmkey::test_axpy {

// out = SCALE * x + y over n elements; a helper header exercises named includes between sources.
inline constexpr const char* kMathSource = R"(#pragma once
template <class T, class U>
__device__ float axpy_madd(long long scale, T x, U y) {
  return static_cast<float>(scale) * static_cast<float>(x) + static_cast<float>(y);
}
)";

inline constexpr const char* kAxpySource = R"(#pragma once
#include "test/axpy_math.cuh"
template <class S>
__global__ void axpy_kernel(const typename S::x_t* x, const typename S::y_t* y, typename S::out_t* out,
                            typename S::n_t n) {
  const long long count = S::n_class == 1 ? 1 : static_cast<long long>(n);
  const long long i = static_cast<long long>(blockIdx.x) * S::BLOCK + threadIdx.x;
  if (i < count) out[i] = static_cast<typename S::out_t>(axpy_madd(S::SCALE, x[i], y[i]));
}
)";

// Same kernel with bf16 support: the CUDA headers come from NVRTC's -I folder.
inline constexpr const char* kAxpyBf16Source = R"(#pragma once
#include <cuda_bf16.h>
#include "test/axpy.cuh"
)";

// Mutant "signature and device kernel disagree": the device entry takes n before out.
inline constexpr const char* kSwappedSource = R"(#pragma once
template <class S>
__global__ void axpy_swapped_kernel(const typename S::x_t* x, const typename S::y_t* y, typename S::n_t n,
                                    typename S::out_t* out) {}
)";

// A device source that does not compile.
inline constexpr const char* kBrokenSource = R"(#pragma once
template <class S>
__global__ void axpy_broken_kernel(const typename S::x_t* x, const typename S::y_t* y, typename S::out_t* out,
                                   typename S::n_t n) {
  out[0] = S::no_such_member;
}
)";

inline const SourceSet& sources() {
  static const SourceSet set = [] {
    SourceSet s;
    s.add("test/axpy_math.cuh", kMathSource);
    s.add("test/axpy.cuh", kAxpySource);
    s.add("test/axpy_bf16.cuh", kAxpyBf16Source);
    s.add("test/axpy_swapped.cuh", kSwappedSource);
    s.add("test/axpy_broken.cuh", kBrokenSource);
    return s;
  }();
  return set;
}

inline KernelDef make_def(std::string name, std::string header, std::string entry) {
  KernelDef d;
  d.name = std::move(name);
  d.header = std::move(header);
  d.entry = std::move(entry);
  d.constexprs = {{"SCALE"}, {"BLOCK"}};
  d.params = {param::in("x"), param::in("y"), param::out("out"), param::integer("n")};
  d.sources = &sources();
  return d;
}

inline const KernelDef& axpy_def() {
  static const KernelDef d = make_def("axpy", "test/axpy.cuh", "axpy_kernel");
  return d;
}
inline const KernelDef& axpy_bf16_def() {
  static const KernelDef d = make_def("axpy_bf16", "test/axpy_bf16.cuh", "axpy_kernel");
  return d;
}
inline const KernelDef& swapped_def() {
  static const KernelDef d = make_def("axpy_swapped", "test/axpy_swapped.cuh", "axpy_swapped_kernel");
  return d;
}
inline const KernelDef& broken_def() {
  static const KernelDef d = make_def("axpy_broken", "test/axpy_broken.cuh", "axpy_broken_kernel");
  return d;
}

struct Args {
  Tensor x, y, out;
  std::int64_t n = 0;
  std::int64_t scale = 2;
  unsigned block = 128;
};

inline LaunchSpec launch_spec(const Args& a) {
  LaunchSpec s;
  s.block = {a.block, 1, 1};
  s.grid = {static_cast<unsigned>(std::max<std::int64_t>(1, (a.n + a.block - 1) / a.block)), 1, 1};
  s.constant("SCALE", a.scale).constant("BLOCK", a.block);
  s.ptr("x", a.x).ptr("y", a.y).ptr("out", a.out).integer("n", a.n);
  return s;
}

// The bound key of meta inputs: n elements of dtype, x at byte offset x_offset.
inline BoundKey key(std::int64_t n, std::int64_t scale = 2, const KernelDef& def = axpy_def(), DType dtype = DType::f32,
                    int x_offset = 0) {
  Args a;
  a.x = Tensor::meta(dtype, {n}, x_offset);
  a.y = Tensor::meta(dtype, {n});
  a.out = Tensor::meta(dtype, {n});
  a.n = n;
  a.scale = scale;
  return bind(def, launch_spec(a));
}

// A fresh folder under /tmp, removed (permissions restored first) when the test ends.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "warmkey-test-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ec);
    for (auto& e : std::filesystem::recursive_directory_iterator(path_, ec))
      std::filesystem::permissions(e.path(), std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Sets an environment variable for one scope and restores the old value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value->c_str(), 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace warmkey::test_axpy
