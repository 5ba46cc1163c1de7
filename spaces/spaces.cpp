// input_spaces(): the type-erased entries of AllSpaces.
#include "spaces/spaces.h"

namespace warmkey::spaces {
namespace {

template <class... Spaces>
std::vector<InputSpace> entries(SpaceList<Spaces...>) {
  return {space_entry<Spaces>()...};
}

}  // namespace

const std::vector<InputSpace>& input_spaces() {
  static const std::vector<InputSpace> all = entries(AllSpaces{});
  return all;
}

const InputSpace* find_input_space(std::string_view kernel) {
  for (const InputSpace& s : input_spaces()) {
    if (s.kernel == kernel) return &s;
  }
  return nullptr;
}

}  // namespace warmkey::spaces
