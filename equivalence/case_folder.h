// Numeric cases on disk: .npy files and case folders (case.json plus one .npy per tensor), read
// back by `warmkey case`, the replay's failure reports and numpy.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "equivalence/host_tensor.h"

namespace warmkey::equivalence {

// .npy (format 1.0, little endian, C order). bf16 travels as its uint16 bits, f8e4m3 and ue8m0
// as uint8 (dtype_numpy_descr); read_npy checks that the file's descr and the dtype agree.
void write_npy(const std::filesystem::path& file, const HostTensor& t);
HostTensor read_npy(const std::filesystem::path& file, std::string name, DType dtype);

// A case folder: case.json (kernel, label, seed, scalars, tensors with dtype, shape, alignment
// and tolerance), <input>.npy, expected_<output>.npy and, when given, got_<output>.npy.
void write_case(const std::filesystem::path& dir, const NumericCase& c, const std::vector<HostTensor>* got = nullptr);
NumericCase read_case(const std::filesystem::path& dir);

}  // namespace warmkey::equivalence
