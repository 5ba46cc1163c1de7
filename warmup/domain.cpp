// Warmup domains and their enumeration.
#include "warmup/domain.h"

#include <algorithm>
#include <limits>
#include <set>

#include "warmup/binder.h"

namespace warmkey {
namespace {

constexpr std::int64_t kI32Min = std::numeric_limits<std::int32_t>::min();
constexpr std::int64_t kI32Max = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kI64Min = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();

// Smallest multiple of 16 >= x (saturating); returns false when none fits below hi.
bool first_div16(std::int64_t lo, std::int64_t hi, std::int64_t* out) {
  std::int64_t r = lo % 16;
  if (r < 0) r += 16;
  if (r == 0) {
    *out = lo;
    return lo <= hi;
  }
  std::int64_t pad = 16 - r;
  if (lo > kI64Max - pad) return false;
  *out = lo + pad;
  return *out <= hi;
}

// Smallest x in [lo, hi] with x != 1 and x % 16 != 0.
bool first_plain(std::int64_t lo, std::int64_t hi, std::int64_t* out) {
  for (std::int64_t x = lo; x <= hi; ++x) {
    if (x != 1 && x % 16 != 0) {
      *out = x;
      return true;
    }
    if (x == kI64Max) break;
  }
  return false;
}

void add_class_points(std::int64_t lo, std::int64_t hi, std::set<std::int64_t>& out) {
  if (lo > hi) return;
  if (lo <= 1 && 1 <= hi) out.insert(1);
  std::int64_t x;
  // i32 part
  std::int64_t a = std::max(lo, kI32Min), b = std::min(hi, kI32Max);
  if (a <= b) {
    if (first_div16(a, b, &x)) out.insert(x);
    if (first_plain(a, b, &x)) out.insert(x);
  }
  // i64 parts (below and above the i32 range)
  if (lo < kI32Min) {
    std::int64_t b2 = std::min(hi, kI32Min - 1);
    if (first_div16(lo, b2, &x)) out.insert(x);
    if (first_plain(lo, b2, &x)) out.insert(x);
  }
  if (hi > kI32Max) {
    std::int64_t a2 = std::max(lo, kI32Max + 1);
    if (first_div16(a2, hi, &x)) out.insert(x);
    if (first_plain(a2, hi, &x)) out.insert(x);
  }
}

}  // namespace

std::vector<std::int64_t> class_points(std::int64_t lo, std::int64_t hi, const std::vector<std::int64_t>& boundaries) {
  std::set<std::int64_t> out;
  if (lo > hi) return {};
  std::vector<std::int64_t> cuts(boundaries.begin(), boundaries.end());
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::int64_t start = lo;
  for (std::int64_t c : cuts) {
    if (c < lo || c > hi) continue;
    if (c > start) add_class_points(start, c - 1, out);
    out.insert(c);
    if (c == kI64Max) return {out.begin(), out.end()};
    start = c + 1;
  }
  add_class_points(start, hi, out);
  return {out.begin(), out.end()};
}

std::vector<std::int64_t> class_reps(std::int64_t lo, std::int64_t hi) {
  std::set<std::int64_t> reps;
  for (std::int64_t p : class_points(lo, hi)) reps.insert(rep(p));
  return {reps.begin(), reps.end()};
}

KeySpace& KeySpace::choices(std::string field, std::vector<KeyValue> values) {
  Step s{Step::kChoices, {std::move(field)}, {}, {}, {}, {}};
  for (auto& v : values) s.rows.push_back({std::move(v)});
  steps_.push_back(std::move(s));
  return *this;
}

KeySpace& KeySpace::zip(std::vector<std::string> fields, std::vector<std::vector<KeyValue>> rows) {
  steps_.push_back(Step{Step::kZip, std::move(fields), std::move(rows), {}, {}, {}});
  return *this;
}

KeySpace& KeySpace::where(std::function<bool(const CompileKey&)> pred) {
  steps_.push_back(Step{Step::kWhere, {}, {}, std::move(pred), {}, {}});
  return *this;
}

KeySpace& KeySpace::derive(std::string field, std::function<KeyValue(const CompileKey&)> fn) {
  steps_.push_back(Step{Step::kDerive, {std::move(field)}, {}, {}, std::move(fn), {}});
  return *this;
}

KeySpace& KeySpace::map(std::function<CompileKey(const CompileKey&)> fn) {
  steps_.push_back(Step{Step::kMap, {}, {}, {}, {}, std::move(fn)});
  return *this;
}

// Depth-first over the steps with one key extended and trimmed in place: a leaf is copied out once,
// in the order the steps declare (the first step's choice varies slowest), which is the order of
// building every partial key step by step. Keys are equal exactly when every step chose rows with
// equal values (each key gains the same fields in the same order; derives and filters are functions
// of the key), so skipping each row that repeats an earlier one of its step keeps the first
// occurrence of every key, in order: what deduplicating the keys kept. Only a map can still make
// duplicates: only then is the result deduplicated (first occurrence kept).
void KeySpace::walk(std::size_t step, CompileKey& key, std::vector<CompileKey>& out,
                    const std::vector<std::vector<char>>& repeated) const {
  if (step == steps_.size()) {
    out.push_back(key);
    return;
  }
  const Step& s = steps_[step];
  const std::size_t n = key.fields_.size();
  switch (s.kind) {
    case Step::kChoices:
    case Step::kZip: {
      const std::vector<char>& skip = repeated[step];
      for (std::size_t r = 0; r < s.rows.size(); ++r) {
        if (!skip.empty() && skip[r]) continue;
        const auto& row = s.rows[r];
        for (std::size_t i = 0; i < s.fields.size(); ++i) key.fields_.emplace_back(s.fields[i], row.at(i));
        walk(step + 1, key, out, repeated);
        key.fields_.erase(key.fields_.begin() + static_cast<std::ptrdiff_t>(n), key.fields_.end());
      }
      break;
    }
    case Step::kWhere:
      if (s.pred(key)) walk(step + 1, key, out, repeated);
      break;
    case Step::kDerive:
      key.fields_.emplace_back(s.fields[0], s.derive(key));
      walk(step + 1, key, out, repeated);
      key.fields_.pop_back();
      break;
    case Step::kMap: {
      CompileKey mapped = s.map(key);
      if (step + 1 == steps_.size()) {
        out.push_back(std::move(mapped));  // a last map makes the leaf itself: no second copy
      } else {
        walk(step + 1, mapped, out, repeated);
      }
      break;
    }
  }
}

namespace {

// Marks each row that gives the same values to the step's nf fields as an earlier row (rows shorter
// than nf never do); empty when no row repeats. Rows sorted by a hash of those values, equal hashes
// compared: comparing every pair of rows was quadratic, and a few hundred rows then cost more than
// enumerating the keys (fused_moe's zip, once per fuzzed config).
std::vector<char> repeated_rows(const std::vector<std::vector<KeyValue>>& rows, std::size_t nf) {
  std::vector<char> repeated;
  if (rows.size() < 2) return repeated;
  std::vector<std::pair<std::size_t, std::size_t>> hashed;  // (hash of the first nf values, row)
  hashed.reserve(rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    if (rows[r].size() < nf) continue;
    std::size_t h = nf;
    for (std::size_t i = 0; i < nf; ++i) h = h * 0x9E3779B97F4A7C15ull + std::hash<KeyValue>{}(rows[r][i]);
    hashed.emplace_back(h, r);
  }
  std::sort(hashed.begin(), hashed.end());  // equal hashes: ascending row index
  for (std::size_t a = 0; a < hashed.size();) {
    std::size_t b = a + 1;
    while (b < hashed.size() && hashed[b].first == hashed[a].first) ++b;
    for (std::size_t j = a + 1; j < b; ++j) {
      const auto& y = rows[hashed[j].second];
      for (std::size_t i = a; i < j; ++i) {
        const auto& x = rows[hashed[i].second];
        if (std::equal(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(nf), y.begin())) {
          if (repeated.empty()) repeated.assign(rows.size(), 0);
          repeated[hashed[j].second] = 1;
          break;
        }
      }
    }
    a = b;
  }
  return repeated;
}

}  // namespace

std::vector<CompileKey> KeySpace::enumerate() const {
  bool has_map = false, filtered = false;
  std::size_t fields = 0, leaves = 1;
  std::vector<std::vector<char>> repeated(steps_.size());
  for (std::size_t k = 0; k < steps_.size(); ++k) {
    const Step& s = steps_[k];
    fields += s.fields.size();
    if (s.kind == Step::kMap) has_map = true;
    if (s.kind == Step::kWhere) filtered = true;
    // Rows agree on the fields they give (a longer row's extra values are never read).
    if (s.kind == Step::kChoices || s.kind == Step::kZip) {
      repeated[k] = repeated_rows(s.rows, s.fields.size());
      leaves = std::min<std::size_t>(leaves * s.rows.size(), std::size_t{1} << 16);
    }
  }
  std::vector<CompileKey> out;
  // Without filters every row combination is a leaf (repeated rows only make it fewer): one
  // allocation for the keys instead of a growing vector's (fuzzing enumerates per new config).
  if (!filtered) out.reserve(leaves);
  CompileKey key(kernel_, {});
  key.fields_.reserve(fields);
  walk(0, key, out, repeated);
  if (has_map) return dedup(std::move(out));
  return out;
}

std::vector<KeyValue> int_values(const std::vector<std::int64_t>& v) { return {v.begin(), v.end()}; }

}  // namespace warmkey
