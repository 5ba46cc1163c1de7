// Host tensors and numeric cases: named row-major tensors, tolerances, the comparison rule of
// device outputs against reference outputs, seeded random fill, and device copies of a case.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "spaces/rng.h"
#include "warmup/device.h"
#include "warmup/dtype.h"
#include "warmup/tensor.h"

namespace warmkey::equivalence {

// A named host tensor: row-major bytes of `dtype`. align_offset is where a device copy starts
// past a 16-byte boundary (0 = aligned; a misaligned view uses a multiple of the element size).
struct HostTensor {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> bytes;
  int align_offset = 0;

  // Zero-filled storage for shape.
  static HostTensor zeros(std::string name, DType dtype, std::vector<std::int64_t> shape, int align_offset = 0);

  std::int64_t numel() const;
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }
  // Element access through warmup/host_dtype.h (floats: f32, f16, bf16, f8e4m3; ints: the rest).
  float get_float(std::int64_t i) const;
  void set_float(std::int64_t i, float v);
  std::int64_t get_int(std::int64_t i) const;
  void set_int(std::int64_t i, std::int64_t v);
  // "x: bf16[7,6,4096]@+2"
  std::string to_string() const;
};

// The comparison rule of one output: |got - want| <= rel * max(|want|, floor). Integer outputs
// use the default (0, 0): exact.
struct Tolerance {
  double rel = 0;
  double floor = 0;
};

// One numeric test case: inputs (absent optional tensors are simply absent), the reference
// outputs and their tolerances. Everything a replay needs, with no pointer to a kernel.
struct NumericCase {
  std::string kernel;
  std::string label;  // the sizes, dtypes and options, readable: "T=7 H=4096 bf16->bf16 misaligned map=i32"
  std::uint64_t seed = 0;
  std::vector<HostTensor> inputs;
  std::vector<HostTensor> expected;             // reference outputs, named like the output args
  std::map<std::string, Tolerance> tolerances;  // by output name; missing = exact
  std::map<std::string, std::int64_t> scalars;  // runtime scalars that are not tensor sizes

  const HostTensor* find_input(std::string_view name) const;
  const HostTensor& input(std::string_view name) const;            // throws Error naming the case
  const HostTensor& expected_output(std::string_view name) const;  // throws Error naming the case
  HostTensor& expected_output(std::string_view name);
  Tolerance tolerance(std::string_view output) const;
  // "moe_mul_sum T=7 ... seed=0x..."
  std::string title() const;
};

// Comparison of device outputs with a case's reference outputs.
struct CompareReport {
  bool ok = true;
  std::vector<std::string> lines;  // one per output: elements off, first / last / worst bad index
  std::string text() const;
};

// Compares got (the same names, dtypes and shapes as c.expected) under c's tolerances: floats
// relative with a floor, integers exactly; NaN or infinity in got never passes (except a NaN the
// reference computes too, written by the kernel: not the poison pattern); an expected
// output that is all zeros is refused (the case would check nothing).
CompareReport compare_outputs(const NumericCase& c, const std::vector<HostTensor>& got);

// Values uniform in [lo, hi) rounded to t's float dtype; element 0 is forced away from zero, so no
// filled tensor is all zeros.
void fill_uniform(spaces::CaseRng& rng, HostTensor& t, double lo, double hi);

// t's first n elements as floats (get_float's values, one storage check and one dtype switch for
// all of them): what a reference reads its big inputs with.
void decode_floats(const HostTensor& t, std::int64_t n, float* out);
// t's first n elements' bytes as stored, into out (one storage check): a reference that reads a
// 16-bit input as its own Eigen scalar type.
void copy_elements(const HostTensor& t, std::int64_t n, void* out);

// Every byte of a device output before the launch: NaN for f32/f16/bf16, -1 for integers.
inline constexpr std::uint8_t kPoisonByte = 0xff;

// Device copies of a case's tensors, each in its own allocation at its align_offset. Outlives
// the launch that reads them; frees everything on destruction.
class DeviceTensors {
 public:
  explicit DeviceTensors(Device& device) : device_(device) {}
  // A real tensor over a fresh device copy of t.
  Tensor upload(const HostTensor& t);
  // A real tensor shaped like `like`, every byte kPoisonByte; download() reads it back by name.
  Tensor poisoned(const HostTensor& like);
  HostTensor download(std::string_view name) const;

 private:
  struct Entry {
    HostTensor meta;  // name, dtype, shape, offset (no bytes)
    DeviceBuffer buffer;
    void* data = nullptr;
  };
  Tensor place(const HostTensor& t, const void* host_bytes);
  Device& device_;
  std::vector<Entry> entries_;
};

// "[7,6,4096]"
std::string shape_text(const std::vector<std::int64_t>& shape);

}  // namespace warmkey::equivalence
