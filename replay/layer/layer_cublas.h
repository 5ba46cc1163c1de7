// cuBLAS for the layer's plain dense steps (the shared expert's GEMMs, the identity add), loaded
// lazily with dlopen like the driver: the CLI links no cuBLAS and runs where it is missing. The
// handle works on a workspace of its own, so a CUDA-graph capture of the layer allocates nothing;
// both live until the process exits.
#pragma once

#include <cstdint>
#include <string>

#include "warmup/device.h"
#include "warmup/dtype.h"

namespace warmkey::replay::layer {

class Cublas {
 public:
  // The process-wide handle; never throws: unavailable() says why when the library is missing.
  static Cublas& instance();
  bool available() const { return handle_ != nullptr; }
  const std::string& unavailable_reason() const { return reason_; }

  // Row-major c[m, n] (+)= a[m, k] * b[n, k]^T, fp32 accumulation, one rounding to c's dtype
  // (a, b, c of `dtype`: bf16, f16 or f32). Throws DeviceError with cuBLAS's status.
  void gemm(DType dtype, std::int64_t m, std::int64_t n, std::int64_t k, const void* a, const void* b, void* c,
            bool accumulate, Stream stream);
  // y[i] += x[i] for n elements of `dtype`, fp32 math.
  void add(DType dtype, std::int64_t n, const void* x, void* y, Stream stream);

 private:
  Cublas();
  void bind(Stream stream);                                  // the stream and our workspace
  static constexpr std::size_t kWorkspaceBytes = 32u << 20;  // cuBLAS's recommendation for Hopper
  struct Api;
  ~Cublas();
  Cublas(const Cublas&) = delete;
  Cublas& operator=(const Cublas&) = delete;
  DeviceBuffer* workspace_ = nullptr;  // freed with the handle at exit (~Cublas)
  Api* api_ = nullptr;
  void* handle_ = nullptr;
  std::string reason_;
};

}  // namespace warmkey::replay::layer
