// Real and meta tensors behind one interface: a meta tensor has no storage and refuses data_ptr().
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <span>
#include <string>

#include "warmup/dtype.h"

namespace warmkey {

inline constexpr int kMaxDims = 4;

// What a kernel may know about a tensor without touching its storage.
struct TensorMeta {
  DType dtype = DType::f32;
  int ndim = 0;
  std::array<std::int64_t, kMaxDims> sizes{};
  std::array<std::int64_t, kMaxDims> strides{};  // in elements
  // Byte offset of the data address modulo 16 (0 = 16-byte aligned).
  int align_offset = 0;

  std::int64_t numel() const;
  bool is_contiguous() const;
  bool aligned16() const { return align_offset == 0; }
  std::string to_string() const;  // "bf16[64,4096]@+2" (stride list shown when not contiguous)
};

// A view of device or host memory, or a meta tensor. Never owns storage.
class Tensor {
 public:
  Tensor() = default;

  // Meta tensor, contiguous, with the given address offset modulo 16 (bytes).
  static Tensor meta(DType dtype, std::initializer_list<std::int64_t> sizes, int align_offset = 0);
  static Tensor meta(DType dtype, std::span<const std::int64_t> sizes, int align_offset = 0);
  // Meta tensor with explicit strides (elements).
  static Tensor meta_strided(DType dtype, std::span<const std::int64_t> sizes, std::span<const std::int64_t> strides,
                             int align_offset = 0);
  // Real tensor over existing storage (device pointer or host pointer), contiguous or strided.
  static Tensor view(DType dtype, void* data, std::span<const std::int64_t> sizes);
  static Tensor view(DType dtype, void* data, std::initializer_list<std::int64_t> sizes);
  static Tensor view_strided(DType dtype, void* data, std::span<const std::int64_t> sizes,
                             std::span<const std::int64_t> strides);

  const TensorMeta& meta() const { return meta_; }
  DType dtype() const { return meta_.dtype; }
  int dim() const { return meta_.ndim; }
  std::int64_t size(int i) const;
  std::int64_t stride(int i) const;
  std::int64_t numel() const { return meta_.numel(); }
  bool is_contiguous() const { return meta_.is_contiguous(); }
  bool aligned16() const { return meta_.aligned16(); }
  bool is_meta() const { return data_ == nullptr && is_meta_; }
  // The data address. Throws MetaTensorError for a meta tensor.
  void* data_ptr() const;
  std::string to_string() const { return meta_.to_string() + (is_meta_ ? " (meta)" : ""); }

 private:
  TensorMeta meta_;
  void* data_ = nullptr;
  bool is_meta_ = true;
};

std::ostream& operator<<(std::ostream& os, const TensorMeta& m);
std::ostream& operator<<(std::ostream& os, const Tensor& t);

}  // namespace warmkey
