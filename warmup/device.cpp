// The CUDA driver behind dlopen: primary context, module loading, launches, memory, streams, events.
#include "warmup/device.h"

#include <cuda.h>  // types and enums only: libcuda is never linked
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <utility>

#include "warmup/arch.h"
#include "warmup/error.h"
#include "warmup/source_set.h"

namespace warmkey {

// Driver entry points, resolved by their versioned symbol names (the ABI cuda.h declares).
struct Device::Api {
  void* lib = nullptr;
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*get_error_name)(CUresult, const char**) = nullptr;
  CUresult (*get_error_string)(CUresult, const char**) = nullptr;
  CUresult (*device_get_count)(int*) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*device_get_name)(char*, int, CUdevice) = nullptr;
  CUresult (*device_get_attribute)(int*, CUdevice_attribute, CUdevice) = nullptr;
  CUresult (*primary_ctx_retain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  CUresult (*ctx_synchronize)() = nullptr;
  CUresult (*module_load_data)(CUmodule*, const void*) = nullptr;
  CUresult (*module_get_function)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*func_set_attribute)(CUfunction, CUfunction_attribute, int) = nullptr;
  CUresult (*launch_kernel_ex)(const CUlaunchConfig*, CUfunction, void**, void**) = nullptr;  // optional
  CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                            void**, void**) = nullptr;
  CUresult (*mem_alloc)(CUdeviceptr*, std::size_t) = nullptr;
  CUresult (*mem_free)(CUdeviceptr) = nullptr;
  CUresult (*memcpy_htod)(CUdeviceptr, const void*, std::size_t) = nullptr;
  CUresult (*memcpy_dtoh)(void*, CUdeviceptr, std::size_t) = nullptr;
  CUresult (*memset_d8)(CUdeviceptr, unsigned char, std::size_t) = nullptr;
  CUresult (*memset_d8_async)(CUdeviceptr, unsigned char, std::size_t, CUstream) = nullptr;
  CUresult (*stream_create)(CUstream*, unsigned) = nullptr;
  CUresult (*stream_create_with_priority)(CUstream*, unsigned, int) = nullptr;
  CUresult (*ctx_stream_priority_range)(int*, int*) = nullptr;
  CUresult (*stream_destroy)(CUstream) = nullptr;
  CUresult (*stream_synchronize)(CUstream) = nullptr;
  CUresult (*event_create)(CUevent*, unsigned) = nullptr;
  CUresult (*event_record)(CUevent, CUstream) = nullptr;
  CUresult (*event_synchronize)(CUevent) = nullptr;
  CUresult (*event_elapsed_time)(float*, CUevent, CUevent) = nullptr;
  CUresult (*event_destroy)(CUevent) = nullptr;
  CUresult (*stream_wait_event)(CUstream, CUevent, unsigned) = nullptr;
  CUresult (*stream_begin_capture)(CUstream, CUstreamCaptureMode) = nullptr;
  CUresult (*stream_end_capture)(CUstream, CUgraph*) = nullptr;
  CUresult (*stream_is_capturing)(CUstream, CUstreamCaptureStatus*) = nullptr;
  CUresult (*graph_instantiate)(CUgraphExec*, CUgraph, unsigned long long) = nullptr;
  CUresult (*graph_launch)(CUgraphExec, CUstream) = nullptr;
  CUresult (*graph_exec_destroy)(CUgraphExec) = nullptr;
  CUresult (*graph_destroy)(CUgraph) = nullptr;
  CUresult (*graph_get_nodes)(CUgraph, CUgraphNode*, std::size_t*) = nullptr;
  CUresult (*tensor_map_encode_tiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                      const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                      CUtensorMapSwizzle, CUtensorMapL2promotion,
                                      CUtensorMapFloatOOBfill) = nullptr;  // optional (CUDA 12+)
};

namespace {

constexpr unsigned kDefaultSharedLimit = 48 * 1024;

// The first of `names` the library exports; throws DeviceError when none is there.
template <class Fn>
void resolve(void* lib, Fn* fn, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (void* p = ::dlsym(lib, n)) {
      *fn = reinterpret_cast<Fn>(p);
      return;
    }
  }
  throw DeviceError(str_cat("libcuda.so.1 does not export ", *names.begin(), " (driver too old?)"));
}

// Fills every entry point of the Api struct `a`.
void resolve_all(void* lib, auto& a) {
  resolve(lib, &a.init, {"cuInit"});
  resolve(lib, &a.get_error_name, {"cuGetErrorName"});
  resolve(lib, &a.get_error_string, {"cuGetErrorString"});
  resolve(lib, &a.device_get_count, {"cuDeviceGetCount"});
  resolve(lib, &a.device_get, {"cuDeviceGet"});
  resolve(lib, &a.device_get_name, {"cuDeviceGetName"});
  resolve(lib, &a.device_get_attribute, {"cuDeviceGetAttribute"});
  resolve(lib, &a.primary_ctx_retain, {"cuDevicePrimaryCtxRetain"});
  resolve(lib, &a.ctx_set_current, {"cuCtxSetCurrent"});
  resolve(lib, &a.ctx_synchronize, {"cuCtxSynchronize"});
  resolve(lib, &a.module_load_data, {"cuModuleLoadData"});
  resolve(lib, &a.module_get_function, {"cuModuleGetFunction"});
  resolve(lib, &a.func_set_attribute, {"cuFuncSetAttribute"});
  resolve(lib, &a.launch_kernel, {"cuLaunchKernel"});
  a.launch_kernel_ex = reinterpret_cast<decltype(a.launch_kernel_ex)>(::dlsym(lib, "cuLaunchKernelEx"));
  a.tensor_map_encode_tiled =
      reinterpret_cast<decltype(a.tensor_map_encode_tiled)>(::dlsym(lib, "cuTensorMapEncodeTiled"));
  resolve(lib, &a.stream_begin_capture, {"cuStreamBeginCapture_v2", "cuStreamBeginCapture"});
  resolve(lib, &a.stream_end_capture, {"cuStreamEndCapture"});
  resolve(lib, &a.stream_is_capturing, {"cuStreamIsCapturing"});
  resolve(lib, &a.graph_instantiate, {"cuGraphInstantiateWithFlags"});
  resolve(lib, &a.graph_launch, {"cuGraphLaunch"});
  resolve(lib, &a.graph_exec_destroy, {"cuGraphExecDestroy"});
  resolve(lib, &a.graph_destroy, {"cuGraphDestroy"});
  resolve(lib, &a.graph_get_nodes, {"cuGraphGetNodes"});
  resolve(lib, &a.mem_alloc, {"cuMemAlloc_v2"});
  resolve(lib, &a.mem_free, {"cuMemFree_v2"});
  resolve(lib, &a.memcpy_htod, {"cuMemcpyHtoD_v2"});
  resolve(lib, &a.memcpy_dtoh, {"cuMemcpyDtoH_v2"});
  resolve(lib, &a.memset_d8, {"cuMemsetD8_v2"});
  resolve(lib, &a.memset_d8_async, {"cuMemsetD8Async"});
  resolve(lib, &a.stream_create, {"cuStreamCreate"});
  resolve(lib, &a.stream_create_with_priority, {"cuStreamCreateWithPriority"});
  resolve(lib, &a.ctx_stream_priority_range, {"cuCtxGetStreamPriorityRange"});
  resolve(lib, &a.stream_destroy, {"cuStreamDestroy_v2"});
  resolve(lib, &a.stream_synchronize, {"cuStreamSynchronize"});
  resolve(lib, &a.event_create, {"cuEventCreate"});
  resolve(lib, &a.event_record, {"cuEventRecord"});
  resolve(lib, &a.event_synchronize, {"cuEventSynchronize"});
  resolve(lib, &a.event_elapsed_time, {"cuEventElapsedTime_v2", "cuEventElapsedTime"});
  resolve(lib, &a.event_destroy, {"cuEventDestroy_v2"});
  resolve(lib, &a.stream_wait_event, {"cuStreamWaitEvent"});
}

// Kernel arguments in the layout cuLaunchKernel reads: one 8-byte slot per parameter.
// Tensor-map parameters point into `maps` (128 bytes each, 64-byte aligned, zero unless encoded).
struct PackedArgs {
  std::array<std::uint64_t, kMaxParams> slots{};
  std::array<void*, kMaxParams> ptrs{};
  std::array<CUtensorMap, kMaxTensorMaps + 1> maps{};  // CUtensorMap is aligned as TMA needs; the last: zeros
};

// The driver's element type of a tensor map over `d` (fp8 moves as raw bytes).
CUtensorMapDataType map_dtype(DType d, const std::string& what) {
  switch (d) {
    case DType::bf16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case DType::f16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case DType::f32: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    case DType::i32: return CU_TENSOR_MAP_DATA_TYPE_INT32;
    default:
      if (dtype_size(d) == 1) return CU_TENSOR_MAP_DATA_TYPE_UINT8;
  }
  throw BindError(str_cat(what, ": no tensor-map element type for ", dtype_name(d)));
}

CUtensorMapSwizzle map_swizzle(int bytes, const std::string& what) {
  switch (bytes) {
    case 0: return CU_TENSOR_MAP_SWIZZLE_NONE;
    case 32: return CU_TENSOR_MAP_SWIZZLE_32B;
    case 64: return CU_TENSOR_MAP_SWIZZLE_64B;
    case 128: return CU_TENSOR_MAP_SWIZZLE_128B;
    default: throw BindError(str_cat(what, ": swizzle ", bytes, " is not 0, 32, 64 or 128 bytes"));
  }
}

template <class T>
void put(PackedArgs& p, int i, T v) {
  static_assert(sizeof(T) <= sizeof(std::uint64_t));
  std::memcpy(&p.slots[i], &v, sizeof v);
  p.ptrs[i] = &p.slots[i];
}

void pack_integer(PackedArgs& p, int i, const BoundParam& b, __int128 v) {
  if (b.attr == ArgAttr::constexpr_one) return put<std::int32_t>(p, i, 1);
  switch (static_cast<IntWidth>(b.type)) {
    case IntWidth::i32: return put(p, i, static_cast<std::int32_t>(v));
    case IntWidth::i64: return put(p, i, static_cast<std::int64_t>(v));
    case IntWidth::u64: return put(p, i, static_cast<std::uint64_t>(v));
  }
}

// Packs spec's arguments as the bound key's device signature expects. A meta tensor throws
// MetaTensorError here, before any driver call.
PackedArgs pack(const BoundKey& bound, const LaunchSpec& spec) {
  const KernelDef& def = *bound.kernel;
  if (spec.num_args != static_cast<int>(def.params.size()))
    throw BindError(str_cat("kernel '", def.name, "': launch spec has ", spec.num_args, " arguments, signature has ",
                            def.params.size()));
  PackedArgs p;
  for (int i = 0; i < spec.num_args; ++i) {
    const ArgValue& a = spec.args[i];
    switch (def.params[i].kind) {
      case ParamKind::pointer: {
        void* addr = a.tensor != nullptr ? a.tensor->data_ptr() : nullptr;
        put<std::uint64_t>(p, i, reinterpret_cast<std::uintptr_t>(addr));
        break;
      }
      case ParamKind::integer: pack_integer(p, i, bound.params[i], a.integer); break;
      case ParamKind::floating: put(p, i, static_cast<float>(a.floating)); break;
      case ParamKind::boolean: put(p, i, a.boolean); break;
      case ParamKind::tensor_map: {
        if (a.map >= 0 && spec.maps[a.map].tensor != nullptr)
          (void)spec.maps[a.map].tensor->data_ptr();  // meta: throws
        break;                                        // pointed at by Device::launch, which encodes the maps
      }
    }
  }
  return p;
}

// Names of the results a driver-less or GPU-less machine gives, for when cuGetErrorName cannot help
// (the toolkit's stub library answers every call with CUDA_ERROR_STUB_LIBRARY).
const char* fallback_error_name(int result) {
  switch (result) {
    case CUDA_ERROR_STUB_LIBRARY: return "CUDA_ERROR_STUB_LIBRARY (the toolkit's stub libcuda, not a driver)";
    case 35: return "CUDA_ERROR_INSUFFICIENT_DRIVER (the driver is older than the CUDA runtime)";
    case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
    default: return "CUDA error";
  }
}

CUdeviceptr dptr(const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p)); }

}  // namespace

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : dev_(o.dev_), ptr_(o.ptr_), bytes_(o.bytes_) {
  o.dev_ = nullptr;
  o.ptr_ = 0;
  o.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    DeviceBuffer old(std::move(*this));
    dev_ = o.dev_;
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.dev_ = nullptr;
    o.ptr_ = 0;
    o.bytes_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (dev_ == nullptr || ptr_ == 0) return;
  try {
    dev_->free(ptr_);
  } catch (...) {
    // A destructor must not throw; a failed free leaks the allocation.
  }
}

Device& Device::instance() {
  // Never destroyed: buffers and modules may outlive static destruction order.
  static Device* device = new Device();
  initialised_.store(device, std::memory_order_release);
  return *device;
}

int device_ordinal() {
  const char* v = std::getenv("WARMKEY_DEVICE");
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 0 || n > 1024) throw DeviceError(str_cat("WARMKEY_DEVICE='", v, "' is not a device ordinal"));
  return static_cast<int>(n);
}

Device::Device() : api_(std::make_unique<Api>()) {
  try {
    load(device_ordinal());
    available_ = true;
  } catch (const std::exception& e) {
    available_ = false;
    reason_ = e.what();
  }
}

void Device::load(int ordinal) {
  api_->lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (api_->lib == nullptr) {
    const char* why = ::dlerror();
    throw DeviceError(str_cat("CUDA driver not found: dlopen(\"libcuda.so.1\") failed: ", why ? why : "unknown"));
  }
  resolve_all(api_->lib, *api_);
  check(api_->init(0), "cuInit");
  int count = 0;
  check(api_->device_get_count(&count), "cuDeviceGetCount");
  if (count == 0) throw DeviceError("the CUDA driver reports no device");
  if (ordinal >= count) throw DeviceError(str_cat("WARMKEY_DEVICE=", ordinal, " but only ", count, " device(s)"));
  CUdevice dev = 0;
  check(api_->device_get(&dev, ordinal), "cuDeviceGet");
  char name[256] = {};
  check(api_->device_get_name(name, sizeof name - 1, dev), "cuDeviceGetName");
  name_ = name;
  check(api_->device_get_attribute(&sms_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev), "cuDeviceGetAttribute");
  check(api_->device_get_attribute(&major_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute");
  check(api_->device_get_attribute(&minor_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute");
  cu_device_ = dev;
}

void Device::prepare() const {
  require();
  std::call_once(context_once_, [this] {  // a throw leaves the flag unset: the next use tries again
    CUcontext ctx = nullptr;
    check(api_->primary_ctx_retain(&ctx, static_cast<CUdevice>(cu_device_)), "cuDevicePrimaryCtxRetain");
    context_ = ctx;
    context_ready_.store(true, std::memory_order_release);
  });
}

void Device::check(int result, const char* what) const {
  if (result == CUDA_SUCCESS) return;
  const char* name = nullptr;
  const char* text = nullptr;
  auto r = static_cast<CUresult>(result);
  if (api_->get_error_name == nullptr || api_->get_error_name(r, &name) != CUDA_SUCCESS) name = nullptr;
  if (api_->get_error_string == nullptr || api_->get_error_string(r, &text) != CUDA_SUCCESS) text = nullptr;
  throw DeviceError(str_cat(what, " failed: ", name ? name : fallback_error_name(result), " (code ", result,
                            text ? str_cat(": ", text) : std::string(), ")"));
}

void Device::check(int result, const std::string& what) const {
  if (result != CUDA_SUCCESS) check(result, what.c_str());
}

void Device::require() const {
  if (!available_) throw DeviceError(str_cat("no CUDA device available: ", reason_));
}

void Device::make_current() const {
  prepare();
  check(api_->ctx_set_current(static_cast<CUcontext>(context_)), "cuCtxSetCurrent");
}

std::string Device::arch() const {
  require();
  return native_arch(major_, minor_);
}

struct Device::Module {
  std::mutex mu;  // held while this cubin loads: only callers of the same cubin wait
  CUmodule module = nullptr;
};

void* Device::function(const CompiledKernel& k) {
  require();
  const std::string& digest = k.digest.empty() ? k.key.digest() : k.digest;
  {
    std::lock_guard lock(mu_);
    if (auto it = functions_.find(digest); it != functions_.end()) return it->second;
  }
  if (!k.cubin || k.cubin->empty())
    throw DeviceError(str_cat("kernel '", k.key.kernel, "': ", k.key.signature_text(), " has no cubin"));
  const std::string cubin_id = hex_digest(*k.cubin);  // outside the lock: cubins are megabytes
  std::shared_ptr<Module> m;
  {
    std::lock_guard lock(mu_);
    auto& slot = modules_[cubin_id];
    if (!slot) slot = std::make_shared<Module>();
    m = slot;
  }
  CUmodule module = nullptr;
  {
    std::lock_guard load_lock(m->mu);
    if (m->module == nullptr) {
      if (CaptureScope::open()) {
        CaptureScope::count_refused_module_load();
        throw DeviceError(str_cat("cuModuleLoadData for kernel '", k.key.kernel, "' (", k.key.signature_text(),
                                  ") inside a CUDA-graph capture: load every module before capturing (warm with "
                                  "module loads)"));
      }
      make_current();
      check(api_->module_load_data(&m->module, k.cubin->data()),
            str_cat("cuModuleLoadData for kernel '", k.key.kernel, "' (", k.key.signature_text(), ")"));
      modules_loaded_.fetch_add(1);
    }
    module = m->module;
  }
  CUfunction fn = nullptr;
  check(api_->module_get_function(&fn, module, k.lowered_name.c_str()),
        str_cat("cuModuleGetFunction('", k.lowered_name, "') for kernel '", k.key.kernel, "'"));
  std::lock_guard lock(mu_);
  functions_.emplace(digest, static_cast<void*>(fn));
  return fn;
}

void Device::launch(const CompiledKernel& k, std::atomic<void*>& function_cache, const BoundKey& bound,
                    const LaunchSpec& spec, Stream stream) {
  PackedArgs args = pack(bound, spec);
  require();
  for (int i = 0; i < spec.num_args; ++i) {
    if (bound.kernel->params[i].kind != ParamKind::tensor_map) continue;
    const int m = spec.args[i].map;
    args.ptrs[i] = &args.maps[m >= 0 ? m : kMaxTensorMaps];
    if (m >= 0)
      encode_map(spec.maps[m], &args.maps[m],
                 str_cat("kernel '", bound.kernel->name, "': tensor map '", bound.kernel->params[i].name, "'"));
  }
  auto fn = static_cast<CUfunction>(function_cache.load(std::memory_order_acquire));
  if (fn == nullptr) {
    fn = static_cast<CUfunction>(function(k));
    function_cache.store(fn, std::memory_order_release);
  }
  make_current();
  const std::string& kernel = bound.kernel->name;
  if (spec.shared_bytes > kDefaultSharedLimit) {
    int r = api_->func_set_attribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     static_cast<int>(spec.shared_bytes));
    if (r != CUDA_SUCCESS)
      check(r, str_cat("kernel '", kernel, "': raising dynamic shared memory to ", spec.shared_bytes, " bytes"));
  }
  // Launch attributes exist from compute capability 9.0 on (cuLaunchKernelEx); elsewhere, or with a
  // driver without it, the plain launch of `grid`.
  const bool ex = major_ >= 9 && api_->launch_kernel_ex != nullptr;
  const bool clustered = ex && spec.cluster > 1;
  const std::array<unsigned, 3>& grid = clustered ? spec.cluster_grid : spec.grid;
  int r;
  if (ex && (spec.programmatic_dependent_launch || clustered)) {
    std::array<CUlaunchAttribute, 2> attrs{};
    unsigned n = 0;
    if (spec.programmatic_dependent_launch) {
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attrs[n++].value.programmaticStreamSerializationAllowed = 1;
    }
    if (clustered) {
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      attrs[n].value.clusterDim.x = spec.cluster;
      attrs[n].value.clusterDim.y = 1;
      attrs[n++].value.clusterDim.z = 1;
    }
    CUlaunchConfig config{};
    config.gridDimX = grid[0], config.gridDimY = grid[1], config.gridDimZ = grid[2];
    config.blockDimX = spec.block[0], config.blockDimY = spec.block[1], config.blockDimZ = spec.block[2];
    config.sharedMemBytes = spec.shared_bytes;
    config.hStream = static_cast<CUstream>(stream);
    config.attrs = attrs.data();
    config.numAttrs = n;
    r = api_->launch_kernel_ex(&config, fn, args.ptrs.data(), nullptr);
  } else {
    r = api_->launch_kernel(fn, grid[0], grid[1], grid[2], spec.block[0], spec.block[1], spec.block[2],
                            spec.shared_bytes, static_cast<CUstream>(stream), args.ptrs.data(), nullptr);
  }
  if (r != CUDA_SUCCESS)
    check(r, str_cat("launch of kernel '", kernel, "' ", k.key.signature_text(), " grid=", grid[0], ",", grid[1], ",",
                     grid[2], " block=", spec.block[0], ",", spec.block[1], ",", spec.block[2],
                     " shared=", spec.shared_bytes, clustered ? str_cat(" cluster=", spec.cluster) : std::string()));
}

void Device::encode_map(const TensorMapDesc& d, void* out_bytes, const std::string& what) {
  auto* out = static_cast<CUtensorMap*>(out_bytes);
  if (api_->tensor_map_encode_tiled == nullptr)
    throw DeviceError(str_cat(what, ": this driver has no cuTensorMapEncodeTiled (CUDA 12 or newer needed)"));
  std::array<cuuint64_t, 5> dims{};
  std::array<cuuint64_t, 4> strides{};
  std::array<cuuint32_t, 5> box{}, element_strides{};
  for (int i = 0; i < d.rank; ++i) {
    dims[i] = d.dims[i];
    box[i] = d.box[i];
    element_strides[i] = 1;
    if (i + 1 < d.rank) strides[i] = d.strides[i];
  }
  const CUresult r = api_->tensor_map_encode_tiled(
      out, map_dtype(d.tensor->dtype(), what), static_cast<cuuint32_t>(d.rank), d.tensor->data_ptr(), dims.data(),
      strides.data(), box.data(), element_strides.data(), CU_TENSOR_MAP_INTERLEAVE_NONE,
      map_swizzle(d.swizzle_bytes, what), CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::string shape;
    for (int i = 0; i < d.rank; ++i)
      shape += str_cat(i ? "," : "", dims[i], "/box ", box[i], i + 1 < d.rank ? str_cat("/stride ", strides[i]) : "");
    check(r, str_cat(what, ": cuTensorMapEncodeTiled (rank ", d.rank, ": ", shape, ", base ", d.tensor->data_ptr(),
                     ", swizzle ", d.swizzle_bytes, ")"));
  }
}

// ---- CUDA graphs ----

namespace {
std::atomic<int> g_captures{0};
std::atomic<std::int64_t> g_refused_allocations{0}, g_refused_module_loads{0}, g_refused_misses{0};
}  // namespace

CaptureScope::CaptureScope() { g_captures.fetch_add(1, std::memory_order_acq_rel); }
CaptureScope::~CaptureScope() { g_captures.fetch_sub(1, std::memory_order_acq_rel); }
bool CaptureScope::open() { return g_captures.load(std::memory_order_acquire) > 0; }
CaptureScope::Refusals CaptureScope::refusals() {
  return {g_refused_allocations.load(), g_refused_module_loads.load(), g_refused_misses.load()};
}
void CaptureScope::count_refused_allocation() { g_refused_allocations.fetch_add(1); }
void CaptureScope::count_refused_module_load() { g_refused_module_loads.fetch_add(1); }
void CaptureScope::count_refused_miss() { g_refused_misses.fetch_add(1); }

Graph::~Graph() {
  if (exec_ == nullptr && graph_ == nullptr) return;
  Device& d = Device::instance();
  if (exec_ != nullptr) d.api_->graph_exec_destroy(static_cast<CUgraphExec>(exec_));
  if (graph_ != nullptr) d.api_->graph_destroy(static_cast<CUgraph>(graph_));
}
Graph::Graph(Graph&& o) noexcept
    : exec_(std::exchange(o.exec_, nullptr)), graph_(std::exchange(o.graph_, nullptr)), nodes_(o.nodes_) {}
Graph& Graph::operator=(Graph&& o) noexcept {
  if (this != &o) {
    Graph old(std::move(*this));
    exec_ = std::exchange(o.exec_, nullptr);
    graph_ = std::exchange(o.graph_, nullptr);
    nodes_ = o.nodes_;
  }
  return *this;
}
void Graph::launch(Stream stream) const {
  if (exec_ == nullptr) throw DeviceError("Graph::launch: an empty graph (no capture made it)");
  Device& d = Device::instance();
  d.make_current();
  d.check(d.api_->graph_launch(static_cast<CUgraphExec>(exec_), static_cast<CUstream>(stream)), "cuGraphLaunch");
}

bool Device::capturing(Stream stream) const {
  if (!available_) return false;
  make_current();
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  check(api_->stream_is_capturing(static_cast<CUstream>(stream), &st), "cuStreamIsCapturing");
  return st != CU_STREAM_CAPTURE_STATUS_NONE;
}

void Device::begin_capture(Stream stream) {
  require();
  if (stream == nullptr) throw DeviceError("Device::capture: the default stream cannot be captured; pass a stream");
  make_current();
  // Global mode: an unsafe call from any thread (a synchronous copy, an allocation) fails the
  // capture instead of running outside it.
  check(api_->stream_begin_capture(static_cast<CUstream>(stream), CU_STREAM_CAPTURE_MODE_GLOBAL),
        "cuStreamBeginCapture");
}

Graph Device::end_capture(Stream stream) {
  make_current();
  CUgraph g = nullptr;
  check(api_->stream_end_capture(static_cast<CUstream>(stream), &g), "cuStreamEndCapture");
  Graph out;
  out.graph_ = g;
  std::size_t n = 0;
  check(api_->graph_get_nodes(g, nullptr, &n), "cuGraphGetNodes");
  out.nodes_ = n;
  CUgraphExec exec = nullptr;
  // Each kernel node keeps the priority of the stream it was captured from (a lane's stream
  // priority), not the priority of the stream the graph is launched into.
  check(api_->graph_instantiate(&exec, g, CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY),
        "cuGraphInstantiateWithFlags");
  out.exec_ = exec;
  return out;
}

void Device::abort_capture(Stream stream) noexcept {
  CUgraph g = nullptr;
  if (api_->stream_end_capture(static_cast<CUstream>(stream), &g) == CUDA_SUCCESS && g != nullptr)
    api_->graph_destroy(g);
}

DeviceBuffer Device::alloc(std::size_t bytes) {
  require();
  if (CaptureScope::open()) {
    CaptureScope::count_refused_allocation();
    throw DeviceError(str_cat("cuMemAlloc of ", bytes,
                              " bytes inside a CUDA-graph capture: allocate before capturing (a capture records no "
                              "allocation, and its replay would reuse one address)"));
  }
  make_current();
  CUdeviceptr p = 0;
  check(api_->mem_alloc(&p, std::max<std::size_t>(bytes, 1)), str_cat("cuMemAlloc of ", bytes, " bytes"));
  return DeviceBuffer(this, p, bytes);
}

void Device::free(std::uint64_t ptr) {
  require();
  make_current();
  check(api_->mem_free(static_cast<CUdeviceptr>(ptr)), "cuMemFree");
}

void Device::copy_to_device(void* dst, const void* src, std::size_t bytes) {
  require();
  if (bytes == 0) return;
  make_current();
  check(api_->memcpy_htod(dptr(dst), src, bytes), str_cat("cuMemcpyHtoD of ", bytes, " bytes"));
}

void Device::copy_to_host(void* dst, const void* src, std::size_t bytes) {
  require();
  if (bytes == 0) return;
  make_current();
  check(api_->memcpy_dtoh(dst, dptr(src), bytes), str_cat("cuMemcpyDtoH of ", bytes, " bytes"));
}

void Device::fill_bytes(void* dst, unsigned char value, std::size_t bytes) {
  require();
  if (bytes == 0) return;
  make_current();
  check(api_->memset_d8(dptr(dst), value, bytes), str_cat("cuMemsetD8 of ", bytes, " bytes"));
}

void Device::fill_bytes(void* dst, unsigned char value, std::size_t bytes, Stream stream) {
  require();
  if (bytes == 0) return;
  make_current();
  check(api_->memset_d8_async(dptr(dst), value, bytes, static_cast<CUstream>(stream)),
        str_cat("cuMemsetD8Async of ", bytes, " bytes"));
}

void Device::synchronize(Stream stream) {
  require();
  make_current();
  if (stream == nullptr) {
    check(api_->ctx_synchronize(), "cuCtxSynchronize");
  } else {
    check(api_->stream_synchronize(static_cast<CUstream>(stream)), "cuStreamSynchronize");
  }
}

Stream Device::create_stream(int priority) {
  require();
  make_current();
  CUstream s = nullptr;
  if (priority == 0) {
    check(api_->stream_create(&s, CU_STREAM_DEFAULT), "cuStreamCreate");
  } else {
    check(api_->stream_create_with_priority(&s, CU_STREAM_DEFAULT, priority),
          str_cat("cuStreamCreateWithPriority (priority ", priority, ")"));
  }
  return s;
}

StreamPriorities Device::stream_priorities() {
  require();
  make_current();
  StreamPriorities r;
  check(api_->ctx_stream_priority_range(&r.least, &r.greatest), "cuCtxGetStreamPriorityRange");
  return r;
}

void Device::destroy_stream(Stream s) {
  require();
  if (s == nullptr) return;
  make_current();
  check(api_->stream_destroy(static_cast<CUstream>(s)), "cuStreamDestroy");
}

void* Device::create_event() {
  require();
  make_current();
  CUevent e = nullptr;
  check(api_->event_create(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  return e;
}

void Device::destroy_event(void* event) noexcept {
  if (event != nullptr && api_ && api_->event_destroy) api_->event_destroy(static_cast<CUevent>(event));
}

void Device::record(void* event, Stream stream) {
  require();
  make_current();
  check(api_->event_record(static_cast<CUevent>(event), static_cast<CUstream>(stream)), "cuEventRecord");
}

void Device::wait(Stream stream, void* event) {
  require();
  make_current();
  check(api_->stream_wait_event(static_cast<CUstream>(stream), static_cast<CUevent>(event), 0), "cuStreamWaitEvent");
}

void* Device::record_event(Stream stream) {
  require();
  make_current();
  CUevent e = nullptr;
  check(api_->event_create(&e, CU_EVENT_DEFAULT), "cuEventCreate");
  int r = api_->event_record(e, static_cast<CUstream>(stream));
  if (r != CUDA_SUCCESS) {
    api_->event_destroy(e);
    check(r, "cuEventRecord");
  }
  return e;
}

float Device::elapsed_ms(void* start, void* stop) {
  require();
  make_current();
  auto a = static_cast<CUevent>(start);
  auto b = static_cast<CUevent>(stop);
  float ms = 0;
  int r = api_->event_synchronize(b);
  if (r == CUDA_SUCCESS) r = api_->event_elapsed_time(&ms, a, b);
  api_->event_destroy(a);
  api_->event_destroy(b);
  check(r, "cuEventElapsedTime");
  return ms;
}

}  // namespace warmkey
