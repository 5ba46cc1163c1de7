// The device side of a layer plan, shared by `warmkey layer` (layer_runner.cpp) and the
// expert-parallel ranks' device expert path (replay/ep/device_experts.cpp): the plan's buffers as
// device allocations, host <-> device copies in a buffer's dtype, and one step queued on a stream.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "reference/types.h"
#include "replay/layer/layer_plan.h"
#include "warmup/device.h"
#include "warmup/host_dtype.h"
#include "warmup/runtime.h"

namespace warmkey::replay::layer {

// The plan's buffers, allocated on first view (16 bytes of slack each). A buffer asked for with
// more bytes than it holds is allocated again: views taken before that (an earlier plan's) dangle,
// so a plan is used before the next one of a larger batch is built over the same tensors.
class DeviceLayerTensors : public LayerTensors {
 public:
  explicit DeviceLayerTensors(Device& dev) : dev_(dev) {}
  Tensor view(const LayerBuffer& b, std::vector<std::int64_t> sizes, std::int64_t elem_offset) override;
  void* ensure(const LayerBuffer& b);
  void* data(const std::string& name) const { return buffers_.at(name).data(); }

 private:
  Device& dev_;
  std::map<std::string, DeviceBuffer> buffers_;
};

// n floats stored as dtype d (ue8m0: powers of two as their exponent byte) at dst; a large n is
// converted on up to 8 threads.
void upload_values(Device& dev, DType d, void* dst, const float* values, std::int64_t n);

template <class T>
void upload_ints(Device& dev, DType d, void* dst, const std::vector<T>& v) {
  std::vector<unsigned char> bytes(v.size() * dtype_size(d));
  for (std::size_t i = 0; i < v.size(); ++i) store_int(d, bytes.data(), static_cast<std::int64_t>(i), v[i]);
  dev.copy_to_device(dst, bytes.data(), bytes.size());
}

// rows x cols values of dtype d at src, as floats.
reference::RowMatrixXf download(Device& dev, DType d, const void* src, Eigen::Index rows, Eigen::Index cols);

// Queues one step on `stream` (every step is device work: nothing runs on the host). Plain steps
// call cuBLAS (Cublas::instance()).
void run_step(const LayerStep& s, const LayerPlan& plan, DeviceLayerTensors& tensors, JitRuntime& rt, Device& dev,
              Stream stream, LaunchOptions launch = {});

}  // namespace warmkey::replay::layer
