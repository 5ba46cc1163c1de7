// Oracle of lora_moe: pairs the kernel with reference/lora_moe.
#include "equivalence/oracles/lora_moe.h"

#include <bit>

#include "reference/lora_moe.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey::equivalence {
namespace {

reference::RowMatrixXf as_matrix(const HostTensor& t, std::int64_t rows, std::int64_t cols) {
  reference::RowMatrixXf m(rows, cols);
  for (std::int64_t i = 0; i < rows * cols; ++i) m.data()[i] = t.get_float(i);
  return m;
}

float scale_of(const NumericCase& c) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(c.scalars.at("scale_f32_bits")));
}

bool is_finalize(const NumericCase& c) { return c.scalars.at("finalize") != 0; }

}  // namespace

Tolerance LoraMoeOracle::tolerance(LoraMoeMode mode, DType out_dtype) {
  const bool fin = mode == LoraMoeMode::finalize;
  switch (out_dtype) {
    case DType::bf16: return {0x1.0p-7, fin ? 0.0625 : 0x1.0p-100};
    case DType::f16: return {0x1.0p-10, fin ? 0.0625 : 0x1.0p-14};
    default: return {fin ? 0x1.0p-18 : 0.0, fin ? 1.0 : 0.0};
  }
}

NumericCase LoraMoeOracle::make_case(const Args& a, const ModelConfig&, std::uint64_t seed, bool reference) {
  spaces::CaseRng rng(seed);
  const bool fin = a.mode == LoraMoeMode::finalize;
  const std::int64_t n = a.src.size(0), cols = a.src.size(1), rows = a.out.size(0), entries = a.idx.size(0);
  NumericCase c;
  c.kernel = "lora_moe";
  c.seed = seed;
  c.label =
      str_cat(lora_moe_mode_name(a.mode), " rows=", rows, " C=", cols, " src_rows=", n, " ", dtype_name(a.src.dtype()),
              "->", dtype_name(a.out.dtype()), a.src.aligned16() && a.out.aligned16() ? " aligned" : " misaligned");
  HostTensor src = HostTensor::zeros("src", a.src.dtype(), {n, cols}, a.src.meta().align_offset);
  equivalence::fill_uniform(rng, src, -1, 1);
  HostTensor idx = HostTensor::zeros("idx", DType::i64, {entries}, a.idx.meta().align_offset);
  for (std::int64_t i = 0; i < entries; ++i) {
    const double u = rng.uniform(0, 1);
    idx.set_int(i,
                i > 0 && u < 0.10 ? -1 : (i > 0 && u < 0.12 ? n + rng.uniform_int(0, 3) : rng.uniform_int(0, n - 1)));
  }
  c.inputs.push_back(std::move(src));
  c.inputs.push_back(std::move(idx));
  if (fin) {
    HostTensor w = HostTensor::zeros("weights", DType::f32, {rows, a.weights->size(1)}, a.weights->meta().align_offset);
    fill_uniform(rng, w, 0, 1);
    HostTensor delta =
        HostTensor::zeros("delta", a.delta->dtype(), {rows, a.delta->size(1), cols}, a.delta->meta().align_offset);
    fill_uniform(rng, delta, -0.125, 0.125);
    c.inputs.push_back(std::move(w));
    c.inputs.push_back(std::move(delta));
  }
  c.scalars["finalize"] = fin ? 1 : 0;
  // The scale travels as the bits of its fp32 value (scalars are integers).
  c.scalars["scale_f32_bits"] = std::bit_cast<std::uint32_t>(static_cast<float>(fin ? a.scale : 1.0));
  c.expected.push_back(HostTensor::zeros("out", a.out.dtype(), {rows, cols}, a.out.meta().align_offset));
  if (reference) LoraMoeOracle{}.compute_reference(c);
  return c;
}

void LoraMoeOracle::compute_reference(NumericCase& c) const {
  const HostTensor& src = c.input("src");
  const HostTensor& idx_t = c.input("idx");
  HostTensor& out = c.expected_output("out");
  const std::int64_t n = src.shape.at(0), cols = src.shape.at(1), rows = out.shape.at(0);
  reference::IndexVector idx(idx_t.numel());
  for (std::int64_t i = 0; i < idx_t.numel(); ++i) idx(i) = idx_t.get_int(i);
  reference::RowMatrixXf result(rows, cols);
  if (is_finalize(c)) {
    const HostTensor& w = c.input("weights");
    const std::int64_t k = w.shape.at(1);
    reference::lora_moe_finalize(as_matrix(src, n, cols), idx, as_matrix(w, rows, k),
                                 as_matrix(c.input("delta"), rows * k, cols), result, scale_of(c), out.dtype);
  } else {
    reference::lora_moe_unpermute(as_matrix(src, n, cols), idx, result, out.dtype);
  }
  for (std::int64_t i = 0; i < rows * cols; ++i) out.set_float(i, result.data()[i]);
  c.tolerances["out"] = tolerance(is_finalize(c) ? LoraMoeMode::finalize : LoraMoeMode::unpermute, out.dtype);
}

LoraMoeArgs LoraMoeOracle::device_args(const NumericCase& c, DeviceTensors& dev) {
  Args a;
  a.mode = is_finalize(c) ? LoraMoeMode::finalize : LoraMoeMode::unpermute;
  a.src = dev.upload(c.input("src"));
  a.idx = dev.upload(c.input("idx"));
  if (a.mode == LoraMoeMode::finalize) {
    a.weights = dev.upload(c.input("weights"));
    a.delta = dev.upload(c.input("delta"));
  }
  a.out = dev.poisoned(c.expected_output("out"));
  a.scale = scale_of(c);
  return a;
}

std::vector<HostTensor> LoraMoeOracle::run_on_device(const NumericCase& c, JitRuntime& rt) const {
  DeviceTensors dev(rt.device());
  Args a = device_args(c, dev);
  LoraMoe{}(a, rt);
  rt.device().synchronize();
  return {dev.download("out")};
}

}  // namespace warmkey::equivalence
