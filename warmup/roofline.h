// The roofline guard: a measured figure (bytes or FLOPs of a model over a measured time) against
// the device's datasheet peak, one table for every program that reports such a ratio (warmkey
// layer, the benchmarks). A ratio above 1.0 is impossible, so it is an error that names the
// figure, the model, the time and the peak, never a result; a device the table lacks is not
// guessed at: the guard is skipped with a note.
//
// Layer: warmup/ (the lowest layer, linked by replay/, bench/ and tests/ alike); it knows no kernel.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "warmup/dtype.h"

namespace warmkey {

// One device's datasheet peaks: HBM bandwidth and dense (no sparsity) tensor-core throughput.
struct DevicePeaks {
  std::string_view device;  // the CUDA device name (cuDeviceGetName), matched exactly
  std::string_view memory;  // "HBM3e"
  double hbm_bytes_per_s = 0;
  double tf32_flops = 0;  // f32 GEMMs run on the tensor cores as tf32
  double bf16_flops = 0;  // bf16 and f16
  double fp8_flops = 0;   // f8e4m3
  std::string_view source;
};

// The table (warmup/roofline.cpp cites each row's datasheet).
std::span<const DevicePeaks> peak_table();
// The row whose device name equals `device_name`; nullptr for a device the table lacks.
const DevicePeaks* device_peaks(std::string_view device_name);
// The tensor-core peak for GEMM operands of dtype d (bf16 / f16, f8e4m3, f32 as tf32); throws
// Error for a dtype the tensor cores do not multiply.
double tensor_peak(const DevicePeaks& peaks, DType d);

enum class RooflineModel { bytes, flops };

// One measured figure: `amount` bytes (or FLOPs) of a model, per run, over `seconds` per run.
struct RooflineFigure {
  std::string figure;  // what it measures: "warmkey layer dsv4-flash bf16 T=64 bandwidth"
  RooflineModel model = RooflineModel::bytes;
  double amount = 0;
  double seconds = 0;
  DType dtype = DType::bf16;  // flops: the GEMM operands' dtype, which picks the tensor-core peak
};

struct RooflineCheck {
  bool checked = false;  // false: no peak for the device (note says so), the ratio is unknown
  double achieved = 0;   // bytes/s or FLOP/s
  double peak = 0;       // 0 when not checked
  double ratio = 0;      // achieved / peak, at most 1.0 (0 when not checked)
  std::string note;      // why the guard was skipped
};

// Checks one figure on the named device. Throws RooflineError when achieved / peak > 1.0 (the
// message names the figure, the model's amount, the measured time, the achieved rate and the
// peak with its device) and InputError for a non-positive time or a negative amount.
RooflineCheck check_roofline(std::string_view device_name, const RooflineFigure& figure);

}  // namespace warmkey
