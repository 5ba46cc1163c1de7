// .npy files and case folders.
#include "equivalence/case_folder.h"

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

namespace warmkey::equivalence {
namespace {

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

}  // namespace

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

}  // namespace warmkey::equivalence
