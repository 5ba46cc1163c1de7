// validate() of a bad input: an InputError naming the kernel, the field and the value.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "warmup/contract.h"
#include "warmup/error.h"

namespace warmkey::test {

// validate(args) rejects args with an InputError naming the kernel, `field` and `value`.
template <class K>
void expect_rejected(const K& kernel, const typename K::Args& args, std::string_view field, std::string_view value) {
  try {
    kernel.validate(args);
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(str_cat("kernel '", kernel.name(), "'")), std::string::npos) << msg;
    EXPECT_NE(msg.find(str_cat("field '", field, "'")), std::string::npos) << msg;
    EXPECT_NE(msg.find(value), std::string::npos) << msg;
  }
}

// One bad input: its name, how it spoils valid Args, and the field and value the error must name.
template <class Args>
using Spoil = std::tuple<const char*, std::function<void(Args&)>, const char*, const char*>;

// Each case's spoiled copy of `valid` is rejected, naming the kernel, the case's field and value.
template <class K>
void expect_each_rejected(const K& kernel, const typename K::Args& valid,
                          const std::vector<Spoil<typename K::Args>>& cases) {
  for (const auto& [name, spoil, field, value] : cases) {
    SCOPED_TRACE(name);
    typename K::Args a = valid;
    spoil(a);
    expect_rejected(kernel, a, field, value);
  }
}

}  // namespace warmkey::test
