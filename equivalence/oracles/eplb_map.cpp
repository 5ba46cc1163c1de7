// Oracle of eplb_map: pairs the kernel with reference/eplb_map.
#include "equivalence/oracles/eplb_map.h"

#include <algorithm>
#include <numeric>

#include "equivalence/oracles/routing_inputs.h"
#include "kernels/eplb_map/eplb_map.h"
#include "reference/eplb_map.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey::equivalence {
namespace {

constexpr std::uint8_t kOutPoison = 0x5a;  // not -1: unmapped entries must be written, not left

std::int64_t scalar(const NumericCase& c, const char* name) {
  auto it = c.scalars.find(name);
  if (it == c.scalars.end()) throw Error(str_cat(c.title(), ": no scalar '", name, "'"));
  return it->second;
}

}  // namespace

std::string EplbMapCase::label() const {
  return str_cat("T=", num_tokens, " K=", top_k, " ", dtype_name(ids_dtype), " L=", num_logical,
                 " P=", num_logical + num_redundant, " slots=", slots, record ? " record" : " no-record",
                 num_unpadded ? " unpadded" : "", in_place ? " in-place" : "", aligned ? " aligned" : " misaligned",
                 out_of_range_counts ? " bad-counts" : "");
}

NumericCase EplbMapOracle::make_case(const EplbMapArgs& a, const ModelConfig& config, std::uint64_t seed,
                                     bool reference) {
  EplbMapCase p;
  p.num_tokens = a.ids.size(0);
  p.top_k = a.ids.size(1);
  p.ids_dtype = a.ids.dtype();
  p.num_logical = a.replica_count.size(0);
  p.num_redundant = a.load.size(0) - p.num_logical;
  p.slots = a.l2p.size(1);
  p.record = true;
  p.num_unpadded = a.num_unpadded.has_value();
  // Meta tensors carry no address: an output with the ids' dtype, shape and offset stands for
  // the in-place call serving makes.
  p.in_place = a.out.meta().to_string() == a.ids.meta().to_string();
  p.aligned = a.ids.aligned16();
  p.seed = seed;
  return make_case(p, reference);
}

NumericCase EplbMapOracle::make_case(const EplbMapCase& p, bool reference) {
  spaces::CaseRng rng(p.seed);
  auto offset = [&](DType d) { return p.aligned ? 0 : dtype_size(d); };
  const std::int64_t logical = p.num_logical, physical = p.num_logical + p.num_redundant;
  const std::int64_t max_replicas = std::min<std::int64_t>(p.slots, 4);
  NumericCase c;
  c.kernel = "eplb_map";
  c.label = p.label();
  c.seed = p.seed;

  // Physical experts 0..L-1 are the first replicas; each redundant one copies a random expert
  // that still has a free replica slot. Physical ids are then shuffled.
  std::vector<std::int64_t> perm(static_cast<std::size_t>(physical));
  std::iota(perm.begin(), perm.end(), 0);
  for (std::size_t i = perm.size(); i > 1; --i)
    std::swap(perm[i - 1], perm[static_cast<std::size_t>(rng.uniform_int(0, i - 1))]);
  HostTensor counts = HostTensor::zeros("replica_count", DType::i64, {logical});
  HostTensor l2p = HostTensor::zeros("l2p", DType::i64, {logical, p.slots});
  for (std::int64_t i = 0; i < l2p.numel(); ++i) l2p.set_int(i, -1);
  for (std::int64_t e = 0; e < logical; ++e) {
    counts.set_int(e, 1);
    l2p.set_int(e * p.slots, perm[e]);
  }
  for (std::int64_t r = 0; r < p.num_redundant; ++r) {
    std::int64_t e = rng.uniform_int(0, logical - 1);
    for (int tries = 0; counts.get_int(e) >= max_replicas && tries < 64; ++tries) e = rng.uniform_int(0, logical - 1);
    if (counts.get_int(e) >= max_replicas) continue;
    l2p.set_int(e * p.slots + counts.get_int(e), perm[logical + r]);
    counts.set_int(e, counts.get_int(e) + 1);
  }
  if (p.out_of_range_counts) {
    for (std::int64_t e = 0; e < logical; ++e) {
      if (e % 11 == 0)
        counts.set_int(e, p.slots + 3);
      else if (e % 7 == 0)
        counts.set_int(e, -2);
      else if (e % 3 == 0)
        counts.set_int(e, 0);
    }
  }
  HostTensor ids = HostTensor::zeros("ids", p.ids_dtype, {p.num_tokens, p.top_k}, offset(p.ids_dtype));
  equivalence::fill_expert_ids(rng, ids, logical);
  HostTensor record = HostTensor::zeros("record", DType::i32, {1});
  record.set_int(0, p.record ? 1 : 0);
  HostTensor load = HostTensor::zeros("load", DType::i32, {physical}, offset(DType::i32));
  for (std::int64_t i = 0; i < physical; ++i) load.set_int(i, rng.uniform_int(1, 100));

  c.scalars["max_replicas"] = max_replicas;
  c.scalars["num_unpadded"] = p.num_unpadded ? rng.uniform_int(0, p.num_tokens) : -1;
  c.scalars["in_place"] = p.in_place;
  c.expected.push_back(HostTensor::zeros("out", p.ids_dtype, {p.num_tokens, p.top_k}, offset(p.ids_dtype)));
  c.expected.push_back(load);  // overwritten by compute_reference from the input below
  c.inputs.push_back(std::move(ids));
  c.inputs.push_back(std::move(counts));
  c.inputs.push_back(std::move(l2p));
  c.inputs.push_back(std::move(record));
  c.inputs.push_back(std::move(load));
  if (reference) EplbMapOracle{}.compute_reference(c);
  return c;
}

void EplbMapOracle::compute_reference(NumericCase& c) const {
  const HostTensor& ids_t = c.input("ids");
  const HostTensor& counts_t = c.input("replica_count");
  const HostTensor& l2p_t = c.input("l2p");
  const HostTensor& load_in = c.input("load");
  reference::IndexVector ids(ids_t.numel()), counts(counts_t.numel());
  for (std::int64_t i = 0; i < ids_t.numel(); ++i) ids(i) = ids_t.get_int(i);
  for (std::int64_t i = 0; i < counts_t.numel(); ++i) counts(i) = counts_t.get_int(i);
  reference::RowMatrixXi64 l2p(l2p_t.shape.at(0), l2p_t.shape.at(1));
  for (std::int64_t i = 0; i < l2p_t.numel(); ++i) l2p.data()[i] = l2p_t.get_int(i);
  Eigen::VectorXi load(load_in.numel());
  for (std::int64_t i = 0; i < load_in.numel(); ++i) load(i) = static_cast<int>(load_in.get_int(i));
  reference::IndexVector out(ids_t.numel());
  const std::int64_t unpadded = scalar(c, "num_unpadded");
  reference::eplb_map(ids, counts, l2p, c.input("record").get_int(0) != 0, load, out, ids_t.shape.at(1),
                      unpadded >= 0 ? std::optional<std::int64_t>(unpadded) : std::nullopt);
  HostTensor& out_t = c.expected_output("out");
  HostTensor& load_t = c.expected_output("load");
  for (std::int64_t i = 0; i < out.size(); ++i) out_t.set_int(i, out(i));
  for (std::int64_t i = 0; i < load.size(); ++i) load_t.set_int(i, load(i));
  c.tolerances.erase("out");  // exact
  c.tolerances.erase("load");
}

EplbMapArgs EplbMapOracle::device_args(const NumericCase& c, DeviceTensors& dev) {
  EplbMapArgs a;
  a.ids = dev.upload(c.input("ids"));
  a.replica_count = dev.upload(c.input("replica_count"));
  a.l2p = dev.upload(c.input("l2p"));
  a.record = dev.upload(c.input("record"));
  a.load = dev.upload(c.input("load"));
  const bool in_place = scalar(c, "in_place") != 0;
  if (in_place) {
    a.out = a.ids;
  } else {
    HostTensor poison = c.expected_output("out");
    std::fill(poison.bytes.begin(), poison.bytes.end(), kOutPoison);
    a.out = dev.upload(poison);
  }
  a.max_replicas = scalar(c, "max_replicas");
  if (const std::int64_t n = scalar(c, "num_unpadded"); n >= 0) a.num_unpadded = n;
  return a;
}

std::vector<HostTensor> EplbMapOracle::run_on_device(const NumericCase& c, JitRuntime& rt) const {
  DeviceTensors dev(rt.device());
  EplbMapArgs a = device_args(c, dev);
  const bool in_place = scalar(c, "in_place") != 0;
  EplbMap{}(a, rt);
  rt.device().synchronize();
  HostTensor out = dev.download(in_place ? "ids" : "out");
  out.name = "out";
  return {out, dev.download("load")};
}

}  // namespace warmkey::equivalence
