// `warmkey ep`'s rank processes on the CPU (socket transport): a run of 2 and 4 ranks matches the
// single-process layer with every rank holding the same relayed id; a rank that dies or hangs in
// any phase fails the run with a message naming it and the phase, within the deadline.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "replay/ep/launcher.h"
#include "replay/ep/nccl.h"
#include "warmup/error.h"
#include "warmup/model_config.h"

namespace warmkey {
namespace ep_launcher_test {

replay::ep::LaunchOptions options(std::int64_t ranks) {
  replay::ep::LaunchOptions o;
  o.config = load_config("tiny");
  o.config.ep_size = ranks;
  o.tokens = {9, 0, 17};
  o.warm = replay::ep::LaunchOptions::Warm::none;
  o.timeout_s = 60;
  return o;
}

TEST(EpLauncher, ranksMatchTheSingleProcessLayer) {
  for (std::int64_t ranks : {2, 4}) {
    const replay::ep::LaunchReport r = replay::ep::run_ranks(options(ranks));
    EXPECT_TRUE(r.ok) << r.text();
    ASSERT_EQ(r.ranks.size(), static_cast<std::size_t>(ranks));
    EXPECT_EQ(r.steps, 3);
    std::int64_t sent = 0, received = 0;
    for (const replay::ep::RankSummary& s : r.ranks) {
      EXPECT_EQ(s.id_digest, r.ranks[0].id_digest);
      EXPECT_EQ(s.launches, 9);
      sent += s.sent_rows;
      received += s.recv_rows;
    }
    EXPECT_EQ(sent, received);
    EXPECT_GT(sent, 0);
  }
}

TEST(EpLauncher, ranksShareOneDiskCacheAndCompileEachKeyOnce) {
  const auto dir = std::filesystem::temp_directory_path() / "warmkey-ep-launcher-test-cache";
  std::filesystem::remove_all(dir);
  replay::ep::LaunchOptions o = options(2);
  o.tokens = {4};
  o.warm = replay::ep::LaunchOptions::Warm::ep_kernels;
  o.cache_dir = dir;
  o.arch = "sm_90";
  const replay::ep::LaunchReport r = replay::ep::run_ranks(o);
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(r.ok) << r.text();
  EXPECT_EQ(r.ranks[0].warm_keys, r.ranks[1].warm_keys);
  EXPECT_GT(r.ranks[0].warm_keys, 0);
  EXPECT_EQ(r.ranks[0].compiled + r.ranks[1].compiled, r.ranks[0].warm_keys);  // each key once
}

TEST(EpLauncher, aRankThatDiesFailsTheRunNamingRankAndPhase) {
  for (const char* phase : {"warmup", "dispatch", "combine", "result"}) {
    SCOPED_TRACE(phase);
    replay::ep::LaunchOptions o = options(4);
    o.fail_rank = 2;
    o.fail_phase = phase;
    const replay::ep::LaunchReport r = replay::ep::run_ranks(o);
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.error, std::string("rank 2 died (exited with status 3) during the ") + phase + " phase") << r.text();
  }
  replay::ep::LaunchOptions o = options(2);
  o.fail_rank = 1;
  o.fail_phase = "id";  // dies while the parent waits for rank 0's id
  const replay::ep::LaunchReport r = replay::ep::run_ranks(o);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("rank 1 died"), std::string::npos) << r.text();
}

TEST(EpLauncher, aRankThatHangsTimesOutInsteadOfHanging) {
  replay::ep::LaunchOptions o = options(2);
  o.hang_rank = 0;
  o.fail_phase = "combine";
  o.timeout_s = 1;
  const auto t0 = std::chrono::steady_clock::now();
  const replay::ep::LaunchReport r = replay::ep::run_ranks(o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("rank 0 did not finish the combine phase within 1 s (timed out"), std::string::npos)
      << r.text();
  EXPECT_LT(seconds, 30);  // a generous bound: the point is that it returns
}

TEST(EpLauncher, badOptionsAreInputErrors) {
  replay::ep::LaunchOptions o = options(2);
  o.tokens = {100000};
  EXPECT_THROW(replay::ep::run_ranks(o), InputError);
  o = options(3);
  EXPECT_THROW(replay::ep::run_ranks(o), InputError);
}

// NCCL is loaded only when asked for: on a machine without it the loader says why; where the
// library is present its version is the 2.x ABI the declarations follow.
TEST(EpNccl, loadsLazilyOrSaysWhy) {
  std::string why;
  const std::unique_ptr<replay::ep::Nccl> nccl = replay::ep::Nccl::load(&why);
  if (!nccl) {
    EXPECT_NE(why.find("libnccl.so.2"), std::string::npos) << why;
    GTEST_SKIP() << why;
  }
  EXPECT_GE(nccl->version(), 20000);
  EXPECT_LT(nccl->version(), 30000);
}

}  // namespace ep_launcher_test
}  // namespace warmkey
