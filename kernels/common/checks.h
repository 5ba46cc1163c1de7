// Input checks shared by the kernel contracts: each reads only tensor metadata (so it works on
// meta tensors) and throws InputError naming the kernel, the field and the offending value.
#pragma once

#include <cstdint>
#include <initializer_list>
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

}  // namespace warmkey::checks
