#include "core/test_hooks.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/error.h"

namespace minidl {

namespace {
const char* kill_at() {
  static const char* wanted = std::getenv("MINIDL_TEST_KILL_AT");
  return wanted;
}
const char* hang_at() {
  static const char* wanted = std::getenv("MINIDL_TEST_HANG_AT");
  return wanted;
}

// Whether `point` is reached the K-th time that `wanted` ("POINT" or "POINT#K") asks for;
// `reached` counts the times so far.
bool due(const char* wanted, const std::string& point, int& reached) {
  if (wanted == nullptr) return false;
  const std::string w = wanted;
  const size_t hash = w.rfind('#');
  if (w.substr(0, hash) != point) return false;
  const int k = hash == std::string::npos ? 1 : std::atoi(w.c_str() + hash + 1);
  return ++reached == k;
}
}  // namespace

void test_kill_point(const std::string& point) {
  static int killed = 0, hung = 0;
  if (due(kill_at(), point, killed)) ::kill(::getpid(), SIGKILL);
  if (due(hang_at(), point, hung))
    while (true) std::this_thread::sleep_for(std::chrono::hours(1));
}

void test_kill_point(const char* kind, int64_t n) {
  if (kill_at() != nullptr || hang_at() != nullptr) test_kill_point(std::string(kind) + ":" + std::to_string(n));
}

void test_pause_point(const std::string& name) {
  const char* file = std::getenv(("MINIDL_TEST_PAUSE_" + name).c_str());
  if (file == nullptr) return;
  const std::string go = file;
  std::ofstream(go + ".waiting") << ::getpid() << "\n";
  const auto until = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (!std::filesystem::exists(go)) {
    MINIDL_CHECK(std::chrono::steady_clock::now() < until, "MINIDL_TEST_PAUSE_", name, ": '", go,
                 "' did not appear within two minutes");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace minidl
