// Oracle of ep_scatter: pairs the kernel with reference/ep_scatter.
#include "equivalence/oracles/ep_scatter.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "reference/ep_scatter.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey::equivalence {
namespace {

constexpr const char* kOutputs[] = {"expert_start", "expert_counter", "output",
                                    "output_scale", "m_indices",      "output_index"};

HostTensor& named(std::vector<HostTensor>& v, std::string_view name) {
  for (HostTensor& t : v) {
    if (t.name == name) return t;
  }
  throw Error(str_cat("ep_scatter oracle: no output named '", name, "'"));
}

}  // namespace

NumericCase EpScatterOracle::make_case(const Args& a, const ModelConfig&, std::uint64_t seed, bool reference) {
  spaces::CaseRng rng(seed);
  const std::int64_t n = a.recv_x.size(0), h = a.recv_x.size(1), k = a.recv_topk.size(1);
  const std::int64_t e = a.num_recv_tokens_per_expert.size(0), m = a.output.size(0);
  const bool packed = a.recv_x_scale.dtype() == DType::i32;
  const std::int64_t sc = ep_scatter_scale_cols(h, packed);
  NumericCase c;
  c.kernel = "ep_scatter";
  c.seed = seed;
  c.label = str_cat("N=", n, " K=", k, " H=", h, " E_local=", e, " M=", m, packed ? " packed" : " f32", " scales",
                    a.recv_x.aligned16() ? " aligned" : " misaligned", " first_expert=", a.first_expert);
  HostTensor x = HostTensor::zeros("recv_x", DType::f8e4m3, {n, h}, a.recv_x.meta().align_offset);
  equivalence::fill_uniform(rng, x, -8, 8);
  HostTensor scale = HostTensor::zeros("recv_x_scale", a.recv_x_scale.dtype(), {n, sc});
  for (std::int64_t i = 0; i < n * sc; ++i) {
    if (packed) {
      std::uint32_t w = 0;
      for (int b = 0; b < 4; ++b) w |= static_cast<std::uint32_t>(rng.uniform_int(100, 140)) << (8 * b);
      scale.set_int(i, static_cast<std::int32_t>(w));
    } else {
      scale.set_float(i, static_cast<float>(rng.uniform(0x1.0p-10, 1)));
    }
  }
  HostTensor topk = HostTensor::zeros("recv_topk", DType::i64, {n, k});
  HostTensor counts = HostTensor::zeros("num_recv_tokens_per_expert", DType::i32, {e});
  std::vector<std::int64_t> cnt(static_cast<std::size_t>(e), 0);
  for (std::int64_t s = 0; s < n * k; ++s) {
    const double u = rng.uniform(0, 1);
    std::int64_t id = a.first_expert + rng.uniform_int(0, e - 1);
    if (s != 0 && u < 0.10)
      id = -1;
    else if (s != 0 && u < 0.25)
      id = a.first_expert >= e ? rng.uniform_int(0, a.first_expert - 1) : a.first_expert + e + rng.uniform_int(0, e);
    topk.set_int(s, id);
    if (id >= a.first_expert && id < a.first_expert + e) ++cnt[static_cast<std::size_t>(id - a.first_expert)];
  }
  for (std::int64_t i = 0; i < e; ++i) counts.set_int(i, cnt[static_cast<std::size_t>(i)]);
  c.inputs.push_back(std::move(x));
  c.inputs.push_back(std::move(scale));
  c.inputs.push_back(std::move(topk));
  c.inputs.push_back(std::move(counts));
  c.inputs.push_back(HostTensor::zeros("expert_counter", DType::i32, {e}));  // the zeroed workspace
  c.scalars["first_expert"] = a.first_expert;
  c.expected.push_back(HostTensor::zeros("expert_start", DType::i32, {e}));
  c.expected.push_back(HostTensor::zeros("expert_counter", DType::i32, {e}));
  c.expected.push_back(HostTensor::zeros("output", DType::f8e4m3, {m, h}));
  c.expected.push_back(packed ? HostTensor::zeros("output_scale", DType::i32, {sc, m})
                              : HostTensor::zeros("output_scale", DType::f32, {m, sc}));
  c.expected.push_back(HostTensor::zeros("m_indices", DType::i32, {m}));
  c.expected.push_back(HostTensor::zeros("output_index", DType::i32, {n, k}));
  if (reference) EpScatterOracle{}.compute_reference(c);
  return c;
}

void EpScatterOracle::compute_reference(NumericCase& c) const {
  const HostTensor& x = c.input("recv_x");
  const HostTensor& scale = c.input("recv_x_scale");
  const HostTensor& topk_t = c.input("recv_topk");
  const HostTensor& counts_t = c.input("num_recv_tokens_per_expert");
  const std::int64_t h = x.shape.at(1), sc = scale.shape.at(1), k = topk_t.shape.at(1);
  const bool packed = scale.dtype == DType::i32;
  const std::int64_t m = c.expected_output("m_indices").shape.at(0);
  std::vector<std::uint32_t> words(static_cast<std::size_t>(scale.numel()));
  std::memcpy(words.data(), scale.data(), words.size() * 4);
  reference::IndexVector topk(topk_t.numel());
  for (std::int64_t i = 0; i < topk_t.numel(); ++i) topk(i) = topk_t.get_int(i);
  std::vector<std::int32_t> counts(static_cast<std::size_t>(counts_t.numel()));
  for (std::size_t i = 0; i < counts.size(); ++i)
    counts[i] = static_cast<std::int32_t>(counts_t.get_int(static_cast<std::int64_t>(i)));
  const reference::EpScatterResult r = reference::ep_scatter(x.bytes, h, words, sc, packed, topk, k, counts,
                                                             c.scalars.at("first_expert"), m, kEpScatterAlignM);
  auto put_ints = [&](const char* name, const std::vector<std::int32_t>& v) {
    HostTensor& t = c.expected_output(name);
    for (std::size_t i = 0; i < v.size(); ++i) t.set_int(static_cast<std::int64_t>(i), v[i]);
  };
  put_ints("expert_start", r.expert_start);
  put_ints("expert_counter", r.expert_counter);
  put_ints("m_indices", r.m_indices);
  put_ints("output_index", r.output_index);
  c.expected_output("output").bytes = r.output;
  std::memcpy(c.expected_output("output_scale").data(), r.output_scale.data(), r.output_scale.size() * 4);
  // Every output is exact (copies and integers).
}

std::vector<HostTensor> EpScatterOracle::canonical_order(const NumericCase& c, std::vector<HostTensor> got) {
  const HostTensor& want_index = c.expected_output("output_index");
  const HostTensor& topk = c.input("recv_topk");
  HostTensor& got_index = named(got, "output_index");
  const std::int64_t slots = want_index.numel(), first = c.scalars.at("first_expert");
  // Per expert, the recorded destinations must be the reference's set.
  std::map<std::int64_t, std::vector<std::int64_t>> want_sets, got_sets;
  for (std::int64_t s = 0; s < slots; ++s) {
    const std::int64_t w = want_index.get_int(s), g = got_index.get_int(s);
    if ((w < 0) != (g < 0)) return got;
    if (w < 0) continue;
    const std::int64_t e = topk.get_int(s) - first;
    want_sets[e].push_back(w);
    got_sets[e].push_back(g);
  }
  for (auto& [e, v] : want_sets) {
    std::vector<std::int64_t>& g = got_sets[e];
    std::sort(v.begin(), v.end());
    std::sort(g.begin(), g.end());
    if (v != g) return got;
  }
  const HostTensor& got_out = named(got, "output");
  const HostTensor& got_scale = named(got, "output_scale");
  HostTensor out = HostTensor::zeros("output", got_out.dtype, got_out.shape, got_out.align_offset);
  HostTensor scale = HostTensor::zeros("output_scale", got_scale.dtype, got_scale.shape, got_scale.align_offset);
  const std::int64_t h = got_out.shape.at(1);
  const bool packed = got_scale.dtype == DType::i32;
  const std::int64_t m = got_out.shape.at(0), sc = packed ? got_scale.shape.at(0) : got_scale.shape.at(1);
  for (std::int64_t s = 0; s < slots; ++s) {
    const std::int64_t w = want_index.get_int(s), g = got_index.get_int(s);
    if (w < 0) continue;
    std::copy_n(got_out.bytes.begin() + g * h, h, out.bytes.begin() + w * h);
    for (std::int64_t j = 0; j < sc; ++j) {
      const std::int64_t from = packed ? j * m + g : g * sc + j, to = packed ? j * m + w : w * sc + j;
      std::memcpy(scale.bytes.data() + to * 4, got_scale.bytes.data() + from * 4, 4);
    }
    got_index.set_int(s, w);
  }
  named(got, "output") = std::move(out);
  named(got, "output_scale") = std::move(scale);
  return got;
}

EpScatterArgs EpScatterOracle::device_args(const NumericCase& c, DeviceTensors& dev) {
  Args a;
  a.recv_x = dev.upload(c.input("recv_x"));
  a.recv_x_scale = dev.upload(c.input("recv_x_scale"));
  a.recv_topk = dev.upload(c.input("recv_topk"));
  a.num_recv_tokens_per_expert = dev.upload(c.input("num_recv_tokens_per_expert"));
  a.expert_start = dev.poisoned(c.expected_output("expert_start"));
  a.expert_counter = dev.upload(c.input("expert_counter"));  // zero on entry, downloaded by name
  a.output = dev.poisoned(c.expected_output("output"));
  a.output_scale = dev.poisoned(c.expected_output("output_scale"));
  a.m_indices = dev.poisoned(c.expected_output("m_indices"));
  a.output_index = dev.poisoned(c.expected_output("output_index"));
  a.first_expert = c.scalars.at("first_expert");
  return a;
}

std::vector<HostTensor> EpScatterOracle::run_on_device(const NumericCase& c, JitRuntime& rt) const {
  DeviceTensors dev(rt.device());
  Args a = device_args(c, dev);
  EpScatter{}(a, rt);
  rt.device().synchronize();
  std::vector<HostTensor> got;
  for (const char* name : kOutputs) got.push_back(dev.download(name));
  return canonical_order(c, std::move(got));
}

}  // namespace warmkey::equivalence
