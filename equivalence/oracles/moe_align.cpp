// Oracle of moe_align: pairs the kernel with reference/moe_align.
#include "equivalence/oracles/moe_align.h"

#include <algorithm>

#include "equivalence/oracles/routing_inputs.h"
#include "kernels/dsv4_topk/dsv4_topk.h"
#include "kernels/moe_align/moe_align.h"
#include "reference/moe_align.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey::equivalence {
namespace {

constexpr std::uint8_t kPoison = 0x5a;  // not -1 and not numel: every position must be written

std::int64_t scalar(const NumericCase& c, const char* name) {
  auto it = c.scalars.find(name);
  if (it == c.scalars.end()) throw Error(str_cat(c.title(), ": no scalar '", name, "'"));
  return it->second;
}

HostTensor poisoned_copy(const HostTensor& like) {
  HostTensor t = like;
  std::fill(t.bytes.begin(), t.bytes.end(), kPoison);
  return t;
}

}  // namespace

std::string MoeAlignCase::label() const {
  return str_cat("T=", num_tokens, " K=", top_k, " ", dtype_name(ids_dtype), aligned ? " aligned" : " misaligned",
                 " E=", num_experts, " BLOCK_M=", block_m, expert_map ? str_cat(" map=", num_local_experts) : "",
                 skewed ? " skewed" : "", extra_capacity ? str_cat(" +", extra_capacity) : "");
}

NumericCase MoeAlignOracle::make_case(const MoeAlignArgs& a, const ModelConfig& config, std::uint64_t seed,
                                      bool reference) {
  MoeAlignCase p;
  const bool flat = a.topk_ids.dim() == 1;
  p.num_tokens = a.topk_ids.size(0);
  p.top_k = flat ? 1 : a.topk_ids.size(1);
  p.ids_dtype = a.topk_ids.dtype();
  p.aligned = a.topk_ids.aligned16();
  p.num_experts = a.num_experts;
  p.block_m = a.block_m;
  p.expert_map = a.expert_map.has_value();
  p.num_local_experts = std::min(config.num_local_experts(), a.num_experts);
  p.extra_capacity = a.sorted_token_ids.size(0) - moe_align_sorted_size(a.topk_ids.numel(), a.num_experts, a.block_m);
  p.skewed = seed % 2 == 1;  // hot experts (long groups) in every other case
  p.seed = seed;
  return make_case(p, reference);
}

NumericCase MoeAlignOracle::make_case(const MoeAlignCase& p, bool reference) {
  spaces::CaseRng rng(p.seed);
  const std::int64_t e = p.num_experts, numel = p.num_tokens * p.top_k;
  NumericCase c;
  c.kernel = "moe_align";
  c.label = p.label();
  c.seed = p.seed;

  HostTensor ids =
      HostTensor::zeros("topk_ids", p.ids_dtype, {p.num_tokens, p.top_k}, p.aligned ? 0 : dtype_size(p.ids_dtype));
  equivalence::fill_expert_ids(rng, ids, e);
  if (p.skewed) {  // 80% of the entries on experts 0..3
    for (std::int64_t i = 0; i < numel; ++i) {
      if (rng.bernoulli(0.8)) ids.set_int(i, rng.uniform_int(0, std::min<std::int64_t>(e, 4) - 1));
    }
  }
  if (numel > 0) ids.set_int(0, e - 1);  // at least one sorted entry
  c.inputs.push_back(std::move(ids));
  if (p.expert_map) c.inputs.push_back(random_expert_map(rng, e, p.num_local_experts, 0));
  c.scalars["num_experts"] = e;
  c.scalars["block_m"] = p.block_m;

  const std::int64_t sorted = moe_align_sorted_size(numel, e, p.block_m) + p.extra_capacity;
  const std::int64_t blocks = moe_align_max_blocks(numel, e, p.block_m) + p.extra_capacity;
  c.expected.push_back(HostTensor::zeros("sorted_token_ids", DType::i32, {sorted}));
  c.expected.push_back(HostTensor::zeros("expert_ids", DType::i32, {blocks}));
  c.expected.push_back(HostTensor::zeros("num_tokens_post_padded", DType::i32, {1}));
  if (reference) MoeAlignOracle{}.compute_reference(c);
  return c;
}

void MoeAlignOracle::compute_reference(NumericCase& c) const {
  const HostTensor& ids_t = c.input("topk_ids");
  reference::IndexVector ids(ids_t.numel());
  for (std::int64_t i = 0; i < ids_t.numel(); ++i) ids(i) = ids_t.get_int(i);
  std::optional<Eigen::VectorXi> map;
  reference::OptionalExpertMap map_ref;
  if (const HostTensor* map_t = c.find_input("expert_map")) {
    map.emplace(map_t->numel());
    for (std::int64_t i = 0; i < map_t->numel(); ++i) (*map)(i) = static_cast<int>(map_t->get_int(i));
    map_ref.emplace(*map);
  }
  HostTensor& sorted_t = c.expected_output("sorted_token_ids");
  HostTensor& blocks_t = c.expected_output("expert_ids");
  Eigen::VectorXi sorted(sorted_t.numel()), blocks(blocks_t.numel());
  std::int32_t post = 0;
  reference::moe_align(ids, map_ref, sorted, blocks, post, scalar(c, "num_experts"), scalar(c, "block_m"));
  for (std::int64_t i = 0; i < sorted.size(); ++i) sorted_t.set_int(i, sorted(i));
  for (std::int64_t i = 0; i < blocks.size(); ++i) blocks_t.set_int(i, blocks(i));
  c.expected_output("num_tokens_post_padded").set_int(0, post);
  for (const char* out : {"sorted_token_ids", "expert_ids", "num_tokens_post_padded"}) c.tolerances.erase(out);
}

MoeAlignArgs MoeAlignOracle::device_args(const NumericCase& c, DeviceTensors& dev) {
  MoeAlignArgs a;
  a.topk_ids = dev.upload(c.input("topk_ids"));
  if (const HostTensor* map = c.find_input("expert_map")) a.expert_map = dev.upload(*map);
  a.sorted_token_ids = dev.upload(poisoned_copy(c.expected_output("sorted_token_ids")));
  a.expert_ids = dev.upload(poisoned_copy(c.expected_output("expert_ids")));
  a.num_tokens_post_padded = dev.upload(poisoned_copy(c.expected_output("num_tokens_post_padded")));
  a.num_experts = scalar(c, "num_experts");
  a.block_m = scalar(c, "block_m");
  return a;
}

std::vector<HostTensor> MoeAlignOracle::run_on_device(const NumericCase& c, JitRuntime& rt) const {
  return run_on_device(c, rt, LaunchOptions{});
}

std::vector<HostTensor> MoeAlignOracle::run_on_device(const NumericCase& c, JitRuntime& rt,
                                                      LaunchOptions options) const {
  DeviceTensors dev(rt.device());
  MoeAlignArgs a = device_args(c, dev);
  MoeAlign{}(a, rt, nullptr, options);
  rt.device().synchronize();
  return {dev.download("sorted_token_ids"), dev.download("expert_ids"), dev.download("num_tokens_post_padded")};
}

}  // namespace warmkey::equivalence
