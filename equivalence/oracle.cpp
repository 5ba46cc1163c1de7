// Numeric cases: comparison, .npy case folders, random fill and device copies.
#include "equivalence/oracle.h"

#include <algorithm>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <limits>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "warmup/error.h"
#include "warmup/host_dtype.h"

namespace warmkey {
namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += str_cat(i ? "," : "", shape[i]);
  return s + "]";
}

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

nlohmann::json tensor_json(const HostTensor& t, const std::string& file) {
  return {{"name", t.name},
          {"dtype", std::string(dtype_name(t.dtype))},
          {"shape", t.shape},
          {"file", file},
          {"align_offset", t.align_offset}};
}

HostTensor tensor_from_json(const std::filesystem::path& dir, const nlohmann::json& j) {
  auto dtype = parse_dtype(j.at("dtype").get<std::string>());
  if (!dtype) throw Error(str_cat("case ", dir, ": unknown dtype ", j.at("dtype").dump()));
  HostTensor t = read_npy(dir / j.at("file").get<std::string>(), j.at("name").get<std::string>(), *dtype);
  t.align_offset = j.at("align_offset").get<int>();
  if (t.shape != j.at("shape").get<std::vector<std::int64_t>>())
    throw Error(str_cat("case ", dir, ": ", t.name, " has shape ", shape_text(t.shape), " but case.json says ",
                        j.at("shape").dump()));
  return t;
}

const HostTensor& find_named(const std::vector<HostTensor>& v, std::string_view name, const NumericCase& c,
                             const char* kind) {
  for (const auto& t : v) {
    if (t.name == name) return t;
  }
  throw Error(str_cat(c.title(), ": no ", kind, " named '", name, "'"));
}

}  // namespace

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

float HostTensor::get_float(std::int64_t i) const { return load_float(dtype, bytes.data(), i); }
void HostTensor::set_float(std::int64_t i, float v) { store_float(dtype, bytes.data(), i, v); }
std::int64_t HostTensor::get_int(std::int64_t i) const { return load_int(dtype, bytes.data(), i); }
void HostTensor::set_int(std::int64_t i, std::int64_t v) { store_int(dtype, bytes.data(), i, v); }

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

// ---- .npy --------------------------------------------------------------------------------------

void write_npy(const std::filesystem::path& file, const HostTensor& t) {
  std::string dict = str_cat("{'descr': '", dtype_numpy_descr(t.dtype), "', 'fortran_order': False, 'shape': (");
  for (std::size_t i = 0; i < t.shape.size(); ++i)
    dict += str_cat(t.shape[i], t.shape.size() == 1 ? "," : (i + 1 < t.shape.size() ? ", " : ""));
  dict += "), }";
  // magic (6) + version (2) + header length (2) + dict + padding + '\n', a multiple of 64.
  const std::size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict.push_back('\n');
  std::ofstream out(file, std::ios::binary);
  if (!out) throw Error(str_cat("cannot write ", file));
  const std::uint16_t header_len = static_cast<std::uint16_t>(dict.size());
  out.write("\x93NUMPY\x01\x00", 8);
  const char len_le[2] = {static_cast<char>(header_len & 0xff), static_cast<char>(header_len >> 8)};
  out.write(len_le, 2);
  out.write(dict.data(), static_cast<std::streamsize>(dict.size()));
  out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
  if (!out) throw Error(str_cat("short write to ", file));
}

HostTensor read_npy(const std::filesystem::path& file, std::string name, DType dtype) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(str_cat("cannot read ", file));
  char head[10];
  in.read(head, 10);
  if (!in || std::memcmp(head, "\x93NUMPY\x01\x00", 8) != 0)
    throw Error(str_cat(file, ": not a version 1.0 .npy file"));
  const std::size_t header_len = static_cast<unsigned char>(head[8]) | (static_cast<unsigned char>(head[9]) << 8);
  std::string dict(header_len, '\0');
  in.read(dict.data(), static_cast<std::streamsize>(header_len));
  auto field = [&](const std::string& key) {
    const std::size_t k = dict.find("'" + key + "':");
    if (k == std::string::npos) throw Error(str_cat(file, ": header has no ", key, ": ", dict));
    return dict.substr(k + key.size() + 3);
  };
  const std::string descr = field("descr");
  const std::string want = str_cat("'", dtype_numpy_descr(dtype), "'");
  if (descr.compare(descr.find('\''), want.size(), want) != 0)
    throw Error(str_cat(file, ": descr ", descr.substr(0, descr.find(',')), " does not hold ", dtype_name(dtype)));
  if (field("fortran_order").substr(0, 7).find("False") == std::string::npos)
    throw Error(str_cat(file, ": Fortran order is not supported"));
  std::string shape = field("shape");
  shape = shape.substr(shape.find('(') + 1, shape.find(')') - shape.find('(') - 1);
  HostTensor t{std::move(name), dtype, {}, {}, 0};
  std::istringstream ss(shape);
  for (std::string part; std::getline(ss, part, ',');) {
    if (part.find_first_not_of(' ') != std::string::npos) t.shape.push_back(std::stoll(part));
  }
  t.bytes.resize(static_cast<std::size_t>(t.numel() * dtype_size(dtype)));
  in.read(reinterpret_cast<char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
  if (!in) throw Error(str_cat(file, ": truncated data (", t.bytes.size(), " bytes expected)"));
  return t;
}

void write_case(const std::filesystem::path& dir, const NumericCase& c, const std::vector<HostTensor>* got) {
  std::filesystem::create_directories(dir);
  nlohmann::json j{{"kernel", c.kernel}, {"label", c.label}, {"seed", c.seed}, {"scalars", c.scalars}};
  j["inputs"] = nlohmann::json::array();
  for (const auto& t : c.inputs) {
    write_npy(dir / (t.name + ".npy"), t);
    j["inputs"].push_back(tensor_json(t, t.name + ".npy"));
  }
  j["expected"] = nlohmann::json::array();
  for (const auto& t : c.expected) {
    write_npy(dir / ("expected_" + t.name + ".npy"), t);
    nlohmann::json tj = tensor_json(t, "expected_" + t.name + ".npy");
    const Tolerance tol = c.tolerance(t.name);
    tj["tolerance"] = {{"rel", tol.rel}, {"floor", tol.floor}};
    j["expected"].push_back(tj);
  }
  if (got) {
    for (const auto& t : *got) write_npy(dir / ("got_" + t.name + ".npy"), t);
  }
  std::ofstream(dir / "case.json") << j.dump(2) << "\n";
}

NumericCase read_case(const std::filesystem::path& dir) {
  std::ifstream in(dir / "case.json");
  if (!in) throw Error(str_cat("case folder ", dir, " has no case.json"));
  const nlohmann::json j = nlohmann::json::parse(in);
  NumericCase c;
  c.kernel = j.at("kernel").get<std::string>();
  c.label = j.at("label").get<std::string>();
  c.seed = j.at("seed").get<std::uint64_t>();
  c.scalars = j.at("scalars").get<std::map<std::string, std::int64_t>>();
  for (const auto& t : j.at("inputs")) c.inputs.push_back(tensor_from_json(dir, t));
  for (const auto& t : j.at("expected")) {
    c.expected.push_back(tensor_from_json(dir, t));
    c.tolerances[c.expected.back().name] = {t.at("tolerance").at("rel").get<double>(),
                                            t.at("tolerance").at("floor").get<double>()};
  }
  return c;
}

// ---- random fill -------------------------------------------------------------------------------

std::uint64_t CaseRng::next() {
  std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double CaseRng::uniform(double lo, double hi) { return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1.0p-53; }

std::int64_t CaseRng::uniform_int(std::int64_t lo, std::int64_t hi) {
  const std::uint64_t span = static_cast<std::uint64_t>(hi - lo) + 1;
  return lo + static_cast<std::int64_t>(span == 0 ? next() : next() % span);
}

bool CaseRng::bernoulli(double p) { return uniform(0, 1) < p; }

void CaseRng::fill_uniform(HostTensor& t, double lo, double hi) {
  const std::int64_t n = t.numel();
  for (std::int64_t i = 0; i < n; ++i) t.set_float(i, static_cast<float>(uniform(lo, hi)));
  if (n > 0 && t.get_float(0) == 0.0f) t.set_float(0, static_cast<float>(hi != 0 ? hi / 2 : lo / 2));
}

std::uint64_t derive_seed(std::uint64_t base, std::uint64_t index) {
  CaseRng rng(base ^ (index * 0xd1b54a32d192ed03ull));
  return rng.next();
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
  e.data = reinterpret_cast<void*>(start);
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

}  // namespace warmkey
