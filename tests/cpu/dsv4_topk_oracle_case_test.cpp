// The dsv4_topk oracle's case of a launch has the launch's CompileKey: the GPU numerics of a
// warmup key test that key's binary (ci/mutation-triage.json: a case without padding that said
// num_unpadded = 1 launched the padded binary).
#include <gtest/gtest.h>

#include <optional>

#include "equivalence/oracles/dsv4_topk.h"
#include "kernels/dsv4_topk/dsv4_topk.h"
#include "warmup/model_config.h"

namespace warmkey {
namespace dsv4_topk_oracle_case_test {

// Meta Args over a case's tensors and scalars, as the oracle's device_args builds them.
Dsv4TopkArgs meta_args(const equivalence::NumericCase& c) {
  auto meta = [](const equivalence::HostTensor& t) { return Tensor::meta(t.dtype, t.shape, t.align_offset); };
  auto opt = [&](const char* name) -> std::optional<Tensor> {
    if (const equivalence::HostTensor* t = c.find_input(name)) return meta(*t);
    return std::nullopt;
  };
  const equivalence::HostTensor& logits = c.input("logits");
  const std::int64_t sizes[] = {logits.shape.at(0), c.scalars.at("num_experts")}, strides[] = {logits.shape.at(1), 1};
  Dsv4TopkArgs a;
  a.logits = Tensor::meta_strided(DType::f32, sizes, strides, logits.align_offset);
  a.bias = opt("bias");
  a.bias_vl = opt("bias_vl");
  a.input_ids = opt("input_ids");
  a.tid2eid = opt("tid2eid");
  a.weights = meta(c.expected_output("weights"));
  a.ids = meta(c.expected_output("ids"));
  a.sentinel_lo = c.scalars.at("sentinel_lo");
  a.vocab_size = c.scalars.at("vocab_size");
  if (const std::int64_t n = c.scalars.at("num_unpadded"); n >= 0) a.num_unpadded = n;
  a.renormalize = c.scalars.at("renormalize") != 0;
  a.launch_pdl = c.scalars.at("launch_pdl") != 0;
  return a;
}

// Every warmup key of dsv4-flash (one token per key: the case's size does not change its key).
TEST(Dsv4TopkOracle, theCaseOfEveryWarmupKeyHasThatKey) {
  const Dsv4Topk kernel;
  const ModelConfig config = load_config("dsv4-flash");
  int checked = 0;
  for (const CompileKey& k : kernel.warmup_keys(config)) {
    Dsv4TopkArgs a = kernel.warmup_inputs(k);
    if (a.logits.size(0) > 64) continue;  // keep the CPU cases small; the smaller classes cover every field
    const equivalence::NumericCase c = equivalence::Dsv4TopkOracle::make_case(a, config, 1, /*reference=*/false);
    EXPECT_EQ(kernel.dispatch(meta_args(c)), k) << c.label;
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

}  // namespace dsv4_topk_oracle_case_test
}  // namespace warmkey
