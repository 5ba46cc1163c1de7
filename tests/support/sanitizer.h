// Whether this test binary is built with AddressSanitizer, and how much of a sweep it draws then.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define WARMKEY_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WARMKEY_TEST_ASAN 1
#endif
#endif
#ifndef WARMKEY_TEST_ASAN
#define WARMKEY_TEST_ASAN 0
#endif

namespace warmkey::test {

inline constexpr bool kAsan = WARMKEY_TEST_ASAN != 0;

// The draws a sweep makes: `full` in a plain build, a quarter under ASan (at least 1).
// NOTES: a sweep over seeded draws checks two things: each drawn input runs clean (valid, no
// memory error, no undefined behaviour) and the draws together reach every class. The second is
// a fact about fixed seeds, the same in every build, and the release tree checks it with the full
// count; the sanitized tree (ci/test's asan-ubsan step) runs allocation-heavy code about 8x slower,
// so it checks the first on a quarter of the draws and leaves the reach claim to the release run
// (docs/PERFORMANCE.md, "CI").
constexpr int sweep_draws(int full) { return kAsan ? (full / 4 > 0 ? full / 4 : 1) : full; }

}  // namespace warmkey::test
