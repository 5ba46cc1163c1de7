// eplb_map contract: signature, validation, dispatch, warmup enumeration and launch.
#include "kernels/eplb_map/eplb_map.h"

#include <limits>

#include "kernels/builtin.h"
#include "kernels/common/checks.h"
#include "kernels/dsv4_topk/dsv4_topk.h"
#include "warmup/domain.h"

namespace warmkey {
namespace {

constexpr std::string_view kName = "eplb_map";
constexpr std::int64_t kMaxInt32 = std::numeric_limits<std::int32_t>::max();

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// The smallest positive count of the key's value class for `field` (a representative is a member
// of its own class; the i64 classes are out of reach: validation keeps the sizes i32).
std::int64_t count_for(const CompileKey& key, std::string_view field) {
  const std::int64_t want = key.get_int(field);
  for (std::int64_t v : class_points(1, kMaxInt32)) {
    if (rep(v) == want) return v;
  }
  fail_input(kName, field, "no positive i32 count has value class ", want, " (", key, ")");
}

// The smallest entry count with the key's block size (the block size is never recomputed from a
// shape warmup picks for convenience: the shape is chosen so that the runtime rule gives it back).
std::int64_t numel_for(const CompileKey& key) {
  const std::int64_t want = key.get_int("block_size");
  const std::vector<std::int64_t> cuts(std::begin(kEplbMapNumelBoundaries), std::end(kEplbMapNumelBoundaries));
  for (std::int64_t n : class_points(1, kMaxInt32, cuts)) {
    if (eplb_map_block_size(n) == want) return n;
  }
  fail_input(kName, "block_size", "no entry count gives block size ", want, " (", key, ")");
}

}  // namespace

std::vector<DType> eplb_map_ids_dtypes(const ModelConfig& config) {
  std::vector<DType> out;
  for (DType d : routing_index_dtypes(config)) {
    if (d == DType::i32 || d == DType::i64) out.push_back(d);
  }
  if (out.empty()) out.push_back(DType::i32);
  return out;
}

std::int64_t eplb_map_block_size(std::int64_t numel) { return numel <= kEplbMapNumelBoundaries[0] ? 128 : 512; }

const KernelDef& EplbMap::kernel_def() {
  using param::in;
  using param::integer;
  using param::out;
  constexpr auto kNoSpec = Specialize::do_not_specialize;
  constexpr auto kNoAlign = Specialize::do_not_specialize_on_alignment;
  static const KernelDef def = with_pdl_wait(
      KernelDef{std::string(kName),
                "eplb_map/eplb_map.cuh",
                "eplb_map_kernel",
                {{"BLOCK_SIZE"}, {"HAS_NUM_UNPADDED"}},
                {in("ids", kNoAlign), in("replica_count", kNoAlign), in("l2p", kNoAlign), in("record", kNoAlign),
                 out("load", kNoAlign), out("out", kNoAlign), integer("numel", kNoSpec), integer("top_k", kNoSpec),
                 integer("num_logical"), integer("slots"), integer("num_physical"), integer("num_unpadded", kNoSpec)},
                &kernel_sources()});
  return def;
}

bool EplbMap::used_by(const ModelConfig& config) const { return config.eplb; }

std::vector<CompileKey> EplbMap::warmup_keys(const ModelConfig& config) const {
  // The routed ids of T in [1, max_num_batched_tokens] tokens: numel in [K, max * K].
  const std::int64_t k = config.num_experts_per_tok;
  const std::vector<std::int64_t> cuts(std::begin(kEplbMapNumelBoundaries), std::end(kEplbMapNumelBoundaries));
  std::vector<KeyValue> blocks;
  for (std::int64_t n : class_points(k, config.max_num_batched_tokens * k, cuts))
    blocks.push_back(eplb_map_block_size(n));
  const std::vector<DType> dtypes = eplb_map_ids_dtypes(config);
  return KeySpace(std::string(kName))
      .choices("has_num_unpadded", {false, true})
      .choices("num_logical", {rep(config.n_routed_experts)})
      .choices("slots", {rep(config.eplb_max_slots)})
      .choices("num_physical", {rep(config.num_physical_experts())})
      .choices("ids_dtype", {dtypes.begin(), dtypes.end()})
      .choices("block_size", blocks)
      .enumerate();
}

void EplbMap::validate(const Args& a) const {
  checks::dtype_in(kName, "ids", a.ids, {DType::i32, DType::i64});
  checks::dense(kName, "ids", a.ids, 2);
  const std::int64_t t = a.ids.size(0), k = a.ids.size(1);
  checks::dim_in(kName, "ids", a.ids, 1, 1, kMaxInt32, "top-k must be positive");
  check_input(a.ids.numel() <= kMaxInt32, kName, "ids", "numel ", a.ids.numel(), " exceeds 2^31 - 1");

  checks::dtype_in(kName, "replica_count", a.replica_count, {DType::i64});
  checks::dense(kName, "replica_count", a.replica_count, 1);
  checks::dim_in(kName, "replica_count", a.replica_count, 0, 1, kMaxInt32, "one count per logical expert");
  const std::int64_t logical = a.replica_count.size(0);
  checks::dtype_in(kName, "l2p", a.l2p, {DType::i64});
  checks::dense(kName, "l2p", a.l2p, 2);
  checks::dim_is(kName, "l2p", a.l2p, 0, logical, "L from replica_count");
  checks::dim_in(kName, "l2p", a.l2p, 1, 1, kMaxInt32, "the map needs at least one slot");
  const std::int64_t slots = a.l2p.size(1);
  check_input(a.max_replicas >= 1 && a.max_replicas <= slots, kName, "max_replicas", "replica count ", a.max_replicas,
              " must be in [1, slots = ", slots, "]: the map holds at most ", slots, " replicas per expert");

  checks::dtype_in(kName, "record", a.record, {DType::i32});
  checks::dense(kName, "record", a.record, 1);
  checks::dim_is(kName, "record", a.record, 0, 1, "one device flag");
  checks::dtype_in(kName, "load", a.load, {DType::i32});
  checks::dense(kName, "load", a.load, 1);
  checks::dim_in(kName, "load", a.load, 0, 1, kMaxInt32, "one counter per physical expert");

  checks::dtype_in(kName, "out", a.out, {a.ids.dtype()});
  checks::dense(kName, "out", a.out, 2);
  checks::dim_is(kName, "out", a.out, 0, t, "T from ids");
  checks::dim_is(kName, "out", a.out, 1, k, "K from ids");
  if (a.num_unpadded) {
    check_input(*a.num_unpadded >= 0 && *a.num_unpadded <= t, kName, "num_unpadded", "count ", *a.num_unpadded,
                " must be in [0, T = ", t, "]");
  }
}

CompileKey EplbMap::dispatch(const Args& a) const {
  // Field order as warmup_keys declares it.
  return CompileKey(std::string(kName), {{"has_num_unpadded", a.num_unpadded.has_value()},
                                         {"num_logical", rep(a.replica_count.size(0))},
                                         {"slots", rep(a.l2p.size(1))},
                                         {"num_physical", rep(a.load.size(0))},
                                         {"ids_dtype", a.ids.dtype()},
                                         {"block_size", eplb_map_block_size(a.ids.numel())}});
}

EplbMapArgs EplbMap::warmup_inputs(const CompileKey& key) const {
  const DType dtype = key.get_dtype("ids_dtype");
  const std::int64_t logical = count_for(key, "num_logical");
  const std::int64_t slots = count_for(key, "slots");
  const std::int64_t physical = count_for(key, "num_physical");
  const std::int64_t t = numel_for(key);  // K = 1: top_k is not specialised
  Args a;
  a.ids = Tensor::meta(dtype, {t, 1});
  a.replica_count = Tensor::meta(DType::i64, {logical});
  a.l2p = Tensor::meta(DType::i64, {logical, slots});
  a.record = Tensor::meta(DType::i32, {1});
  a.load = Tensor::meta(DType::i32, {physical});
  a.out = Tensor::meta(dtype, {t, 1});
  a.max_replicas = 1;
  if (key.get_bool("has_num_unpadded")) a.num_unpadded = t;
  return a;
}

LaunchSpec EplbMap::launch_spec(const Args& a) const {
  const std::int64_t numel = a.ids.numel();
  const std::int64_t block = eplb_map_block_size(numel);
  const std::int64_t physical = a.load.size(0);
  LaunchSpec s;
  s.skip = numel == 0;
  s.grid = {static_cast<unsigned>(std::max<std::int64_t>(1, ceil_div(numel, block * kEplbMapItems))), 1, 1};
  s.block = {static_cast<unsigned>(block), 1, 1};
  s.shared_bytes = physical <= kEplbMapSharedBins ? static_cast<unsigned>(physical * sizeof(std::int32_t)) : 0;
  s.constant("BLOCK_SIZE", block).constant("HAS_NUM_UNPADDED", a.num_unpadded ? 1 : 0);
  s.ptr("ids", a.ids).ptr("replica_count", a.replica_count).ptr("l2p", a.l2p).ptr("record", a.record);
  s.ptr("load", a.load).ptr("out", a.out);
  s.integer("numel", numel).integer("top_k", a.ids.size(1)).integer("num_logical", a.replica_count.size(0));
  s.integer("slots", a.l2p.size(1)).integer("num_physical", physical);
  s.integer("num_unpadded", a.num_unpadded.value_or(0));
  return s;
}

std::string EplbMap::describe(const Args& a) const {
  return str_cat("ids=", a.ids.meta(), " replica_count=", a.replica_count.meta(), " l2p=", a.l2p.meta(),
                 " record=", a.record.meta(), " load=", a.load.meta(), " out=", a.out.meta(),
                 " max_replicas=", a.max_replicas,
                 " num_unpadded=", a.num_unpadded ? std::to_string(*a.num_unpadded) : std::string("none"));
}

}  // namespace warmkey
