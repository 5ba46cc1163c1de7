// cuBLAS through dlopen (layer_cublas.h).
#include "replay/layer/layer_cublas.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <cublas_v2.h>

#include "warmup/error.h"

namespace warmkey::replay::layer {

struct Cublas::Api {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  // cublasGemmEx is overloaded in C++ (the legacy cudaDataType compute type): name the C one.
  using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                    const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                    cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  GemmEx gemm_ex = nullptr;
  decltype(&cublasAxpyEx) axpy_ex = nullptr;
};

namespace {

cudaDataType cuda_type(DType d) {
  switch (d) {
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    case DType::f32: return CUDA_R_32F;
    default: throw InputError(str_cat("layer cublas: dtype ", dtype_name(d), " is not bf16, f16 or f32"));
  }
}

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw DeviceError(str_cat("layer: ", what, " failed with cuBLAS status ", static_cast<int>(s)));
}

}  // namespace

Cublas& Cublas::instance() {
  static Cublas c;
  return c;
}

Cublas::Cublas() {
  // The loader's path first, then the toolkit's library folder (often not in the loader's cache).
  void* lib = nullptr;
  std::vector<std::string> names = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
  for (const char* root : {static_cast<const char*>(std::getenv("CUDA_HOME")), "/usr/local/cuda"}) {
    if (root && *root) {
      for (const char* n : {"libcublas.so.13", "libcublas.so.12"}) names.push_back(str_cat(root, "/lib64/", n));
    }
  }
  for (const std::string& name : names) {
    lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) break;
  }
  if (!lib) {
    reason_ =
        str_cat("cuBLAS not found (libcublas.so.13/.12 on the loader path, $CUDA_HOME/lib64, /usr/local/cuda/lib64: ",
                dlerror(), ")");
    return;
  }
  static Api api;
  api.create = reinterpret_cast<decltype(api.create)>(dlsym(lib, "cublasCreate_v2"));
  api.destroy = reinterpret_cast<decltype(api.destroy)>(dlsym(lib, "cublasDestroy_v2"));
  api.set_stream = reinterpret_cast<decltype(api.set_stream)>(dlsym(lib, "cublasSetStream_v2"));
  api.set_workspace = reinterpret_cast<decltype(api.set_workspace)>(dlsym(lib, "cublasSetWorkspace_v2"));
  api.gemm_ex = reinterpret_cast<decltype(api.gemm_ex)>(dlsym(lib, "cublasGemmEx"));
  api.axpy_ex = reinterpret_cast<decltype(api.axpy_ex)>(dlsym(lib, "cublasAxpyEx"));
  if (!api.create || !api.destroy || !api.set_stream || !api.set_workspace || !api.gemm_ex || !api.axpy_ex) {
    reason_ =
        "cuBLAS lacks cublasCreate_v2, cublasDestroy_v2, cublasSetStream_v2, cublasSetWorkspace_v2, cublasGemmEx or "
        "cublasAxpyEx";
    return;
  }
  Device& dev = Device::instance();
  if (!dev.available()) {
    reason_ = str_cat("no GPU (", dev.unavailable_reason(), ")");
    return;
  }
  cublasHandle_t h = nullptr;
  if (api.create(&h) != CUBLAS_STATUS_SUCCESS || !h) {
    reason_ = "cublasCreate failed";
    return;
  }
  api_ = &api;
  handle_ = h;
  // A workspace of our own, allocated here (never inside a CUDA-graph capture): cuBLAS would
  // otherwise take one from its pool, out of the monitor's sight.
  workspace_ = new DeviceBuffer(dev.alloc(kWorkspaceBytes));
}

Cublas::~Cublas() {
  // At exit, before the Device (constructed first, so destroyed after): the handle's own memory and
  // our workspace go back, so a leak check (compute-sanitizer --leak-check full) sees none.
  if (handle_ != nullptr) api_->destroy(static_cast<cublasHandle_t>(handle_));
  delete workspace_;
}

void Cublas::bind(Stream stream) {
  auto h = static_cast<cublasHandle_t>(handle_);
  check(api_->set_stream(h, static_cast<cudaStream_t>(stream)), "cublasSetStream");
  // cublasSetStream resets the workspace to the default pool: bind ours again.
  check(api_->set_workspace(h, workspace_->data(), kWorkspaceBytes), "cublasSetWorkspace");
}

void Cublas::gemm(DType dtype, std::int64_t m, std::int64_t n, std::int64_t k, const void* a, const void* b, void* c,
                  bool accumulate, Stream stream) {
  if (!available()) throw DeviceError(str_cat("layer: dense GEMM: ", reason_));
  auto h = static_cast<cublasHandle_t>(handle_);
  bind(stream);
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  const cudaDataType t = cuda_type(dtype);
  // Row-major C = A B^T is column-major C^T = B A^T: B (k x n column-major) transposed, A as is.
  check(api_->gemm_ex(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                      &alpha, b, t, static_cast<int>(k), a, t, static_cast<int>(k), &beta, c, t, static_cast<int>(n),
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
}

void Cublas::add(DType dtype, std::int64_t n, const void* x, void* y, Stream stream) {
  if (!available()) throw DeviceError(str_cat("layer: elementwise add: ", reason_));
  auto h = static_cast<cublasHandle_t>(handle_);
  bind(stream);
  const float alpha = 1.0f;
  const cudaDataType t = cuda_type(dtype);
  check(api_->axpy_ex(h, static_cast<int>(n), &alpha, CUDA_R_32F, x, t, 1, y, t, 1, CUDA_R_32F), "cublasAxpyEx");
}

}  // namespace warmkey::replay::layer
