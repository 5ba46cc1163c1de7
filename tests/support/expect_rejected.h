// validate() of a bad input: an InputError naming the kernel, the field and the value.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>

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

}  // namespace warmkey::test
