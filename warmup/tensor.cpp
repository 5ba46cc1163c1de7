// Real and meta tensors.
#include "warmup/tensor.h"

#include <sstream>

#include "warmup/error.h"

namespace warmkey {
namespace {

TensorMeta make_meta(DType dtype, std::span<const std::int64_t> sizes, std::span<const std::int64_t> strides,
                     int align_offset) {
  if (sizes.size() > kMaxDims) throw InputError(str_cat("tensor: ", sizes.size(), " dims, at most ", kMaxDims));
  if (!strides.empty() && strides.size() != sizes.size())
    throw InputError(str_cat("tensor: ", sizes.size(), " sizes but ", strides.size(), " strides"));
  TensorMeta m;
  m.dtype = dtype;
  m.ndim = static_cast<int>(sizes.size());
  for (int i = 0; i < m.ndim; ++i) {
    if (sizes[i] < 0) throw InputError(str_cat("tensor: negative size ", sizes[i], " in dim ", i));
    m.sizes[i] = sizes[i];
  }
  if (strides.empty()) {
    std::int64_t s = 1;
    for (int i = m.ndim - 1; i >= 0; --i) {
      m.strides[i] = s;
      s *= (m.sizes[i] > 0 ? m.sizes[i] : 1);
    }
  } else {
    for (int i = 0; i < m.ndim; ++i) m.strides[i] = strides[i];
  }
  m.align_offset = ((align_offset % 16) + 16) % 16;
  return m;
}

}  // namespace

std::int64_t TensorMeta::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= sizes[i];
  return n;
}

bool TensorMeta::is_contiguous() const {
  if (numel() == 0) return true;  // no element to address: any strides describe the same (empty) layout
  std::int64_t s = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    if (sizes[i] != 1 && strides[i] != s) return false;
    s *= sizes[i];
  }
  return true;
}

std::string TensorMeta::to_string() const {
  std::ostringstream os;
  os << dtype_name(dtype) << '[';
  for (int i = 0; i < ndim; ++i) os << (i ? "," : "") << sizes[i];
  os << ']';
  if (!is_contiguous()) {
    os << "/strides(";
    for (int i = 0; i < ndim; ++i) os << (i ? "," : "") << strides[i];
    os << ')';
  }
  if (align_offset != 0) os << "@+" << align_offset;
  return os.str();
}

Tensor Tensor::meta(DType dtype, std::initializer_list<std::int64_t> sizes, int align_offset) {
  return meta(dtype, std::span<const std::int64_t>(sizes.begin(), sizes.size()), align_offset);
}

Tensor Tensor::meta(DType dtype, std::span<const std::int64_t> sizes, int align_offset) {
  Tensor t;
  t.meta_ = make_meta(dtype, sizes, {}, align_offset);
  return t;
}

Tensor Tensor::meta_strided(DType dtype, std::span<const std::int64_t> sizes, std::span<const std::int64_t> strides,
                            int align_offset) {
  Tensor t;
  t.meta_ = make_meta(dtype, sizes, strides, align_offset);
  return t;
}

Tensor Tensor::view(DType dtype, void* data, std::span<const std::int64_t> sizes) {
  return view_strided(dtype, data, sizes, {});
}

Tensor Tensor::view(DType dtype, void* data, std::initializer_list<std::int64_t> sizes) {
  return view(dtype, data, std::span<const std::int64_t>(sizes.begin(), sizes.size()));
}

Tensor Tensor::view_strided(DType dtype, void* data, std::span<const std::int64_t> sizes,
                            std::span<const std::int64_t> strides) {
  if (data == nullptr) throw InputError("tensor: a real tensor needs a non-null data pointer");
  Tensor t;
  t.meta_ = make_meta(dtype, sizes, strides, static_cast<int>(reinterpret_cast<std::uintptr_t>(data) % 16));
  t.data_ = data;
  t.is_meta_ = false;
  return t;
}

std::int64_t Tensor::size(int i) const {
  if (i < 0) i += meta_.ndim;
  if (i < 0 || i >= meta_.ndim) throw InputError(str_cat("tensor ", to_string(), ": no dim ", i));
  return meta_.sizes[i];
}

std::int64_t Tensor::stride(int i) const {
  if (i < 0) i += meta_.ndim;
  if (i < 0 || i >= meta_.ndim) throw InputError(str_cat("tensor ", to_string(), ": no dim ", i));
  return meta_.strides[i];
}

void* Tensor::data_ptr() const {
  if (is_meta_) throw MetaTensorError(str_cat("meta tensor ", meta_.to_string(), " has no data pointer"));
  return data_;
}

std::ostream& operator<<(std::ostream& os, const TensorMeta& m) { return os << m.to_string(); }
std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

}  // namespace warmkey
