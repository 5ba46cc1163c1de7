// WarmSet: everything warmup produces for one kernel under one config, computed once and looked
// up in O(1) by the per-case checks: the warmup CompileKeys, the bound key (binary) of each, and
// the P1/P5 findings of warmup itself (checked by equivalence/properties/warmup_inputs_*).
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "equivalence/report.h"
#include "spaces/space.h"
#include "warmup/jit_key.h"

namespace warmkey::equivalence {

// What warmup_inputs -> validate -> dispatch -> bind give for each CompileKey of one kernel. They
// do not depend on the config, so the warm sets of that kernel under many configs (the fuzz
// oracle's) can share them: each key is then evaluated once per process, not once per config.
// Bounded: past `capacity` keys it starts over.
class WarmupMemo {
 public:
  explicit WarmupMemo(std::size_t capacity = 1 << 16) : capacity_(capacity) {}
  const spaces::WarmupFacts& facts(const spaces::InputSpace& space, const Kernel& kernel, const CompileKey& key);
  std::size_t size() const { return facts_.size(); }

 private:
  std::size_t capacity_;
  const Kernel* kernel_ = nullptr;  // the one kernel (contract or mutant) the facts are of
  std::unordered_map<CompileKey, spaces::WarmupFacts, CompileKeyHash> facts_;
};

// The target verification keys are made for: the default arch and options, and the NVRTC
// version of the loaded library (as the runtime's compiler fills it).
const CompileTarget& verification_target();

class WarmSet {
 public:
  // Computes warmup_keys(config) and, per key, warmup_inputs -> validate -> dispatch -> bind:
  // all at once, or (lazy) each key when a lookup first needs it (the fuzz oracle: a new config
  // then costs only warmup_keys()). A kernel the config does not use has an empty set.
  // A memo (of this kernel) shares the per-key evaluations with other warm sets; the caller keeps
  // it alive as long as this set.
  WarmSet(const spaces::InputSpace& space, const Kernel& kernel, const ModelConfig& config,
          CompileTarget target = verification_target(), bool lazy = false, WarmupMemo* memo = nullptr);

  const spaces::InputSpace& space() const { return *space_; }
  const Kernel& kernel() const { return *kernel_; }
  const ModelConfig& config() const { return config_; }
  const CompileTarget& target() const { return target_; }
  bool used() const { return used_; }

  const std::vector<CompileKey>& keys() const { return keys_; }
  bool has_key(const CompileKey& k) const { return index_of(k) != kNone; }
  // The binary of warmup key k; nullptr when k is not a warmup key or its warmup failed.
  const BoundKey* bound_of(const CompileKey& k) const;
  // The warmup key whose binary b is; nullptr when no warmup key compiles b (P2 fails).
  const CompileKey* warmed_by(const BoundKey& b) const;
  // Distinct binaries warmup compiles.
  std::size_t distinct_jit_keys() const;
  // P1 and P5 findings (and a warmup_keys() that throws); lazy: of the keys warmed so far.
  const std::vector<Violation>& warmup_violations() const { return warmup_violations_; }

  // bound_of for any key, computing warmup_bound_key(k) when k is not a warmup key (cached).
  // Returns nullptr and sets *error when it throws.
  const BoundKey* bound_of_any(const CompileKey& k, std::string* error) const;

  JitKey jit_key(const BoundKey& b) const { return make_jit_key(b, target_); }
  // The warmed binary closest to b (fewest JitKey differences), with its warmup key.
  std::pair<const BoundKey*, const CompileKey*> nearest_warmed(const BoundKey& b) const;
  // The warmup key closest to k (fewest CompileKey differences).
  const CompileKey* nearest_key(const CompileKey& k) const;

 private:
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  // The first index of k in keys_, or kNone.
  std::size_t index_of(const CompileKey& k) const;
  void warm_key(std::size_t index) const;
  void ensure(std::size_t index) const {
    if (done_.empty()) {
      done_.assign(keys_.size(), 0);
      bounds_.resize(keys_.size());
    }
    if (!done_[index]) warm_key(index);
  }
  void ensure_all() const;

  const spaces::InputSpace* space_;
  const Kernel* kernel_;
  ModelConfig config_;
  CompileTarget target_;
  bool used_ = false;
  WarmupMemo* memo_ = nullptr;
  std::vector<CompileKey> keys_;
  // (hash, index) of each key, sorted: the lookup table of keys_ without copies of the keys.
  std::vector<std::pair<std::size_t, std::size_t>> key_hashes_;
  // Filled per key by warm_key (at construction, or on demand when lazy); sized on first use.
  mutable std::vector<char> done_;
  mutable std::size_t done_count_ = 0;
  // One pointer per key, a BoundKey (about 230 bytes) only per warmed key: a lazy set of hundreds of
  // keys that inputs reach a few of no longer zeroes (and faults in) a BoundKey per key.
  mutable std::vector<std::unique_ptr<const BoundKey>> bounds_;
  mutable std::unordered_map<BoundKey, std::size_t, BoundKeyHash> warmed_;  // binary -> first key index
  mutable std::vector<Violation> warmup_violations_;
  mutable std::unordered_map<CompileKey, std::pair<std::optional<BoundKey>, std::string>, CompileKeyHash> extra_;
};

// A run's warm sets, one per (kernel, config), computed on first use.
class WarmSetCache {
 public:
  explicit WarmSetCache(CompileTarget target = verification_target(), std::size_t capacity = 1024, bool lazy = false)
      : target_(std::move(target)), capacity_(capacity), lazy_(lazy) {}
  // The returned reference stays valid until the next get().
  const WarmSet& get(const spaces::InputSpace& space, const Kernel& kernel, const ModelConfig& config);
  // Same, with the caller's identity of the config (for example the bytes it was decoded from),
  // which spares serialising it.
  const WarmSet& get(const spaces::InputSpace& space, const Kernel& kernel, const ModelConfig& config,
                     const std::string& config_id);

 private:
  CompileTarget target_;
  std::size_t capacity_;
  bool lazy_;
  std::unordered_map<std::string, std::unique_ptr<WarmSet>> sets_;
};

}  // namespace warmkey::equivalence
