// The host-memory slot that bounds how many whole-layer GPU tests hold their memory at once
// (tests/support/host_memory_slot.h): a slot is taken by one holder at a time, across open files
// (so across processes), and freed when its holder goes.
#include "tests/support/host_memory_slot.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

namespace warmkey::test {
namespace host_memory_slot_test {

std::filesystem::path fresh_dir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "warmkey-slot-test-XXXXXX").string();
  const char* made = ::mkdtemp(pattern.data());
  EXPECT_NE(made, nullptr);
  return pattern;
}

TEST(HostMemorySlot, aSlotHasOneHolderAtATimeAndIsFreedWithIt) {
  const std::filesystem::path dir = fresh_dir();
  {
    HostMemorySlot first(dir, 0);
    ASSERT_TRUE(first.held());
    EXPECT_FALSE(HostMemorySlot(dir, 0).held());  // another open file of the same slot
    EXPECT_TRUE(HostMemorySlot(dir, 1).held());   // another slot is free
  }
  EXPECT_TRUE(HostMemorySlot(dir, 0).held());  // freed with its holder
  std::filesystem::remove_all(dir);
}

TEST(HostMemorySlot, waitingTakesTheFirstFreeSlot) {
  const std::filesystem::path dir = fresh_dir();
  ::setenv("WARMKEY_HEAVY_TEST_SLOTS", "2", 1);
  EXPECT_EQ(HostMemorySlot::slots(), 2);
  HostMemorySlot zero(dir, 0);
  ASSERT_TRUE(zero.held());
  const HostMemorySlot waited(dir);  // slot 0 is taken, so the wait ends at once on slot 1
  EXPECT_TRUE(waited.held());
  EXPECT_EQ(waited.index(), 1);
  ::setenv("WARMKEY_HEAVY_TEST_SLOTS", "0", 1);
  EXPECT_THROW(HostMemorySlot::slots(), InputError);
  ::unsetenv("WARMKEY_HEAVY_TEST_SLOTS");
  EXPECT_GE(HostMemorySlot::slots(), 1);  // from the host's memory
  std::filesystem::remove_all(dir);
}

}  // namespace host_memory_slot_test
}  // namespace warmkey::test
