// The expert GEMMs of one rank on its GPU (device_experts.h).
#include "replay/ep/device_experts.h"

#include <algorithm>

#include "replay/ep/simulator.h"
#include "replay/layer/layer_device.h"
#include "warmup/error.h"
#include "warmup/host_dtype.h"

namespace warmkey::replay::ep {

using reference::IndexVector;
using reference::RowMatrixXf;

const std::vector<std::string>& expert_step_names() {
  static const std::vector<std::string> names = {"align", "align_w2", "w13", "swiglu", "w2", "mul_sum"};
  return names;
}

const std::vector<std::string>& expert_kernels() {
  static const std::vector<std::string> kernels = {"moe_align", "fused_moe", "swiglu_limit", "moe_mul_sum"};
  return kernels;
}

layer::LayerPlan expert_plan(const ModelConfig& config, std::int64_t rows, layer::LayerTensors& tensors) {
  const layer::LayerBatch batch{rows, /*decode=*/false, /*hash_layer=*/false, /*image_tokens=*/0,
                                config.index_dtypes.front()};
  layer::LayerPlan plan = layer::plan_layer(config, layer::LayerBackend::bf16, batch, tensors);
  const std::vector<std::string>& keep = expert_step_names();
  std::erase_if(plan.steps,
                [&](const layer::LayerStep& s) { return std::find(keep.begin(), keep.end(), s.name) == keep.end(); });
  return plan;
}

std::vector<std::string> unwarmed_expert_steps(const ModelConfig& config, std::int64_t rows) {
  layer::MetaLayerTensors meta;
  return layer::unwarmed_steps(expert_plan(config, rows, meta));
}

std::vector<std::int64_t> expert_chunks(const ModelConfig& config, std::int64_t rows) {
  std::vector<std::int64_t> out;
  const std::int64_t most = std::max<std::int64_t>(1, config.max_num_batched_tokens);
  for (std::int64_t done = 0; done < rows; done += out.back()) out.push_back(std::min(most, rows - done));
  return out;
}

struct DeviceExperts::State {
  State(const ModelConfig& c, const Placement& pl, std::int64_t r, JitRuntime& runtime, Stream s)
      : config(c), p(pl), rank(r), rt(runtime), stream(s), dev(Device::instance()), tensors(dev) {}
  ModelConfig config;
  Placement p;
  std::int64_t rank;
  JitRuntime& rt;
  Stream stream;
  Device& dev;
  layer::DeviceLayerTensors tensors;
  std::vector<std::int32_t> expert_map;  // [physical]: local index on this rank, else -1
};

DeviceExperts::DeviceExperts(const ModelConfig& config, const Placement& p, std::int64_t rank,
                             std::uint64_t weight_seed, JitRuntime& rt, Stream stream) {
  Device& dev = Device::instance();
  if (!dev.available())
    throw DeviceError(
        str_cat("ep rank ", rank, ": the device expert path needs a GPU (", dev.unavailable_reason(), ")"));
  s_ = std::make_unique<State>(config, p, rank, rt, stream);
  s_->expert_map.assign(static_cast<std::size_t>(p.physical), -1);
  for (std::int64_t i = 0; i < p.local; ++i)
    s_->expert_map[static_cast<std::size_t>(p.first_expert(rank) + i)] = static_cast<std::int32_t>(i);
  // The weight buffers and the expert map do not depend on the batch: a one-row plan allocates them.
  const layer::LayerPlan plan = expert_plan(config, 1, s_->tensors);
  if (config.ep_size > 1)
    layer::upload_ints(dev, DType::i32, s_->tensors.ensure(plan.buffer("expert_map")), s_->expert_map);
  const layer::LayerBuffer& w13 = plan.buffer("w13");
  const layer::LayerBuffer& w2 = plan.buffer("w2");
  check_input(w13.sizes[0] == p.local, "ep", "local experts", p.local, ", the layer plan holds ", w13.sizes[0]);
  auto* d13 = static_cast<char*>(s_->tensors.ensure(w13));
  auto* d2 = static_cast<char*>(s_->tensors.ensure(w2));
  const std::int64_t h = config.hidden_size, in = config.moe_intermediate_size;
  const std::size_t bytes13 = static_cast<std::size_t>(2 * in * h) * dtype_size(w13.dtype);
  const std::size_t bytes2 = static_cast<std::size_t>(h * in) * dtype_size(w2.dtype);
  // A few experts at a time: all local experts of dsv4-flash are 13 GB of floats on the host.
  constexpr std::int64_t kBatch = 8;
  for (std::int64_t first = 0; first < p.local; first += kBatch) {
    std::vector<std::int64_t> logical;
    for (std::int64_t i = first; i < std::min(p.local, first + kBatch); ++i)
      logical.push_back(p.p2l[static_cast<std::size_t>(p.first_expert(rank) + i)]);
    const ExpertWeights w = make_expert_weights(config, weight_seed, logical);
    for (std::int64_t i = first; i < std::min(p.local, first + kBatch); ++i) {
      const std::int64_t pos = w.position(logical[static_cast<std::size_t>(i - first)]);
      layer::upload_values(dev, w13.dtype, d13 + static_cast<std::size_t>(i) * bytes13, w.w13.data() + pos * 2 * in * h,
                           2 * in * h);
      layer::upload_values(dev, w2.dtype, d2 + static_cast<std::size_t>(i) * bytes2, w.w2.data() + pos * h * in,
                           h * in);
    }
  }
}

DeviceExperts::~DeviceExperts() = default;

RowMatrixXf DeviceExperts::run(const RecvBuffers& recv, const IndexVector& global_ids, double* ms,
                               std::vector<std::string>* unwarmed) {
  State& s = *s_;
  const ModelConfig& c = s.config;
  const std::int64_t k = c.num_experts_per_tok, h = c.hidden_size, n = recv.num_recv;
  RowMatrixXf partial = RowMatrixXf::Zero(recv.n_alloc, h);
  if (n == 0) return partial;
  const RowMatrixXf x = dequantize_rows(recv.recv_x, recv.recv_scale, n, h);  // the first n rows
  std::int64_t r0 = 0;
  for (std::int64_t rows : expert_chunks(c, n)) {
    const layer::LayerPlan plan = expert_plan(c, rows, s.tensors);
    if (unwarmed)
      for (std::string& line : layer::unwarmed_steps(plan)) unwarmed->push_back(std::move(line));
    layer::upload_values(s.dev, plan.buffer("hidden").dtype, s.tensors.data("hidden"), x.data() + r0 * h, rows * h);
    // The received slots' global ids (-1: an expert elsewhere), then -1 for the rows the plan
    // keeps for the shared expert (not run here: swiglu skips them).
    std::vector<std::int64_t> ids(static_cast<std::size_t>(plan.buffer("topk_ids").numel()), -1);
    for (std::int64_t i = 0; i < rows * k; ++i) ids[static_cast<std::size_t>(i)] = global_ids(r0 * k + i);
    layer::upload_ints(s.dev, plan.buffer("topk_ids").dtype, s.tensors.data("topk_ids"), ids);
    layer::upload_values(s.dev, DType::f32, s.tensors.data("topk_weights"), recv.recv_weights.data() + r0 * k,
                         rows * k);
    const std::vector<float> ones(static_cast<std::size_t>(rows * k), 1.0f);
    layer::upload_values(s.dev, DType::f32, s.tensors.data("sum_weights"), ones.data(), rows * k);
    const layer::LayerBuffer& out = plan.buffer("out");
    s.dev.fill_bytes(s.tensors.data("out"), 0xFF, static_cast<std::size_t>(rows * h) * dtype_size(out.dtype),
                     s.stream);  // poison: a row mul_sum leaves unwritten reads NaN
    const double t = s.dev.time_ms(s.stream, [&] {
      for (const layer::LayerStep& step : plan.steps) {
        layer::run_step(step, plan, s.tensors, s.rt, s.dev, s.stream);
        ++launches_;
      }
    });
    if (ms) *ms += t;
    partial.middleRows(r0, rows) = layer::download(s.dev, out.dtype, s.tensors.data("out"), rows, h);
    r0 += rows;
  }
  return partial;
}

}  // namespace warmkey::replay::ep
