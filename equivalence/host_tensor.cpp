// Host tensors, numeric cases, the comparison rule, random fill and device copies.
#include "equivalence/host_tensor.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>
#include <thread>
#include <utility>

#include "warmup/error.h"
#include "warmup/host_dtype.h"

namespace warmkey::equivalence {
namespace {

// "[3,17]" for flat index i of shape.
std::string index_text(std::int64_t i, const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    const std::int64_t n = shape[d] > 0 ? shape[d] : 1;
    idx[d] = i % n;
    i /= n;
  }
  return shape_text(idx);
}

// NOTES: element access is checked against the storage in every build. An oracle's off-by-one (a
// fill loop to <= numel()) otherwise writes past the bytes silently in release builds, where only
// ASan would see it (a survivor of ci/mutation-campaign); one compare per element costs nothing
// next to the dtype switch of host_dtype.h.
// The test multiplies instead of dividing: the host half of the GPU sweeps makes billions of
// accesses, and a division each was a fifth of the ep_gather sweep's host time (perf, 2026-12-05).
std::int64_t checked(const HostTensor& t, std::int64_t i) {
  const auto size = static_cast<std::size_t>(dtype_size(t.dtype));
  if (i < 0 || (static_cast<std::size_t>(i) + 1) * size > t.bytes.size()) {
    const auto n = static_cast<std::int64_t>(t.bytes.size() / size);
    throw Error(str_cat(t.to_string(), ": element ", i, " is outside its ", n, " elements"));
  }
  return i;
}

// What an element's bits are, for the bitwise-equal path of compare_one: enough to decide the
// element's verdict without decoding it.
enum class BitsClass { zero, finite, nan, inf };

// Whether bits_class knows dtype d (the dtypes load_float and load_int read).
bool has_bits_class(DType d) {
  switch (d) {
    case DType::f32:
    case DType::f16:
    case DType::bf16:
    case DType::f8e4m3:
    case DType::u8:
    case DType::ue8m0:
    case DType::boolean:
    case DType::i32:
    case DType::u32:
    case DType::i64: return true;
    default: return false;
  }
}

template <class T>
T raw_at(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Floats by their IEEE fields (f8e4m3 has no infinity: S.1111.111 is its NaN); integers are zero
// or "finite".
BitsClass bits_class(DType d, const std::uint8_t* p) {
  std::uint32_t a = 0, inf = 0;
  switch (d) {
    case DType::f32: a = raw_at<std::uint32_t>(p) & 0x7fffffffu, inf = 0x7f800000u; break;
    case DType::f16: a = raw_at<std::uint16_t>(p) & 0x7fffu, inf = 0x7c00u; break;
    case DType::bf16: a = raw_at<std::uint16_t>(p) & 0x7fffu, inf = 0x7f80u; break;
    case DType::f8e4m3: {
      const std::uint32_t b = raw_at<std::uint8_t>(p) & 0x7fu;
      return b == 0 ? BitsClass::zero : b == 0x7fu ? BitsClass::nan : BitsClass::finite;
    }
    default: {
      const int size = dtype_size(d);
      return std::all_of(p, p + size, [](std::uint8_t b) { return b == 0; }) ? BitsClass::zero : BitsClass::finite;
    }
  }
  return a == 0 ? BitsClass::zero : a < inf ? BitsClass::finite : a == inf ? BitsClass::inf : BitsClass::nan;
}

std::string value_text(const HostTensor& t, std::int64_t i) {
  if (dtype_is_float(t.dtype)) {
    std::ostringstream os;
    os << std::setprecision(9) << t.get_float(i);
    return os.str();
  }
  return std::to_string(t.get_int(i));
}

// Whether element i still holds the poison written before the launch (every byte kPoisonByte).
bool element_is_poison(const HostTensor& t, std::int64_t i) {
  const std::size_t size = static_cast<std::size_t>(dtype_size(t.dtype));
  const auto* p = reinterpret_cast<const std::uint8_t*>(t.bytes.data()) + static_cast<std::size_t>(i) * size;
  return std::all_of(p, p + size, [](std::uint8_t b) { return b == kPoisonByte; });
}

// One output's comparison, appended to the report.
void compare_one(const HostTensor& want, const HostTensor& got, Tolerance tol, CompareReport& report) {
  const std::string what = str_cat(want.name, " (", dtype_name(want.dtype), shape_text(want.shape), ")");
  if (got.dtype != want.dtype || got.shape != want.shape) {
    report.ok = false;
    report.lines.push_back(str_cat(what, ": device output is ", dtype_name(got.dtype), shape_text(got.shape)));
    return;
  }
  const bool floating = dtype_is_float(want.dtype);
  const std::int64_t n = want.numel();
  std::int64_t bad = 0, first = -1, last = -1, worst = -1, nonzero = 0;
  double worst_err = -1;
  auto record = [&](std::int64_t i, bool ok, double err) {
    if (err > worst_err) worst_err = err, worst = i;
    if (ok) return;
    ++bad;
    if (first < 0) first = i;
    last = i;
  };
  // Runs of elements whose bytes are equal take the bitwise path: the verdict the element loop
  // below reaches for g == w, from the bits alone (a finite element passes with error 0 under
  // any tolerance with rel >= 0; a NaN passes unless it is the poison; an infinity never passes).
  // The host half of the EP sweeps compares gigabytes, nearly all of it equal (2026-12-05: 32 s a
  // case of ep_scatter's fp8 rows elementwise).
  const auto size = static_cast<std::size_t>(dtype_size(want.dtype));
  const bool bitwise = has_bits_class(want.dtype) && want.bytes.size() >= static_cast<std::size_t>(n) * size &&
                       got.bytes.size() >= static_cast<std::size_t>(n) * size &&
                       (!floating || (tol.rel >= 0 && std::isfinite(tol.rel) && std::isfinite(tol.floor)));
  constexpr std::int64_t kRun = 4096;
  for (std::int64_t r0 = 0; r0 < n; r0 += kRun) {
    const std::int64_t r1 = std::min(n, r0 + kRun);
    const std::uint8_t* w0 = want.bytes.data() + static_cast<std::size_t>(r0) * size;
    if (bitwise && std::memcmp(w0, got.bytes.data() + static_cast<std::size_t>(r0) * size,
                               static_cast<std::size_t>(r1 - r0) * size) == 0) {
      for (std::int64_t i = r0; i < r1; ++i) {
        switch (bits_class(want.dtype, w0 + static_cast<std::size_t>(i - r0) * size)) {
          case BitsClass::zero: record(i, true, 0.0); break;
          case BitsClass::finite: ++nonzero, record(i, true, 0.0); break;
          case BitsClass::nan: {
            ++nonzero;
            const bool ok = !element_is_poison(got, i);
            record(i, ok, ok ? 0.0 : std::numeric_limits<double>::infinity());
            break;
          }
          case BitsClass::inf: ++nonzero, record(i, false, std::numeric_limits<double>::infinity()); break;
        }
      }
      continue;
    }
    for (std::int64_t i = r0; i < r1; ++i) {
      double err;
      bool ok;
      if (floating) {
        const double w = want.get_float(i), g = got.get_float(i);
        if (w != 0) ++nonzero;
        err = std::fabs(g - w);
        if (std::isnan(w)) {
          // A NaN the reference computes too (a hash-routed slot on a NaN logit) must be a NaN the
          // kernel wrote: the poison's all-ones bit pattern means the element was never written.
          ok = std::isnan(g) && !element_is_poison(got, i);
          err = ok ? 0.0 : std::numeric_limits<double>::infinity();
        } else {
          ok = std::isfinite(g) && err <= tol.rel * std::max(std::fabs(w), tol.floor);
          if (!std::isfinite(g)) err = std::numeric_limits<double>::infinity();
        }
      } else {
        const std::int64_t w = want.get_int(i), g = got.get_int(i);
        if (w != 0) ++nonzero;
        ok = w == g;
        err = ok ? 0.0 : std::fabs(static_cast<double>(g) - static_cast<double>(w));
      }
      record(i, ok, err);
    }
  }
  if (n > 0 && nonzero == 0) {
    report.ok = false;
    report.lines.push_back(str_cat(what, ": the reference is all zeros, so this case checks nothing (refused)"));
    return;
  }
  auto at = [&](std::int64_t i) {
    return str_cat(index_text(i, want.shape), " got ", value_text(got, i), " want ", value_text(want, i));
  };
  if (bad == 0) {
    report.lines.push_back(str_cat(what, ": ok", floating ? str_cat(", max abs err ", worst_err) : std::string()));
    return;
  }
  report.ok = false;
  std::string rule = floating ? str_cat("rel ", tol.rel, " with floor ", tol.floor) : std::string("exact");
  report.lines.push_back(str_cat(what, ": ", bad, " of ", n, " elements differ (", rule, "); first ", at(first),
                                 "; last ", at(last), "; worst ", at(worst)));
}

const HostTensor& find_named(const std::vector<HostTensor>& v, std::string_view name, const NumericCase& c,
                             const char* kind) {
  for (const auto& t : v) {
    if (t.name == name) return t;
  }
  throw Error(str_cat(c.title(), ": no ", kind, " named '", name, "'"));
}

}  // namespace

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += str_cat(i ? "," : "", shape[i]);
  return s + "]";
}

// ---- HostTensor --------------------------------------------------------------------------------

HostTensor HostTensor::zeros(std::string name, DType dtype, std::vector<std::int64_t> shape, int align_offset) {
  HostTensor t{std::move(name), dtype, std::move(shape), {}, align_offset};
  t.bytes.assign(static_cast<std::size_t>(t.numel() * dtype_size(dtype)), 0);
  return t;
}

std::int64_t HostTensor::numel() const {
  std::int64_t n = 1;
  for (std::int64_t s : shape) n *= s;
  return n;
}

float HostTensor::get_float(std::int64_t i) const { return load_float(dtype, bytes.data(), checked(*this, i)); }
void HostTensor::set_float(std::int64_t i, float v) { store_float(dtype, bytes.data(), checked(*this, i), v); }
std::int64_t HostTensor::get_int(std::int64_t i) const { return load_int(dtype, bytes.data(), checked(*this, i)); }
void HostTensor::set_int(std::int64_t i, std::int64_t v) { store_int(dtype, bytes.data(), checked(*this, i), v); }

std::string HostTensor::to_string() const {
  return str_cat(name, ": ", dtype_name(dtype), shape_text(shape), align_offset ? str_cat("@+", align_offset) : "");
}

// ---- NumericCase -------------------------------------------------------------------------------

const HostTensor* NumericCase::find_input(std::string_view name) const {
  for (const auto& t : inputs) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const HostTensor& NumericCase::input(std::string_view name) const { return find_named(inputs, name, *this, "input"); }

const HostTensor& NumericCase::expected_output(std::string_view name) const {
  return find_named(expected, name, *this, "output");
}

HostTensor& NumericCase::expected_output(std::string_view name) {
  return const_cast<HostTensor&>(std::as_const(*this).expected_output(name));
}

Tolerance NumericCase::tolerance(std::string_view output) const {
  auto it = tolerances.find(std::string(output));
  return it == tolerances.end() ? Tolerance{} : it->second;
}

std::string NumericCase::title() const {
  std::ostringstream os;
  os << kernel << ' ' << label << " seed=0x" << std::hex << seed;
  return os.str();
}

// ---- comparison --------------------------------------------------------------------------------

std::string CompareReport::text() const {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

CompareReport compare_outputs(const NumericCase& c, const std::vector<HostTensor>& got) {
  CompareReport report;
  if (c.expected.empty()) {
    report.ok = false;
    report.lines.push_back(str_cat(c.title(), ": the case has no reference outputs"));
  }
  for (const HostTensor& want : c.expected) {
    const HostTensor* g = nullptr;
    for (const auto& t : got) {
      if (t.name == want.name) g = &t;
    }
    if (g == nullptr) {
      report.ok = false;
      report.lines.push_back(str_cat(want.name, ": the device returned no such output"));
      continue;
    }
    compare_one(want, *g, c.tolerance(want.name), report);
  }
  return report;
}

// ---- random fill -------------------------------------------------------------------------------

namespace {

// Tensors of at least this many elements are filled by several threads, each drawing its own
// slice of the same stream (CaseRng::discard): the bytes are the sequential fill's.
constexpr std::int64_t kParallelFillElements = std::int64_t{1} << 22;
constexpr unsigned kMaxFillThreads = 8;

// Draws n values in order, each encoded to its bytes with `encode` (the fill's only loop: the
// storage was checked once for all n).
template <class Bits, class Encode>
void fill_encoded(spaces::CaseRng& rng, HostTensor& t, std::int64_t n, double lo, double hi, Encode encode) {
  auto slice = [&t, lo, hi, encode](spaces::CaseRng r, std::int64_t begin, std::int64_t end) {
    std::uint8_t* out = t.bytes.data() + static_cast<std::size_t>(begin) * sizeof(Bits);
    for (std::int64_t i = begin; i < end; ++i, out += sizeof(Bits)) {
      const Bits b = encode(static_cast<float>(r.uniform(lo, hi)));
      std::memcpy(out, &b, sizeof b);
    }
  };
  const unsigned threads =
      n < kParallelFillElements ? 1u : std::clamp(std::thread::hardware_concurrency(), 1u, kMaxFillThreads);
  if (threads == 1) {
    slice(rng, 0, n);
  } else {
    std::vector<std::thread> pool;
    const std::int64_t per = (n + threads - 1) / threads;
    for (std::int64_t begin = 0; begin < n; begin += per) {
      spaces::CaseRng r = rng;
      r.discard(static_cast<std::uint64_t>(begin));
      pool.emplace_back(slice, r, begin, std::min(n, begin + per));
    }
    for (std::thread& th : pool) th.join();
  }
  rng.discard(static_cast<std::uint64_t>(n));
}

}  // namespace

void fill_uniform(spaces::CaseRng& rng, HostTensor& t, double lo, double hi) {
  const std::int64_t n = t.numel();
  if (n > 0) (void)checked(t, n - 1);  // every element inside the storage before any draw
  switch (t.dtype) {
    case DType::f32: fill_encoded<float>(rng, t, n, lo, hi, [](float v) { return v; }); break;
    case DType::f16:
      fill_encoded<std::uint16_t>(rng, t, n, lo, hi, [](float v) { return float_to_f16_bits(v); });
      break;
    case DType::bf16:
      fill_encoded<std::uint16_t>(rng, t, n, lo, hi, [](float v) { return float_to_bf16_bits(v); });
      break;
    case DType::f8e4m3:
      fill_encoded<std::uint8_t>(rng, t, n, lo, hi, [](float v) { return float_to_f8e4m3_bits(v); });
      break;
    default:
      for (std::int64_t i = 0; i < n; ++i) t.set_float(i, static_cast<float>(rng.uniform(lo, hi)));
  }
  if (n > 0 && t.get_float(0) == 0.0f) t.set_float(0, static_cast<float>(hi != 0 ? hi / 2 : lo / 2));
}

template <class Bits, class Decode>
void decode_each(const HostTensor& t, std::int64_t n, float* out, Decode decode) {
  const std::uint8_t* in = t.bytes.data();
  for (std::int64_t i = 0; i < n; ++i, in += sizeof(Bits)) {
    Bits b;
    std::memcpy(&b, in, sizeof b);
    out[i] = decode(b);
  }
}

void copy_elements(const HostTensor& t, std::int64_t n, void* out) {
  if (n <= 0) return;
  (void)checked(t, n - 1);
  std::memcpy(out, t.bytes.data(), static_cast<std::size_t>(n) * static_cast<std::size_t>(dtype_size(t.dtype)));
}

void decode_floats(const HostTensor& t, std::int64_t n, float* out) {
  if (n > 0) (void)checked(t, n - 1);
  switch (t.dtype) {
    case DType::f32: return decode_each<float>(t, n, out, [](float v) { return v; });
    case DType::f16: return decode_each<std::uint16_t>(t, n, out, [](std::uint16_t b) { return f16_bits_to_float(b); });
    case DType::bf16:
      return decode_each<std::uint16_t>(t, n, out, [](std::uint16_t b) { return bf16_bits_to_float(b); });
    default:
      for (std::int64_t i = 0; i < n; ++i) out[i] = t.get_float(i);
  }
}

// ---- device copies -----------------------------------------------------------------------------

Tensor DeviceTensors::place(const HostTensor& t, const void* host_bytes) {
  if (t.align_offset % dtype_size(t.dtype) != 0)
    throw Error(str_cat(t.to_string(), ": align_offset must be a multiple of the element size"));
  const std::size_t bytes =
      t.bytes.empty() ? static_cast<std::size_t>(t.numel() * dtype_size(t.dtype)) : t.bytes.size();
  Entry e{HostTensor{t.name, t.dtype, t.shape, {}, t.align_offset}, device_.alloc(bytes + 16 + 16), nullptr};
  // Allocations are at least 256-byte aligned; step to the wanted offset past a 16-byte boundary.
  const auto base = reinterpret_cast<std::uintptr_t>(e.buffer.data());
  const std::uintptr_t start = ((base + 15) & ~std::uintptr_t{15}) + static_cast<std::uintptr_t>(t.align_offset);
  e.data = static_cast<std::byte*>(e.buffer.data()) + (start - base);  // a device address, never dereferenced here
  if (bytes > 0 && host_bytes) device_.copy_to_device(e.data, host_bytes, bytes);
  if (bytes > 0 && !host_bytes) device_.fill_bytes(e.data, kPoisonByte, bytes);
  entries_.push_back(std::move(e));
  return Tensor::view(t.dtype, entries_.back().data, std::span<const std::int64_t>(t.shape));
}

Tensor DeviceTensors::upload(const HostTensor& t) { return place(t, t.bytes.data()); }

Tensor DeviceTensors::poisoned(const HostTensor& like) { return place(like, nullptr); }

HostTensor DeviceTensors::download(std::string_view name) const {
  for (const auto& e : entries_) {
    if (e.meta.name != name) continue;
    HostTensor t = HostTensor::zeros(e.meta.name, e.meta.dtype, e.meta.shape, e.meta.align_offset);
    if (!t.bytes.empty()) device_.copy_to_host(t.bytes.data(), e.data, t.bytes.size());
    return t;
  }
  throw Error(str_cat("no device tensor named '", name, "'"));
}

}  // namespace warmkey::equivalence
