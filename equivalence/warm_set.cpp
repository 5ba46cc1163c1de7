// Warm sets: warmup computed once per (kernel, config), with P1 and P5 (equivalence/properties/)
// checked on the way.
#include "equivalence/warm_set.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "equivalence/properties/warmup_inputs_are_valid.h"
#include "equivalence/properties/warmup_inputs_reproduce_keys.h"
#include "warmup/arch.h"
#include "warmup/compiler.h"

namespace warmkey::equivalence {

const CompileTarget& verification_target() {
  static const CompileTarget target = resolved_target();
  return target;
}

const spaces::WarmupFacts& WarmupMemo::facts(const spaces::InputSpace& space, const Kernel& kernel,
                                             const CompileKey& key) {
  if (kernel_ != &kernel || facts_.size() >= capacity_) {
    facts_.clear();
    kernel_ = &kernel;
  }
  auto it = facts_.find(key);
  if (it == facts_.end()) it = facts_.emplace(key, space.run_warmup(kernel, key)).first;
  return it->second;
}

WarmSet::WarmSet(const spaces::InputSpace& space, const Kernel& kernel, const ModelConfig& config, CompileTarget target,
                 bool lazy, WarmupMemo* memo)
    : space_(&space), kernel_(&kernel), config_(config), target_(std::move(target)), memo_(memo) {
  used_ = kernel.used_by(config);
  if (!used_) return;
  try {
    keys_ = kernel.warmup_keys(config);
  } catch (const std::exception& e) {
    warmup_violations_.push_back(warmup_keys_threw(kernel, config, e));
    return;
  }
  key_hashes_.resize(keys_.size());
  for (std::size_t i = 0; i < keys_.size(); ++i) key_hashes_[i] = {keys_[i].hash(), i};
  std::sort(key_hashes_.begin(), key_hashes_.end());
  if (!lazy) ensure_all();
}

std::size_t WarmSet::index_of(const CompileKey& k) const {
  const std::size_t h = k.hash();
  auto it = std::lower_bound(key_hashes_.begin(), key_hashes_.end(), std::pair<std::size_t, std::size_t>{h, 0});
  for (; it != key_hashes_.end() && it->first == h; ++it) {
    if (keys_[it->second] == k) return it->second;
  }
  return kNone;
}

void WarmSet::ensure_all() const {
  if (done_count_ == keys_.size()) return;
  for (std::size_t i = 0; i < keys_.size(); ++i) ensure(i);
}

std::size_t WarmSet::distinct_jit_keys() const {
  ensure_all();
  return warmed_.size();
}

void WarmSet::warm_key(std::size_t i) const {
  done_[i] = 1;
  ++done_count_;
  const std::size_t total = keys_.size();
  const CompileKey& k = keys_[i];
  spaces::WarmupFacts own;
  if (!memo_) own = space_->run_warmup(*kernel_, k);
  const spaces::WarmupFacts& f = memo_ ? memo_->facts(*space_, *kernel_, k) : own;
  const WarmupKeyContext ctx{*kernel_, config_, k, i, total, target_};
  if (!check_warmup_inputs_are_valid(f, ctx, warmup_violations_)) return;
  check_warmup_inputs_reproduce_key(f, ctx, warmup_violations_);
  if (f.bound) {
    bounds_[i] = std::make_unique<const BoundKey>(*f.bound);
    warmed_.emplace(*f.bound, i);
  }
}

const BoundKey* WarmSet::bound_of(const CompileKey& k) const {
  const std::size_t i = index_of(k);
  if (i == kNone) return nullptr;
  ensure(i);
  return bounds_[i].get();
}

const CompileKey* WarmSet::warmed_by(const BoundKey& b) const {
  ensure_all();
  auto it = warmed_.find(b);
  return it == warmed_.end() ? nullptr : &keys_[it->second];
}

const BoundKey* WarmSet::bound_of_any(const CompileKey& k, std::string* error) const {
  if (const BoundKey* b = bound_of(k)) return b;
  auto it = extra_.find(k);
  if (it == extra_.end()) {
    std::pair<std::optional<BoundKey>, std::string> entry;
    try {
      entry.first = kernel_->warmup_bound_key(k);
    } catch (const std::exception& e) {
      entry.second = e.what();
    }
    it = extra_.emplace(k, std::move(entry)).first;
  }
  if (error) *error = it->second.second;
  return it->second.first ? &*it->second.first : nullptr;
}

std::pair<const BoundKey*, const CompileKey*> WarmSet::nearest_warmed(const BoundKey& b) const {
  ensure_all();
  JitKey target = jit_key(b);
  std::pair<const BoundKey*, const CompileKey*> best{nullptr, nullptr};
  std::size_t best_diff = std::numeric_limits<std::size_t>::max();
  for (std::size_t i = 0; i < keys_.size(); ++i) {
    if (!bounds_[i]) continue;
    std::size_t d = diff(target, jit_key(*bounds_[i])).size();
    if (d < best_diff) {
      best_diff = d;
      best = {bounds_[i].get(), &keys_[i]};
    }
  }
  return best;
}

const CompileKey* WarmSet::nearest_key(const CompileKey& k) const {
  const CompileKey* best = nullptr;
  std::size_t best_diff = std::numeric_limits<std::size_t>::max();
  for (const CompileKey& w : keys_) {
    std::size_t d = diff(k, w).size();
    if (d < best_diff) {
      best_diff = d;
      best = &w;
    }
  }
  return best;
}

const WarmSet& WarmSetCache::get(const spaces::InputSpace& space, const Kernel& kernel, const ModelConfig& config) {
  return get(space, kernel, config, config.to_json().dump());
}

const WarmSet& WarmSetCache::get(const spaces::InputSpace& space, const Kernel& kernel, const ModelConfig& config,
                                 const std::string& config_id) {
  std::string id = str_cat(static_cast<const void*>(&kernel), '|', config_id);
  auto it = sets_.find(id);
  if (it != sets_.end()) return *it->second;
  if (sets_.size() >= capacity_) sets_.erase(sets_.begin());  // evicts one set, whichever the table lists first
  auto set = std::make_unique<WarmSet>(space, kernel, config, target_, lazy_);
  return *sets_.emplace(std::move(id), std::move(set)).first->second;
}

}  // namespace warmkey::equivalence
