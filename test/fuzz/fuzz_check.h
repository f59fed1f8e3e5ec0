// FUZZ_CHECK: the invariant a fuzz target checks. A violation prints what
// failed (with the input's size) and aborts, which libFuzzer reports as a
// crash and saves the input (crash-<sha1>) for reproduction.
#ifndef FABRIC_TEST_FUZZ_FUZZ_CHECK_H_
#define FABRIC_TEST_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond)                                                                     \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

#endif  // FABRIC_TEST_FUZZ_FUZZ_CHECK_H_
