// The CPU tests' shared cases of the sorted-layout expert GEMMs (fused_moe, nvfp4_moe): valid Args'
// layout, the naive and empty variants they accept, and the bad outputs, epilogues and layouts
// they reject alike.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/common/expert_gemm.h"
#include "tests/support/expect_rejected.h"

namespace warmkey::test {

// moe_align's layout of the valid Args below: M = 5 rows, top_k 2 over E = 4 experts, BLOCK_M 16.
inline void set_valid_layout(SortedLayoutArgs& a) {
  const std::int64_t m = 5, top_k = 2, e = 4, bm = 16;
  const std::int64_t nv = m * top_k, em = nv + e * (bm - 1);
  a.sorted_token_ids = Tensor::meta(DType::i32, {em});
  a.expert_ids = Tensor::meta(DType::i32, {(em + bm - 1) / bm});
  a.num_tokens_post_padded = Tensor::meta(DType::i32, {1});
  a.top_k = top_k;
}

// `valid` (bf16, K = 256, N = 64) in the naive layout with i64 ids and with no rows: both
// accepted, and the empty batch launches nothing.
template <class K>
void expect_naive_and_empty_accepted(const K& kernel, const typename K::Args& valid) {
  typename K::Args naive = valid;
  naive.sorted_token_ids.reset();
  naive.num_tokens_post_padded.reset();
  naive.expert_ids = Tensor::meta(DType::i64, {10});
  EXPECT_NO_THROW(kernel.validate(naive));
  typename K::Args empty = valid;
  empty.a = Tensor::meta(DType::bf16, {0, 256});
  empty.c = Tensor::meta(DType::bf16, {0, 64});
  EXPECT_NO_THROW(kernel.validate(empty));
  EXPECT_FALSE(kernel.launches(empty));
}

// The bad outputs, top_k, epilogues and layouts of Args valid as above (M = 5, top_k 2, E = 4,
// N = 64, set_valid_layout), rejected alike by every sorted-layout GEMM.
template <class Args>
std::vector<Spoil<Args>> sorted_gemm_spoils() {
  const Tensor c_rows = Tensor::meta(DType::bf16, {9, 64}), c_fp8 = Tensor::meta(DType::f8e4m3, {10, 64});
  const Tensor weights = Tensor::meta(DType::f32, {9}), bias = Tensor::meta(DType::bf16, {4, 32});
  const Tensor sorted = Tensor::meta(DType::i32, {20}), ids = Tensor::meta(DType::i32, {2});
  const Tensor naive_ids = Tensor::meta(DType::i32, {9}), naive_f32_ids = Tensor::meta(DType::f32, {10});
  const std::int64_t wide_sizes[] = {10, 64}, wide_strides[] = {std::int64_t{1} << 31, 1};
  const Tensor c_wide = Tensor::meta_strided(DType::bf16, wide_sizes, wide_strides);
  const std::int64_t bias_sizes[] = {4, 64}, bias_strides[] = {32, 1};  // rows overlap: stride(0) < N
  const Tensor bias_overlapping = Tensor::meta_strided(DType::bf16, bias_sizes, bias_strides);
  // The naive layout (no sorted ids, no padded count) with `ids` as its expert ids.
  auto naive_layout = [](const Tensor& ids) {
    return [=](auto& a) {
      a.sorted_token_ids.reset();
      a.num_tokens_post_padded.reset();
      a.expert_ids = ids;
    };
  };
  return {
      {"c rows", [=](auto& a) { a.c = c_rows; }, "c", "size 9"},
      {"c dtype", [=](auto& a) { a.c = c_fp8; }, "c", "f8e4m3"},
      {"top_k", [](auto& a) { a.top_k = 0; }, "top_k", "0"},
      {"weights count", [=](auto& a) { a.topk_weights = weights; }, "topk_weights", "holds 9"},
      {"bias shape", [=](auto& a) { a.bias = bias; }, "bias", "size 32"},
      {"sorted too short", [=](auto& a) { a.sorted_token_ids = sorted; }, "sorted_token_ids", "length 20"},
      {"expert_ids too short", [=](auto& a) { a.expert_ids = ids; }, "expert_ids", "holds 2"},
      {"padded count missing", [](auto& a) { a.num_tokens_post_padded.reset(); }, "num_tokens_post_padded",
       "come together"},
      {"naive ids count", naive_layout(naive_ids), "expert_ids", "holds 9"},
      {"naive ids dtype", naive_layout(naive_f32_ids), "expert_ids", "f32"},
      {"c row stride past i32", [=](auto& a) { a.c = c_wide; }, "c", "fit i32"},
      {"bias rows overlap", [=](auto& a) { a.bias = bias_overlapping; }, "bias", "strides"},
  };
}

}  // namespace warmkey::test
