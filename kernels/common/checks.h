// Input checks shared by the kernel contracts: each reads only tensor metadata (so it works on
// meta tensors) and throws InputError naming the kernel, the field and the offending value.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string_view>

#include "warmup/error.h"
#include "warmup/tensor.h"

namespace warmkey::checks {

// t's dtype is one of `allowed`.
void dtype_in(std::string_view kernel, std::string_view field, const Tensor& t, std::initializer_list<DType> allowed);
// t has `ndim` dimensions.
void rank(std::string_view kernel, std::string_view field, const Tensor& t, int ndim);
// t is contiguous (row-major, any size-1 dimension's stride ignored).
void contiguous(std::string_view kernel, std::string_view field, const Tensor& t);
// t's address is a multiple of its element size (a misaligned view is fine, a torn element is not).
void element_aligned(std::string_view kernel, std::string_view field, const Tensor& t);
// t.size(dim) == expected; `what` names where the expectation comes from ("T from x").
void dim_is(std::string_view kernel, std::string_view field, const Tensor& t, int dim, std::int64_t expected,
            std::string_view what);
// lo <= t.size(dim) <= hi; `why` says what the bounds protect.
void dim_in(std::string_view kernel, std::string_view field, const Tensor& t, int dim, std::int64_t lo, std::int64_t hi,
            std::string_view why);
// rank, contiguity and element alignment at once: the common case.
void dense(std::string_view kernel, std::string_view field, const Tensor& t, int ndim);

// A leading dimension of a scale tensor: its expected size and where that comes from ("M from a").
struct ScaleDim {
  std::int64_t size;
  std::string_view what;
};
// DeepSeek-style fp8 block scales of a GEMM C = A B^T with B [E, N, K]: present exactly when the
// operands are fp8; a_scale [a_lead..., K / 128] in f32 or ue8m0, b_scale [E, ceil(N / 128),
// K / 128] in a_scale's dtype, both dense.
void block_scales(std::string_view kernel, const std::optional<Tensor>& a_scale, const std::optional<Tensor>& b_scale,
                  bool fp8, std::span<const ScaleDim> a_lead, std::int64_t e, std::int64_t n, std::int64_t k);

}  // namespace warmkey::checks
