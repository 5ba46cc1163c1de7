// The CUDA driver, loaded lazily with dlopen: without it everything but launches works.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "warmup/compiler.h"
#include "warmup/signature.h"

namespace warmkey {

using Stream = void*;  // a CUstream; nullptr is the default stream

class Device;

// cuCtxGetStreamPriorityRange: `greatest` is the numerically lowest (e.g. -5 .. 0 on Hopper).
struct StreamPriorities {
  int least = 0, greatest = 0;
};

// RAII device allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Device* dev, std::uint64_t ptr, std::size_t bytes) : dev_(dev), ptr_(ptr), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return reinterpret_cast<void*>(ptr_); }
  std::size_t bytes() const { return bytes_; }

 private:
  Device* dev_ = nullptr;
  std::uint64_t ptr_ = 0;
  std::size_t bytes_ = 0;
};

// The device ordinal $WARMKEY_DEVICE names, or 0 when it is unset or empty; a value that is not an
// ordinal (0-1024) is a DeviceError naming it.
int device_ordinal();

// A CUDA-graph capture in progress somewhere in this process. While one is open, nothing that a
// capture cannot record may happen: no NVRTC compile, no module load, no device allocation (each
// would fail the capture or make its replay wrong on a real engine). The runtime refuses every
// L1 miss while one is open (JitRuntime: CaptureMissError, naming the key and its nearest warmed
// key), and Device refuses allocations and module loads; both count what they refused. Device::capture
// opens one; a test opens one without a GPU to show the same refusals.
class CaptureScope {
 public:
  CaptureScope();
  ~CaptureScope();
  CaptureScope(const CaptureScope&) = delete;
  CaptureScope& operator=(const CaptureScope&) = delete;
  static bool open();  // one atomic load
  // Refusals since start-up: allocations, module loads and runtime-cache misses inside a capture.
  struct Refusals {
    std::int64_t allocations = 0, module_loads = 0, misses = 0;
  };
  static Refusals refusals();
  static void count_refused_allocation();
  static void count_refused_module_load();
  static void count_refused_miss();
};

// An instantiated CUDA graph (CUgraphExec), replayed with launch().
class Graph {
 public:
  Graph() = default;
  ~Graph();
  Graph(Graph&& o) noexcept;
  Graph& operator=(Graph&& o) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  explicit operator bool() const { return exec_ != nullptr; }
  std::size_t nodes() const { return nodes_; }  // kernel and memory nodes the capture recorded
  void launch(Stream stream) const;

 private:
  friend class Device;
  void* exec_ = nullptr;
  void* graph_ = nullptr;
  std::size_t nodes_ = 0;
};

class Device {
 public:
  // The process-wide device (ordinal $WARMKEY_DEVICE or 0). Never throws: a missing driver or
  // GPU leaves it unavailable with a reason.
  static Device& instance();
  // The instance when instance() has returned once already, else nullptr (never initialises CUDA).
  static Device* if_initialised() { return initialised_.load(std::memory_order_acquire); }

  bool available() const { return available_; }
  // Creates the primary context now (first use creates it otherwise: cuDevicePrimaryCtxRetain takes
  // a good part of a second on a large GPU). Throws DeviceError like the first use would.
  void prepare() const;
  // Whether the primary context exists yet (a fork of this process then copies it: tens of ms).
  bool has_context() const { return context_ready_.load(std::memory_order_acquire); }
  const std::string& unavailable_reason() const { return reason_; }
  std::string name() const { return name_; }
  int multiprocessors() const { return sms_; }
  std::string arch() const;  // native_arch(): "sm_90a" on an H100/H200

  // Loads (once per distinct cubin) the module holding the kernel; returns the CUfunction. The
  // module load runs outside the device's lock: loading one module stalls no other launch, and
  // threads asking for one cubin wait for a single load.
  void* function(const CompiledKernel& k);
  // Launches with the LaunchSpec's geometry and arguments packed per the bound key. `function`
  // caches k's CUfunction (the runtime's L1 slot): filled on the first launch (release), read
  // with acquire afterwards, so a launch of a loaded kernel takes no lock.
  void launch(const CompiledKernel& k, std::atomic<void*>& function, const BoundKey& bound, const LaunchSpec& spec,
              Stream stream);

  DeviceBuffer alloc(std::size_t bytes);
  void copy_to_device(void* dst, const void* src, std::size_t bytes);
  void copy_to_host(void* dst, const void* src, std::size_t bytes);
  void fill_bytes(void* dst, unsigned char value, std::size_t bytes);
  // The same, queued on `stream` (cuMemsetD8Async): a memset node when the stream is being captured.
  void fill_bytes(void* dst, unsigned char value, std::size_t bytes, Stream stream);
  void synchronize(Stream stream = nullptr);
  // A stream of `priority` (0: the default; lower numbers are greater priorities, within
  // stream_priorities()). The block scheduler prefers pending blocks of greater priority.
  Stream create_stream(int priority = 0);
  StreamPriorities stream_priorities();
  void destroy_stream(Stream s);
  // Events that order two streams (timing disabled): record queues the event on `stream`, wait
  // makes `stream` wait for the event's last recording (cuStreamWaitEvent). Inside a capture they
  // are the graph's fork and join edges. Prefer ScopedEvent, which destroys its event.
  void* create_event();
  void destroy_event(void* event) noexcept;
  void record(void* event, Stream stream);
  void wait(Stream stream, void* event);
  // Elapsed milliseconds of fn's device work on stream, measured with events.
  template <class Fn>
  float time_ms(Stream stream, Fn&& fn) {
    void* start = record_event(stream);
    fn();
    void* stop = record_event(stream);
    return elapsed_ms(start, stop);
  }
  void free(std::uint64_t ptr);
  // Records fn's work on `stream` (not the default stream: CUDA cannot capture it) into a graph
  // and instantiates it; nothing runs until Graph::launch. A CaptureScope is open meanwhile. When fn
  // throws, the capture is ended and discarded and the stream is usable again; the error goes on.
  template <class Fn>
  Graph capture(Stream stream, Fn&& fn) {
    begin_capture(stream);
    try {
      CaptureScope scope;
      fn();
    } catch (...) {
      abort_capture(stream);
      throw;
    }
    return end_capture(stream);
  }
  // Whether `stream` is being captured (the driver's view).
  bool capturing(Stream stream) const;
  // Modules loaded so far: one per distinct cubin (keys compiled in one program share one).
  std::int64_t modules_loaded() const { return modules_loaded_.load(); }

 private:
  Device();
  friend class Graph;
  void begin_capture(Stream stream);
  Graph end_capture(Stream stream);
  void abort_capture(Stream stream) noexcept;
  void* record_event(Stream stream);
  float elapsed_ms(void* start, void* stop);  // destroys both events
  void check(int result, const char* what) const;
  void check(int result, const std::string& what) const;
  void require() const;       // throws DeviceError with the reason when no device is available
  void make_current() const;  // binds the primary context to the calling thread (creating it first)
  void load(int ordinal);     // fills api_ and the device facts; throws DeviceError
  // Encodes d into the 128-byte CUtensorMap at out; throws DeviceError naming `what` and the shape.
  void encode_map(const TensorMapDesc& d, void* out, const std::string& what);

  static inline std::atomic<Device*> initialised_{nullptr};
  struct Api;
  std::unique_ptr<Api> api_;
  bool available_ = false;
  std::string reason_;
  std::string name_;
  int sms_ = 0, major_ = 0, minor_ = 0;
  // The primary context is created on first use (make_current, prepare), not by the constructor:
  // a warmup creates it on a thread of its own while NVRTC compiles (JitRuntime::warm).
  int cu_device_ = 0;
  mutable std::once_flag context_once_;
  mutable void* context_ = nullptr;
  mutable std::atomic<bool> context_ready_{false};
  struct Module;                                      // one distinct cubin's module, loaded once
  std::mutex mu_;                                     // guards the two maps (never held across a driver call)
  std::unordered_map<std::string, void*> functions_;  // key digest -> CUfunction
  std::unordered_map<std::string, std::shared_ptr<Module>> modules_;  // cubin content digest -> module
  std::atomic<std::int64_t> modules_loaded_{0};
};

// A stream of the device's own (cuStreamCreate), destroyed with the object: what a CUDA-graph
// capture needs (the default stream cannot be captured) and what a second lane of work runs on.
class ScopedStream {
 public:
  explicit ScopedStream(Device& dev, int priority = 0) : dev_(&dev), stream_(dev.create_stream(priority)) {}
  ~ScopedStream() {
    try {
      dev_->destroy_stream(stream_);
    } catch (...) {  // a destructor never throws; the driver's error was reported by the work that failed
    }
  }
  ScopedStream(const ScopedStream&) = delete;
  ScopedStream& operator=(const ScopedStream&) = delete;
  Stream get() const { return stream_; }

 private:
  Device* dev_;
  Stream stream_;
};

// An event for ordering streams (Device::create_event), destroyed with the object.
class ScopedEvent {
 public:
  explicit ScopedEvent(Device& dev) : dev_(&dev), event_(dev.create_event()) {}
  ~ScopedEvent() { dev_->destroy_event(event_); }
  ScopedEvent(const ScopedEvent&) = delete;
  ScopedEvent& operator=(const ScopedEvent&) = delete;
  void record(Stream stream) { dev_->record(event_, stream); }
  // `stream` waits for this event's last recording.
  void wait_on(Stream stream) const { dev_->wait(stream, event_); }

 private:
  Device* dev_;
  void* event_;
};

}  // namespace warmkey
