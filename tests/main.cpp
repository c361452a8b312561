// Catch2 main. Under ctest every test case runs in its own process; ctest sets
// MINIDL_SKIP_EXIT_CODE so that a [cuda] test that skipped for lack of a GPU exits with code 4,
// which ctest reports as "Skipped" (visible in CI) rather than as a silent pass.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdlib>

#include "test_util.h"

int main(int argc, char* argv[]) {
  const int failures = Catch::Session().run(argc, argv);
  if (failures == 0 && minidl::test::skipped_count() > 0 && std::getenv("MINIDL_SKIP_EXIT_CODE")) return 4;
  return failures;
}
