// The expert-GEMM references (fused_moe, batched_moe, nvfp4_moe) compute each expert's rows as one
// blocked float64 GEMM (reference/expert_products.h). Here they are checked bitwise against the
// recipe their headers state, written out per output element (a float64 dot product per element,
// each group's sum scaled and added in group order, one rounding to float32 and one to the output
// dtype: the references as they were before the blocked GEMM) on seeded layouts with every corner
// the per-entry loop had: padding, -1 and out-of-range experts, an entry named twice, rows no block
// names, partial scale groups of N.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "reference/batched_moe.h"
#include "reference/fused_moe.h"
#include "reference/nvfp4_moe.h"
#include "spaces/rng.h"
#include "warmup/error.h"
#include "warmup/host_dtype.h"

namespace warmkey {
namespace expert_gemm_reference_test {

using reference::IndexVector;
using reference::RowMatrixXf;
using reference::RowMatrixXu8;

constexpr Eigen::Index kGroup = 128;

// Values of `dtype` (uniform in [-range, range), rounded), a few of them tiny so that some float64
// sums round.
RowMatrixXf values(spaces::CaseRng& rng, Eigen::Index rows, Eigen::Index cols, DType dtype, double range) {
  RowMatrixXf m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) {
    double v = rng.uniform(-range, range);
    if (rng.bernoulli(0.01)) v *= 0x1.0p-20;
    m.data()[i] = round_to_dtype(dtype, static_cast<float>(v));
  }
  return m;
}

RowMatrixXf scales(spaces::CaseRng& rng, Eigen::Index rows, Eigen::Index cols) {
  RowMatrixXf m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = static_cast<float>(rng.uniform(0.002, 0.1));
  return m;
}

// The sorted layout of `entries` entries over `experts` experts in blocks of block_m, with the
// corners: a padded tail per block (id = entries), a block of expert -1, a block of expert
// experts + 2, entry 0 named a second time by a later block of another expert, and the last two
// entries named by no block.
struct Layout {
  IndexVector sorted, expert_ids;
  std::int64_t post = 0;
};

Layout sorted_layout(spaces::CaseRng& rng, std::int64_t entries, std::int64_t experts, std::int64_t block_m) {
  std::vector<std::int64_t> ids, blocks;
  auto add_block = [&](std::int64_t expert, std::vector<std::int64_t> members) {
    while (static_cast<std::int64_t>(members.size()) < block_m) members.push_back(entries);  // padding
    ids.insert(ids.end(), members.begin(), members.end());
    blocks.push_back(expert);
  };
  std::vector<std::int64_t> block;
  for (std::int64_t r = 0; r < entries - 2; ++r) {
    block.push_back(r);
    if (static_cast<std::int64_t>(block.size()) == block_m || rng.bernoulli(0.3)) {
      add_block(rng.uniform_int(0, experts - 1), block);
      block.clear();
    }
  }
  if (!block.empty()) add_block(rng.uniform_int(0, experts - 1), block);
  add_block(-1, {entries - 3});
  add_block(experts + 2, {entries - 4});
  add_block(experts - 1, {0});
  Layout l;
  l.sorted = Eigen::Map<const IndexVector>(ids.data(), static_cast<Eigen::Index>(ids.size()));
  l.expert_ids = Eigen::Map<const IndexVector>(blocks.data(), static_cast<Eigen::Index>(blocks.size()));
  l.post = static_cast<std::int64_t>(ids.size());
  return l;
}

// "" when got and want are bitwise equal, else the first element that differs.
std::string first_difference(const RowMatrixXf& got, const RowMatrixXf& want) {
  if (got.rows() != want.rows() || got.cols() != want.cols()) return "shapes differ";
  for (Eigen::Index r = 0; r < got.rows(); ++r) {
    for (Eigen::Index c = 0; c < got.cols(); ++c) {
      if (std::memcmp(&got(r, c), &want(r, c), sizeof(float)) != 0)
        return str_cat("c[", r, ", ", c, "] = ", got(r, c), ", the recipe gives ", want(r, c));
    }
  }
  return "";
}

// One output element of the recipe: float64 dot products (per 128-group with scales), in order.
double recipe_sum(const RowMatrixXf& a, Eigen::Index arow, const RowMatrixXf& b, Eigen::Index brow,
                  const RowMatrixXf* a_scale, const RowMatrixXf* b_scale, Eigen::Index b_scale_row) {
  if (!a_scale) return a.row(arow).cast<double>().dot(b.row(brow).cast<double>());
  double sum = 0;
  for (Eigen::Index g = 0; g < a.cols() / kGroup; ++g) {
    const double part = a.row(arow)
                            .segment(g * kGroup, kGroup)
                            .cast<double>()
                            .dot(b.row(brow).segment(g * kGroup, kGroup).cast<double>());
    sum += part * static_cast<double>((*a_scale)(arow, g)) * static_cast<double>((*b_scale)(b_scale_row, g));
  }
  return sum;
}

struct FusedCase {
  RowMatrixXf a, b;
  std::optional<RowMatrixXf> bias, a_scale, b_scale;
  std::optional<Eigen::VectorXf> w;
  Layout layout;
  bool naive = false;
  std::int64_t experts = 0, n = 0, top_k = 1, block_m = 4;
};

// The recipe of reference/fused_moe.h, one block and entry at a time (a later block overwrites).
RowMatrixXf fused_recipe(const FusedCase& f, Eigen::Index num_valid, DType out) {
  RowMatrixXf c = RowMatrixXf::Constant(num_valid, f.n, -7.0f);
  const Eigen::Index n_groups = (f.n + kGroup - 1) / kGroup;
  auto row = [&](Eigen::Index r, std::int64_t e) {
    if (e < 0 || e >= f.experts) {
      c.row(r).setZero();
      return;
    }
    for (Eigen::Index col = 0; col < f.n; ++col) {
      double sum = recipe_sum(f.a, r / f.top_k, f.b, e * f.n + col, f.a_scale ? &*f.a_scale : nullptr,
                              f.b_scale ? &*f.b_scale : nullptr, e * n_groups + col / kGroup);
      if (f.bias) sum += static_cast<double>((*f.bias)(e, col));
      if (f.w) sum *= static_cast<double>((*f.w)(r));
      c(r, col) = round_to_dtype(out, static_cast<float>(sum));
    }
  };
  if (f.naive) {
    for (Eigen::Index r = 0; r < num_valid; ++r) row(r, f.layout.expert_ids(r));
    return c;
  }
  for (std::int64_t m = 0; m < f.layout.post / f.block_m; ++m) {
    for (std::int64_t i = 0; i < f.block_m; ++i) {
      const std::int64_t entry = f.layout.sorted(m * f.block_m + i);
      if (entry >= 0 && entry < num_valid) row(entry, f.layout.expert_ids(m));
    }
  }
  return c;
}

RowMatrixXf fused_reference(const FusedCase& f, Eigen::Index num_valid, DType out) {
  RowMatrixXf c = RowMatrixXf::Constant(num_valid, f.n, -7.0f);
  auto opt = [](const auto& o) {
    using Ref = Eigen::Ref<const std::decay_t<decltype(*o)>>;
    return o ? std::optional<Ref>(Ref(*o)) : std::optional<Ref>();
  };
  std::optional<IndexVector> sorted;
  if (!f.naive) sorted = f.layout.sorted;
  reference::fused_moe(f.a, f.b, c, opt(f.bias), opt(f.a_scale), opt(f.b_scale), opt(f.w), opt(sorted),
                       f.layout.expert_ids, f.layout.post, f.top_k, f.block_m, out);
  return c;
}

// W13 (top_k 3, bias) and W2 (top_k 1, routed weights) of bf16, f16 and fp8 with block scales, in
// the sorted layout with every corner and in the naive one.
TEST(ExpertGemmReference, fusedMoeMatchesThePerElementRecipeBitwise) {
  for (const DType dtype : {DType::bf16, DType::f16, DType::f8e4m3}) {
    for (const bool w2 : {false, true}) {
      for (const bool naive : {false, true}) {
        spaces::CaseRng rng(0x5eed + static_cast<int>(dtype) * 4 + w2 * 2 + naive);
        FusedCase f;
        f.experts = 5, f.n = 200, f.top_k = w2 ? 1 : 3;
        const Eigen::Index tokens = 9, k = 256, num_valid = tokens * 3, m = w2 ? num_valid : tokens;
        const bool fp8 = dtype == DType::f8e4m3;
        f.a = values(rng, m, k, dtype, fp8 ? 240 : 1);
        f.b = values(rng, f.experts * f.n, k, dtype, fp8 ? 240 : 1);
        if (fp8) {
          f.a_scale = scales(rng, m, k / kGroup);
          f.b_scale = scales(rng, f.experts * ((f.n + kGroup - 1) / kGroup), k / kGroup);
        }
        if (w2) {
          f.w = Eigen::VectorXf(num_valid);
          for (Eigen::Index i = 0; i < num_valid; ++i) (*f.w)(i) = static_cast<float>(rng.uniform(0, 1));
        } else {
          f.bias = values(rng, f.experts, f.n, DType::bf16, 1);
        }
        f.naive = naive;
        if (naive) {
          f.layout.expert_ids = IndexVector(num_valid);
          for (Eigen::Index r = 0; r < num_valid; ++r) f.layout.expert_ids(r) = rng.uniform_int(-1, f.experts);
        } else {
          f.layout = sorted_layout(rng, num_valid, f.experts, f.block_m);
        }
        for (const DType out : {DType::bf16, DType::f32}) {
          const RowMatrixXf want = fused_recipe(f, num_valid, out), got = fused_reference(f, num_valid, out);
          EXPECT_EQ(first_difference(got, want), "") << dtype_name(dtype) << (w2 ? " W2" : " W13")
                                                     << (naive ? " naive" : " sorted") << " -> " << dtype_name(out);
        }
      }
    }
  }
}

TEST(ExpertGemmReference, batchedMoeMatchesThePerElementRecipeBitwise) {
  for (const bool fp8 : {false, true}) {
    spaces::CaseRng rng(0xba7c4 + fp8);
    const Eigen::Index experts = 4, max_tokens = 6, n = 600, k = 256, n_groups = (n + kGroup - 1) / kGroup;
    const DType dtype = fp8 ? DType::f8e4m3 : DType::bf16;
    const RowMatrixXf a = values(rng, experts * max_tokens, k, dtype, fp8 ? 240 : 1);
    const RowMatrixXf b = values(rng, experts * n, k, dtype, fp8 ? 240 : 1);
    std::optional<RowMatrixXf> as, bs;
    if (fp8) as = scales(rng, experts * max_tokens, k / kGroup), bs = scales(rng, experts * n_groups, k / kGroup);
    const IndexVector counts = (IndexVector(experts) << 0, 6, 9, 2).finished();  // empty, full, over, partial
    RowMatrixXf want = RowMatrixXf::Constant(experts * max_tokens, n, -7.0f), got = want;
    for (Eigen::Index e = 0; e < experts; ++e) {
      for (Eigen::Index r = e * max_tokens; r < e * max_tokens + std::min<Eigen::Index>(counts(e), max_tokens); ++r) {
        for (Eigen::Index col = 0; col < n; ++col) {
          const double sum =
              recipe_sum(a, r, b, e * n + col, as ? &*as : nullptr, bs ? &*bs : nullptr, e * n_groups + col / kGroup);
          want(r, col) = round_to_dtype(DType::bf16, static_cast<float>(sum));
        }
      }
    }
    if (fp8)
      reference::batched_moe(a, b, got, counts, max_tokens, *as, *bs, DType::bf16);
    else
      reference::batched_moe(a, b, got, counts, max_tokens, std::nullopt, std::nullopt, DType::bf16);
    EXPECT_EQ(first_difference(got, want), "") << (fp8 ? "fp8" : "bf16");
  }
}

TEST(ExpertGemmReference, nvfp4MoeMatchesThePerElementRecipeBitwise) {
  spaces::CaseRng rng(0xf4);
  const Eigen::Index experts = 4, n = 48, k = 64, tokens = 7, top_k = 2, num_valid = tokens * top_k;
  const RowMatrixXf a = values(rng, tokens, k, DType::bf16, 1);
  RowMatrixXu8 b(experts * n, k / 2), s(experts * n, k / 16);
  for (Eigen::Index i = 0; i < b.size(); ++i) b.data()[i] = static_cast<std::uint8_t>(rng.uniform_int(0, 255));
  for (Eigen::Index i = 0; i < s.size(); ++i) s.data()[i] = static_cast<std::uint8_t>(rng.uniform_int(0x20, 0x48));
  Eigen::VectorXf global(experts), w(num_valid);
  for (Eigen::Index e = 0; e < experts; ++e) global(e) = static_cast<float>(rng.uniform(0.5, 2));
  for (Eigen::Index r = 0; r < num_valid; ++r) w(r) = static_cast<float>(rng.uniform(0, 1));
  const RowMatrixXf bias = values(rng, experts, n, DType::bf16, 1);
  const Layout layout = sorted_layout(rng, num_valid, experts, 4);
  // The recipe: an entry named by several experts ends with the largest (the reference visits the
  // experts in order).
  const RowMatrixXf wd = reference::nvfp4_decode(b, s);
  RowMatrixXf want = RowMatrixXf::Constant(num_valid, n, -7.0f), got = want;
  std::vector<std::int64_t> last(static_cast<std::size_t>(num_valid), INT64_MIN);
  for (std::int64_t m = 0; m < layout.post / 4; ++m) {
    for (std::int64_t i = 0; i < 4; ++i) {
      const std::int64_t entry = layout.sorted(m * 4 + i), e = layout.expert_ids(m);
      if (entry < num_valid) last[static_cast<std::size_t>(entry)] = std::max(last[static_cast<std::size_t>(entry)], e);
    }
  }
  for (Eigen::Index r = 0; r < num_valid; ++r) {
    const std::int64_t e = last[static_cast<std::size_t>(r)];
    if (e == INT64_MIN) continue;
    if (e < 0 || e >= experts) {
      want.row(r).setZero();
      continue;
    }
    for (Eigen::Index col = 0; col < n; ++col) {
      double sum = wd.row(e * n + col).cast<double>().dot(a.row(r / top_k).cast<double>());
      sum *= static_cast<double>(global(e));
      sum += static_cast<double>(bias(e, col));
      sum *= static_cast<double>(w(r));
      want(r, col) = round_to_dtype(DType::bf16, static_cast<float>(sum));
    }
  }
  reference::nvfp4_moe(a, b, s, global, got, bias, w, layout.sorted, layout.expert_ids, layout.post, top_k, 4,
                       DType::bf16);
  EXPECT_EQ(first_difference(got, want), "");
}

}  // namespace expert_gemm_reference_test
}  // namespace warmkey
