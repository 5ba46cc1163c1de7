// What derives from the kernel table: the registry of its contracts, lookups by name, and the
// oracles' standard sweeps.
#include <algorithm>

#include "equivalence/kernel_table.h"
#include "warmup/error.h"

namespace warmkey::equivalence {

const KernelDescriptor* find_kernel(const std::vector<KernelDescriptor>& rows, std::string_view name) {
  for (const KernelDescriptor& row : rows) {
    if (row.name == name) return &row;
  }
  return nullptr;
}

const KernelDescriptor* find_kernel(std::string_view name) { return find_kernel(kernel_table(), name); }

Registry make_registry(const std::vector<KernelDescriptor>& rows) {
  Registry registry;
  for (const KernelDescriptor& row : rows) registry.add(row.make_contract());
  return registry;
}

std::vector<const KernelDescriptor*> rows_with_space() {
  std::vector<const KernelDescriptor*> out;
  for (const KernelDescriptor& row : kernel_table()) {
    if (row.space) out.push_back(&row);
  }
  return out;
}

void register_builtin_kernels(Registry& registry) {
  for (const KernelDescriptor& row : kernel_table()) registry.add(row.make_contract());
}

const Registry& builtin_registry() {
  static const Registry registry = [] {
    Registry r;
    register_builtin_kernels(r);
    return r;
  }();
  return registry;
}

const Oracle* find_oracle(std::string_view kernel) {
  const KernelDescriptor* row = find_kernel(kernel);
  return row ? row->oracle.get() : nullptr;
}

const Kernel& KernelDescriptor::contract() const {
  if (const Kernel* k = builtin_registry().find(name); k != nullptr && find_kernel(name) == this) return *k;
  if (instance == nullptr) throw Error(str_cat("kernel table row '", name, "' has no contract instance"));
  return *instance;
}

std::vector<CaseDesc> KernelDescriptor::sweep(const ModelConfig& config, std::uint64_t seed) const {
  std::vector<CaseDesc> out;
  if (!replay || !oracle) return out;
  const std::int64_t max = config.max_num_batched_tokens;
  std::vector<std::int64_t> tokens;
  for (std::int64_t t : {1, 7, 16, 64, 1000, 8192}) {
    if (t < max) tokens.push_back(t);
  }
  tokens.push_back(max);
  const spaces::EplbState eplb = spaces::eplb_state(config, 1);
  for (std::int64_t t : tokens) {
    for (std::int64_t offset : {0, 1}) {
      // A decode step (padded to a multiple of 8 at the odd offset) or a prefill chunk; the odd
      // offset misaligns the per-token views and, with vision, carries image tokens.
      spaces::ServingBatch b;
      b.kind = t <= config.max_num_seqs ? spaces::BatchKind::decode : spaces::BatchKind::prefill;
      b.num_tokens = t;
      b.token_offset = offset;
      if (offset == 1 && b.kind == spaces::BatchKind::decode && (t + 7) / 8 * 8 <= max && t % 8 != 0)
        b.padded_tokens = (t + 7) / 8 * 8;
      if (offset == 1 && config.vision) b.image_tokens = 1;
      for (ReplayLaunch& l : replay(contract(), {config, b, eplb})) {
        if (!l.error.empty())
          throw Error(str_cat("kernel '", name, "', ", b.to_string(), ", ", l.variant, ": ", l.error));
        if (!l.make_case) continue;
        const std::uint64_t case_seed = spaces::derive_seed(seed, out.size());
        out.push_back({str_cat(spaces::batch_kind_name(b.kind), " T=", t,
                               b.padded() ? str_cat(" padded to ", b.rows()) : std::string(), offset ? " offset=1" : "",
                               ", ", l.variant),
                       [make = std::move(l.make_case), case_seed] { return make(case_seed); }});
      }
    }
  }
  return out;
}

}  // namespace warmkey::equivalence
