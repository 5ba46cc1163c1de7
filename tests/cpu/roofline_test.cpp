// The roofline guard (warmup/roofline.h): a figure above the device's datasheet peak is an error
// naming the figure, the model, the time and the peak; a device the table lacks skips the guard
// with a note; and `warmkey layer`'s report never shows a figure the guard refused.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "replay/layer/layer_runner.h"
#include "warmup/error.h"
#include "warmup/roofline.h"

namespace warmkey {
namespace roofline_test {

constexpr const char* kH200 = "NVIDIA H200";

std::string message_of(const RooflineFigure& f) {
  try {
    check_roofline(kH200, f);
  } catch (const RooflineError& e) {
    return e.what();
  }
  return "";
}

TEST(Roofline, theH200RowHoldsTheDatasheetPeaks) {
  const DevicePeaks* p = device_peaks(kH200);
  ASSERT_NE(p, nullptr);
  EXPECT_DOUBLE_EQ(p->hbm_bytes_per_s, 4.8e12);
  EXPECT_DOUBLE_EQ(tensor_peak(*p, DType::bf16), 989.5e12);
  EXPECT_DOUBLE_EQ(tensor_peak(*p, DType::f16), 989.5e12);
  EXPECT_DOUBLE_EQ(tensor_peak(*p, DType::f8e4m3), 1979e12);
  EXPECT_DOUBLE_EQ(tensor_peak(*p, DType::f32), 494.5e12);
  EXPECT_THROW(tensor_peak(*p, DType::i32), Error);
  EXPECT_EQ(device_peaks("NVIDIA H200 NVL"), nullptr);  // the name is matched exactly
}

TEST(Roofline, theH100SxmRowHoldsItsDatasheetPeaksAndOtherH100sHaveNone) {
  const DevicePeaks* p = device_peaks("NVIDIA H100 80GB HBM3");
  ASSERT_NE(p, nullptr);
  EXPECT_DOUBLE_EQ(p->hbm_bytes_per_s, 3.35e12);
  EXPECT_DOUBLE_EQ(tensor_peak(*p, DType::bf16), 989.5e12);
  EXPECT_DOUBLE_EQ(tensor_peak(*p, DType::f8e4m3), 1979e12);
  // 1e9 bytes in 0.25 ms: 4 TB/s, above the H100's 3.35 TB/s though below the H200's 4.8.
  EXPECT_THROW(check_roofline("NVIDIA H100 80GB HBM3", {"copy", RooflineModel::bytes, 1e9, 2.5e-4}), RooflineError);
  EXPECT_TRUE(check_roofline(kH200, {"copy", RooflineModel::bytes, 1e9, 2.5e-4}).checked);
  EXPECT_EQ(device_peaks("NVIDIA H100 PCIe"), nullptr);
  EXPECT_EQ(device_peaks("NVIDIA H100 NVL"), nullptr);
}

TEST(Roofline, aBandwidthRatioAboveOneFailsNamingFigureModelTimeAndPeak) {
  // 1e9 bytes in 0.1 ms: 10 TB/s, 208 % of 4.8 TB/s.
  const std::string m = message_of({"layer T=64 bandwidth", RooflineModel::bytes, 1e9, 1e-4});
  ASSERT_FALSE(m.empty()) << "a ratio of 2.08 passed";
  for (const char* part :
       {"layer T=64 bandwidth", "208.3 %", "1e+09 bytes", "0.1 ms", "10 TB/s", "4.8 TB/s", "NVIDIA H200", "HBM3e"})
    EXPECT_NE(m.find(part), std::string::npos) << part << " missing from: " << m;
}

TEST(Roofline, aFlopRatioAboveOneFailsAgainstTheOperandsTensorPeak) {
  // 1e12 FLOPs in 0.5 ms: 2000 TFLOP/s, above both the bf16 and the fp8 peak.
  const std::string m = message_of({"prefill FLOP/s", RooflineModel::flops, 1e12, 5e-4, DType::bf16});
  for (const char* part : {"prefill FLOP/s", "1e+12 FLOPs", "0.5 ms", "2000 TFLOP/s", "989.5 TFLOP/s", "bf16"})
    EXPECT_NE(m.find(part), std::string::npos) << part << " missing from: " << m;
  EXPECT_THROW(check_roofline(kH200, {"fp8", RooflineModel::flops, 1e12, 5e-4, DType::f8e4m3}), RooflineError);
  // 1e12 in 0.6 ms: 1667 TFLOP/s passes on fp8 (84 %), fails on bf16.
  const RooflineCheck fp8 = check_roofline(kH200, {"fp8", RooflineModel::flops, 1e12, 6e-4, DType::f8e4m3});
  EXPECT_TRUE(fp8.checked);
  EXPECT_NEAR(fp8.ratio, 1e12 / 6e-4 / 1979e12, 1e-12);
  EXPECT_THROW(check_roofline(kH200, {"bf16", RooflineModel::flops, 1e12, 6e-4, DType::bf16}), RooflineError);
}

TEST(Roofline, aRatioOfOneOrBelowPasses) {
  const RooflineCheck at = check_roofline(kH200, {"copy", RooflineModel::bytes, 4.8e9, 1e-3});
  EXPECT_TRUE(at.checked);
  EXPECT_DOUBLE_EQ(at.ratio, 1.0);
  EXPECT_DOUBLE_EQ(at.peak, 4.8e12);
  EXPECT_NEAR(check_roofline(kH200, {"copy", RooflineModel::bytes, 3.84e9, 1e-3}).ratio, 0.8, 1e-12);
  EXPECT_THROW(check_roofline(kH200, {"copy", RooflineModel::bytes, 4.8e9 * (1 + 1e-9), 1e-3}), RooflineError);
}

TEST(Roofline, anUnknownDeviceSkipsTheGuardWithANote) {
  const RooflineCheck c = check_roofline("Some Future GPU", {"x", RooflineModel::bytes, 1e15, 1e-6});
  EXPECT_FALSE(c.checked);
  EXPECT_DOUBLE_EQ(c.ratio, 0);
  EXPECT_DOUBLE_EQ(c.peak, 0);
  EXPECT_NE(c.note.find("'Some Future GPU'"), std::string::npos) << c.note;
  EXPECT_NE(c.note.find("skipped"), std::string::npos) << c.note;
}

TEST(Roofline, aTimeThatIsNotPositiveIsRefused) {
  EXPECT_THROW(check_roofline(kH200, {"x", RooflineModel::bytes, 1, 0}), InputError);
  EXPECT_THROW(check_roofline("Some Future GPU", {"x", RooflineModel::bytes, 1, -1}), InputError);
}

TEST(Roofline, theLayerReportShowsNoFigureTheGuardRefusedAndFails) {
  replay::layer::LayerRunReport r;
  r.config = "dsv4-flash";
  r.backend = "bf16";
  r.device = kH200;
  replay::layer::LayerRunRow row;
  row.tokens = 64;
  row.ms = 0.0123;
  row.checked = 16;
  try {
    check_roofline(kH200, {"warmkey layer dsv4-flash bf16 T=64 bandwidth", RooflineModel::bytes, 8.6e8, 1.23e-5});
  } catch (const RooflineError& e) {
    row.roofline_error = e.what();
  }
  ASSERT_FALSE(row.roofline_error.empty());
  r.rows.push_back(row);
  EXPECT_FALSE(r.ok());
  const std::string text = r.to_text();
  EXPECT_NE(text.find(row.roofline_error), std::string::npos) << text;
  EXPECT_EQ(text.find("GB/s"), std::string::npos) << text;  // no achieved figure (the message says TB/s)
  EXPECT_NE(text.find("result: FAIL"), std::string::npos) << text;
  const nlohmann::json j = r.to_json();
  EXPECT_FALSE(j["rows"][0].contains("achieved"));
  EXPECT_FALSE(j["rows"][0].contains("ratio"));
  EXPECT_EQ(j["rows"][0]["roofline_error"], row.roofline_error);
}

}  // namespace roofline_test
}  // namespace warmkey
