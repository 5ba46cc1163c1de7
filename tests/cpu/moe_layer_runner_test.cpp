// warmkey layer's runner on the CPU: every refusal happens before the device is touched and names
// what is wrong; without a GPU the run stops with a DeviceError that says so (never a crash).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "replay/layer/layer_runner.h"
#include "warmup/device.h"
#include "warmup/error.h"

namespace warmkey::replay::layer {
namespace moe_layer_runner_test {

std::string refusal(const LayerRunOptions& o) {
  try {
    run_layer(o);
  } catch (const Error& e) {
    return e.what();
  }
  return "(ran)";
}

TEST(MoeLayerRunner, badOptionsAreRefusedBeforeTheDevice) {
  LayerRunOptions o;
  o.config = "dsv4-flash-ep8-eplb";
  EXPECT_NE(refusal(o).find("ep_size 8"), std::string::npos);
  o.config = "tiny";
  o.tokens = {1, 257};
  EXPECT_NE(refusal(o).find("num_tokens 257"), std::string::npos);
  o.tokens = {1};
  o.iterations = 0;
  EXPECT_NE(refusal(o).find("--iterations 0"), std::string::npos);
  o.iterations = 1;
  o.backend = LayerBackend::fp8;
  EXPECT_NE(refusal(o).find("no 'fp8'"), std::string::npos);
  o.backend = LayerBackend::nvfp4;
  o.config = "dsv4-flash";
  EXPECT_NE(refusal(o).find("no 'nvfp4' backend"), std::string::npos);
  EXPECT_THROW(
      [] {
        LayerRunOptions bad;
        bad.config = "no-such-config";
        run_layer(bad);
      }(),
      InputError);
}

TEST(MoeLayerRunner, withoutAGpuTheRunSaysSo) {
  if (Device::instance().available())
    GTEST_SKIP() << "a GPU is present: tests/gpu/moe_layer_gpu_test.cpp runs the layer";
  LayerRunOptions o;
  o.config = "tiny";
  o.tokens = {1, 64};
  try {
    run_layer(o);
    FAIL() << "ran without a GPU";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("no GPU"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--plan"), std::string::npos) << e.what();
  }
}

// The nvfp4 backend gets as far as the device too: its plans are accepted, then the same clean stop.
TEST(MoeLayerRunner, nvfp4WithoutAGpuTheRunSaysSo) {
  if (Device::instance().available())
    GTEST_SKIP() << "a GPU is present: tests/gpu/moe_layer_gpu_test.cpp runs the layer";
  for (const char* config : {"dsv4-flash-nvfp4", "dsv4-flash-f16"}) {
    LayerRunOptions o;
    o.config = config;
    o.backend = LayerBackend::nvfp4;
    o.tokens = {1, 8, 2048};
    try {
      run_layer(o);
      FAIL() << "ran without a GPU";
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find("no GPU"), std::string::npos) << e.what();
    }
  }
}

TEST(MoeLayerRunner, anEmptyReportIsOkAndPrintsItsVerdict) {
  LayerRunReport r;
  r.config = "tiny";
  EXPECT_TRUE(r.ok());
  LayerRunRow row;
  row.tokens = 4;
  row.mismatches = 1;
  row.first_mismatch = "token 0 column 3";
  r.rows.push_back(row);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.to_text().find("result: FAIL"), std::string::npos);
  EXPECT_NE(r.to_text().find("token 0 column 3"), std::string::npos);
  EXPECT_EQ(r.to_json()["ok"], false);
  r.rows[0].mismatches = 0;
  r.runtime_compiles = 1;
  EXPECT_FALSE(r.ok());
}

}  // namespace moe_layer_runner_test
}  // namespace warmkey::replay::layer
