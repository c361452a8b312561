// Catch2 main. Under ctest every test case runs in its own process: when every test case that
// ran skipped itself (a [cuda] test without a GPU, a data test without the data), the process
// exits with code 4, which ctest reports as "Skipped" (SKIP_RETURN_CODE) rather than as a pass.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "test_util.h"

namespace {

int g_cases_run = 0;

struct CaseCounter : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(Catch::TestCaseInfo const&) override { ++g_cases_run; }
};

}  // namespace

CATCH_REGISTER_LISTENER(CaseCounter)

int main(int argc, char* argv[]) {
  const int failures = Catch::Session().run(argc, argv);
  if (failures == 0 && g_cases_run > 0 && minidl::test::skipped_count() == g_cases_run) return 4;
  return failures;
}
