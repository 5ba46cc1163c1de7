// Input checks shared by the kernel contracts.
#include "kernels/common/checks.h"

#include <algorithm>

namespace warmkey::checks {

void dtype_in(std::string_view kernel, std::string_view field, const Tensor& t, std::initializer_list<DType> allowed) {
  if (std::find(allowed.begin(), allowed.end(), t.dtype()) != allowed.end()) return;
  std::string names;
  for (DType d : allowed) names += str_cat(names.empty() ? "" : ", ", dtype_name(d));
  fail_input(kernel, field, "dtype ", t.dtype(), " (", t.meta(), ") is not one of ", names);
}

void rank(std::string_view kernel, std::string_view field, const Tensor& t, int ndim) {
  check_input(t.dim() == ndim, kernel, field, "has ", t.dim(), " dimensions (", t.meta(), "), expected ", ndim);
}

void contiguous(std::string_view kernel, std::string_view field, const Tensor& t) {
  check_input(t.is_contiguous(), kernel, field, "must be contiguous, got ", t.meta());
}

void element_aligned(std::string_view kernel, std::string_view field, const Tensor& t) {
  const int size = dtype_size(t.dtype());
  check_input(t.meta().align_offset % size == 0, kernel, field, "address offset ", t.meta().align_offset,
              " (mod 16) is not a multiple of the element size ", size, " (", t.meta(), ")");
}

void dim_is(std::string_view kernel, std::string_view field, const Tensor& t, int dim, std::int64_t expected,
            std::string_view what) {
  check_input(t.size(dim) == expected, kernel, field, "size ", t.size(dim), " in dim ", dim, " (", t.meta(),
              ") differs from ", what, " = ", expected);
}

void dim_in(std::string_view kernel, std::string_view field, const Tensor& t, int dim, std::int64_t lo, std::int64_t hi,
            std::string_view why) {
  const std::int64_t s = t.size(dim);
  check_input(s >= lo && s <= hi, kernel, field, "size ", s, " in dim ", dim, " (", t.meta(), ") is outside [", lo,
              ", ", hi, "]: ", why);
}

void dense(std::string_view kernel, std::string_view field, const Tensor& t, int ndim) {
  rank(kernel, field, t, ndim);
  contiguous(kernel, field, t);
  element_aligned(kernel, field, t);
}

void block_scales(std::string_view kernel, const std::optional<Tensor>& a_scale, const std::optional<Tensor>& b_scale,
                  bool fp8, std::span<const ScaleDim> a_lead, std::int64_t e, std::int64_t n, std::int64_t k) {
  constexpr std::int64_t kGroup = 128;
  const char* why = fp8 ? "missing: fp8 operands need block scales" : "given, but only fp8 operands take scales";
  check_input(a_scale.has_value() == fp8, kernel, "a_scale", why);
  check_input(b_scale.has_value() == fp8, kernel, "b_scale", why);
  if (!fp8) return;
  const int a_rank = static_cast<int>(a_lead.size()) + 1;
  dtype_in(kernel, "a_scale", *a_scale, {DType::f32, DType::ue8m0});
  dense(kernel, "a_scale", *a_scale, a_rank);
  for (int d = 0; d + 1 < a_rank; ++d) dim_is(kernel, "a_scale", *a_scale, d, a_lead[d].size, a_lead[d].what);
  dim_is(kernel, "a_scale", *a_scale, a_rank - 1, k / kGroup, "K / 128");
  dtype_in(kernel, "b_scale", *b_scale, {a_scale->dtype()});
  dense(kernel, "b_scale", *b_scale, 3);
  dim_is(kernel, "b_scale", *b_scale, 0, e, "E from b");
  dim_is(kernel, "b_scale", *b_scale, 1, (n + kGroup - 1) / kGroup, "ceil(N / 128)");
  dim_is(kernel, "b_scale", *b_scale, 2, k / kGroup, "K / 128");
}

}  // namespace warmkey::checks
