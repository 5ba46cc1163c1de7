// The device side of a layer plan (layer_device.h).
#include "replay/layer/layer_device.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "replay/layer/layer_cublas.h"

namespace warmkey::replay::layer {

using reference::RowMatrixXf;

Tensor DeviceLayerTensors::view(const LayerBuffer& b, std::vector<std::int64_t> sizes, std::int64_t elem_offset) {
  char* base = static_cast<char*>(ensure(b));
  return Tensor::view(b.dtype, base + elem_offset * static_cast<std::int64_t>(dtype_size(b.dtype)),
                      std::span<const std::int64_t>(sizes));
}

void* DeviceLayerTensors::ensure(const LayerBuffer& b) {
  const std::size_t bytes = static_cast<std::size_t>(b.bytes()) + 16;
  auto it = buffers_.find(b.name);
  if (it == buffers_.end()) {
    it = buffers_.emplace(b.name, dev_.alloc(bytes)).first;
  } else if (it->second.bytes() < bytes) {
    it->second = DeviceBuffer();  // free first: the old and new buffer need not fit together
    it->second = dev_.alloc(bytes);
  }
  return it->second.data();
}

void upload_values(Device& dev, DType d, void* dst, const float* values, std::int64_t n) {
  std::vector<unsigned char> bytes(static_cast<std::size_t>(n) * dtype_size(d));
  auto convert = [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t i = lo; i < hi; ++i) {
      if (d == DType::ue8m0) {
        int e = 0;
        std::frexp(values[i], &e);  // values[i] = 2^(e-1) exactly
        bytes[static_cast<std::size_t>(i)] = static_cast<unsigned char>(std::clamp(e - 1 + 127, 0, 254));
      } else {
        store_float(d, bytes.data(), i, values[i]);
      }
    }
  };
  // An expert's weights are tens of millions of values: up to 8 threads convert them.
  constexpr std::int64_t kPerThread = std::int64_t{1} << 20;
  const std::int64_t workers =
      std::clamp<std::int64_t>(n / kPerThread, 1, std::min<std::int64_t>(8, std::thread::hardware_concurrency()));
  if (workers <= 1) {
    convert(0, n);
  } else {
    const std::int64_t per = (n + workers - 1) / workers;
    std::vector<std::thread> pool;
    for (std::int64_t w = 0; w < workers; ++w) pool.emplace_back(convert, w * per, std::min(n, (w + 1) * per));
    for (std::thread& t : pool) t.join();
  }
  dev.copy_to_device(dst, bytes.data(), bytes.size());
}

RowMatrixXf download(Device& dev, DType d, const void* src, Eigen::Index rows, Eigen::Index cols) {
  std::vector<unsigned char> bytes(static_cast<std::size_t>(rows * cols) * dtype_size(d));
  dev.copy_to_host(bytes.data(), src, bytes.size());
  RowMatrixXf m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = load_float(d, bytes.data(), i);
  return m;
}

void run_step(const LayerStep& s, const LayerPlan& plan, DeviceLayerTensors& tensors, JitRuntime& rt, Device& dev,
              Stream stream, LaunchOptions launch) {
  if (s.args) {
    visit_contract(*s.args, [&](const auto& contract, const auto& a) {
      contract(a, rt, stream, launch);
      return 0;
    });
    return;
  }
  const PlainOp& op = *s.plain;
  const DType act = plan.config.act_dtype;
  auto at = [&](const std::string& name, std::int64_t off) {
    return static_cast<char*>(tensors.data(name)) +
           off * static_cast<std::int64_t>(dtype_size(plan.buffer(name).dtype));
  };
  switch (op.kind) {
    case PlainOp::Kind::gemm:
      Cublas::instance().gemm(act, op.m, op.n, op.k, at(op.a, op.a_offset), at(op.b, 0), at(op.c, op.c_offset),
                              op.accumulate, stream);
      return;
    case PlainOp::Kind::add: Cublas::instance().add(act, op.m * op.n, at(op.a, 0), at(op.c, 0), stream); return;
    case PlainOp::Kind::memset:
      dev.fill_bytes(at(op.c, op.c_offset), 0,
                     static_cast<std::size_t>(op.m * op.n) * dtype_size(plan.buffer(op.c).dtype), stream);
      return;
  }
}

}  // namespace warmkey::replay::layer
