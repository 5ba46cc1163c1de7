// Identical-code folding of one program's PTX (used by NvrtcCompiler's code sharing, off by default).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace warmkey {

// The PTX of a program of several instantiations with identical entries folded. `owners` are the
// names that tell instantiations apart (each key's Spec struct, "k_<16 hex>"): a top-level PTX
// item (an entry, a function, a variable) belongs to the one owner whose name it contains. Two
// owners are identical when the items they own are equal text once their names are masked and
// each reference to a debug string ($L__info_stringN) is replaced by that string, masked. Each
// owner maps to the first identical one (`rep`); only the items of representatives are kept.
// `ok` is false (and nothing is folded) when an item names two owners or an owner owns nothing.
struct PtxFold {
  bool ok = false;
  std::string ptx;
  std::vector<std::size_t> rep;
};
PtxFold fold_identical_ptx(const std::string& ptx, const std::vector<std::string>& owners);

}  // namespace warmkey
