// Host tensors, numeric cases, the comparison rule, random fill and device copies.
#include "equivalence/host_tensor.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>
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
std::int64_t checked(const HostTensor& t, std::int64_t i) {
  const std::int64_t n = static_cast<std::int64_t>(t.bytes.size()) / dtype_size(t.dtype);
  if (i < 0 || i >= n) throw Error(str_cat(t.to_string(), ": element ", i, " is outside its ", n, " elements"));
  return i;
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
  for (std::int64_t i = 0; i < n; ++i) {
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
    if (err > worst_err) worst_err = err, worst = i;
    if (ok) continue;
    ++bad;
    if (first < 0) first = i;
    last = i;
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

void fill_uniform(spaces::CaseRng& rng, HostTensor& t, double lo, double hi) {
  const std::int64_t n = t.numel();
  for (std::int64_t i = 0; i < n; ++i) t.set_float(i, static_cast<float>(rng.uniform(lo, hi)));
  if (n > 0 && t.get_float(0) == 0.0f) t.set_float(0, static_cast<float>(hi != 0 ? hi / 2 : lo / 2));
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
