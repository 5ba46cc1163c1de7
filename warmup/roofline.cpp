// The roofline guard's peak table and check (roofline.h).
#include "warmup/roofline.h"

#include <array>
#include <cstdio>

#include "warmup/error.h"

namespace warmkey {
namespace {

// Dense tensor-core figures are the datasheet's "with sparsity" figures halved (its footnote:
// "Shown with sparsity. Specifications are one-half lower without sparsity").
constexpr std::array<DevicePeaks, 2> kPeaks = {{
    // NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column (nvidia.com/en-us/data-center/h200):
    // GPU memory bandwidth 4.8 TB/s (HBM3e); TF32 989, BF16/FP16 1,979, FP8 3,958 TFLOPS with
    // sparsity, so 494.5, 989.5 and 1,979 dense.
    {"NVIDIA H200", "HBM3e", 4.8e12, 494.5e12, 989.5e12, 1979e12, "NVIDIA H200 datasheet (SXM), dense"},
    // NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column (nvidia.com/en-us/data-center/h100):
    // GPU memory bandwidth 3.35 TB/s (HBM3); the same tensor-core figures as the H200's. The name is
    // the SXM5 card's as the driver reports it (the lent H100s, docs/PERFORMANCE.md); the PCIe and
    // NVL cards have other peaks and other names, so they get no row.
    {"NVIDIA H100 80GB HBM3", "HBM3", 3.35e12, 494.5e12, 989.5e12, 1979e12, "NVIDIA H100 datasheet (SXM), dense"},
}};

std::string rate_text(RooflineModel m, double per_s) {
  char buf[64];
  if (m == RooflineModel::bytes) {
    std::snprintf(buf, sizeof buf, "%.4g TB/s", per_s / 1e12);
  } else {
    std::snprintf(buf, sizeof buf, "%.4g TFLOP/s", per_s / 1e12);
  }
  return buf;
}

}  // namespace

std::span<const DevicePeaks> peak_table() { return kPeaks; }

const DevicePeaks* device_peaks(std::string_view device_name) {
  for (const DevicePeaks& p : kPeaks)
    if (p.device == device_name) return &p;
  return nullptr;
}

double tensor_peak(const DevicePeaks& peaks, DType d) {
  switch (d) {
    case DType::f32: return peaks.tf32_flops;
    case DType::f16:
    case DType::bf16: return peaks.bf16_flops;
    case DType::f8e4m3: return peaks.fp8_flops;
    default: break;
  }
  throw Error(str_cat("roofline: no tensor-core peak for GEMM operands of dtype ", dtype_name(d)));
}

RooflineCheck check_roofline(std::string_view device_name, const RooflineFigure& f) {
  const bool bytes = f.model == RooflineModel::bytes;
  const char* unit = bytes ? "bytes" : "FLOPs";
  if (!(f.seconds > 0))
    throw InputError(str_cat("roofline: ", f.figure, ": measured time ", f.seconds, " s is not positive"));
  if (!(f.amount >= 0)) throw InputError(str_cat("roofline: ", f.figure, ": model of ", f.amount, " ", unit));
  RooflineCheck c;
  c.achieved = f.amount / f.seconds;
  const DevicePeaks* peaks = device_peaks(device_name);
  if (!peaks) {
    c.note = str_cat("roofline guard skipped: device '", device_name,
                     "' has no row in the peak table (warmup/roofline.cpp), so no ratio is reported");
    return c;
  }
  c.checked = true;
  c.peak = bytes ? peaks->hbm_bytes_per_s : tensor_peak(*peaks, f.dtype);
  c.ratio = c.achieved / c.peak;
  if (c.ratio > 1.0) {
    char pct[32];
    std::snprintf(pct, sizeof pct, "%.1f %%", 100 * c.ratio);
    const std::string peak_name =
        bytes ? str_cat(peaks->memory, " bandwidth") : str_cat("dense ", dtype_name(f.dtype), " tensor-core peak");
    throw RooflineError(str_cat(
        "roofline guard: ", f.figure, " is ", pct, " of the ", peaks->device, "'s ", peak_name, ": model ", f.amount,
        " ", unit, " per run, measured ", f.seconds * 1e3, " ms per run, achieved ", rate_text(f.model, c.achieved),
        ", peak ", rate_text(f.model, c.peak), " (", peaks->source, "); a ratio above 1.0 is impossible: the ",
        bytes ? "byte" : "FLOP", " model or the timing is wrong, and the figure is not reported"));
  }
  return c;
}

}  // namespace warmkey
