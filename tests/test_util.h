// Shared helpers for the Catch2 tests: random tensors from the counter RNG, float64 comparisons,
// a finite-difference gradient check, the CUDA skip guard and the path of the decoded data.
#pragma once
#include <catch2/catch.hpp>
#include <cmath>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/device.h"
#include "core/error.h"
#include "core/philox.h"
#include "core/tensor.h"

namespace minidl::test {

// The message of the Error `f` throws (fails the test when it throws anything else or nothing).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("no minidl::Error thrown");
  return "";
}

// The message of the Error `f` throws, run in a child process that must end within `seconds`:
// for calls that would block forever (an open() of a FIFO) when broken. A child that throws no
// Error, or does not end in time (it is killed), gives a message saying so, which no check expects.
inline std::string error_in_child(const std::function<void()>& f, int seconds = 10) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    std::string message = "no minidl::Error thrown";
    try {
      f();
    } catch (const Error& e) {
      message = e.what();
    } catch (const std::exception& e) {
      message = std::string("another exception: ") + e.what();
    }
    if (::write(fds[1], message.data(), message.size()) < 0) _exit(2);
    _exit(0);
  }
  ::close(fds[1]);
  int status = 0;
  bool ended = false;
  for (int i = 0; i < seconds * 100 && !ended; ++i) {
    ended = ::waitpid(pid, &status, WNOHANG) == pid;
    if (!ended) ::usleep(10000);
  }
  if (!ended) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    ::close(fds[0]);
    return "the call did not end within " + std::to_string(seconds) + " s";
  }
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  return out;
}

// Uniform values in [lo, hi) from (seed, kStreamTest, i): the same on every machine.
inline std::vector<float> random_values(int64_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[i] = lo + (hi - lo) * uniform01(philox(seed, kStreamTest, static_cast<uint64_t>(i)).v[0]);
  return v;
}

inline Tensor random_tensor(const Shape& shape, uint64_t seed, float lo = -1.f, float hi = 1.f,
                            Device device = Device::cpu()) {
  return Tensor::from_vector(random_values(shape_numel(shape), seed, lo, hi), shape, device);
}

// int32 ids in [0, below), from the same draws (token ids for Embedding and the language-model loss).
inline Tensor random_ids(const Shape& shape, int32_t below, uint64_t seed, Device device = Device::cpu()) {
  std::vector<int32_t> ids;
  for (float v : random_values(shape_numel(shape), seed, 0.f, 1.f))
    ids.push_back(std::min(below - 1, static_cast<int32_t>(v * static_cast<float>(below))));
  return Tensor::from_vector(ids, shape, device);
}

// max |a - b| / (atol + rtol * |b|) <= 1 over all elements; reports the worst element.
inline void require_close(const std::vector<float>& a, const std::vector<double>& b, double rtol,
                          double atol, const std::string& what = "") {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double r = std::fabs(a[i] - b[i]) / (atol + rtol * std::fabs(b[i]));
    if (!(r <= worst)) { worst = r; at = i; }  // NaN counts as worst
  }
  INFO(what << ": worst element " << at << " got " << a[at] << " want " << b[at]);
  REQUIRE(worst <= 1.0);
}

inline void require_close(const std::vector<float>& a, const std::vector<float>& b, double rtol,
                          double atol, const std::string& what = "") {
  require_close(a, std::vector<double>(b.begin(), b.end()), rtol, atol, what);
}

// Checks d(sum(f(x) * w))/dx from autograd against central differences in float64-accumulated
// float32 arithmetic. f must be a deterministic function of x (CPU tensors).
inline void gradcheck(const std::function<Tensor(const Tensor&)>& f, Tensor x, double eps = 1e-2,
                      double rtol = 2e-2, double atol = 2e-3, uint64_t seed = 7) {
  x.set_requires_grad(true);
  Tensor y = f(x);
  std::vector<float> w = random_values(y.numel(), seed);
  Tensor wt = Tensor::from_vector(w, y.shape());
  auto weighted = [&](const Tensor& out) {
    std::vector<float> o = out.to_vector();
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += static_cast<double>(o[i]) * w[i];
    return s;
  };
  autograd::backward(y, wt);
  Tensor gx = x.grad();
  REQUIRE(gx.defined());
  std::vector<float> analytic = gx.to_vector();
  std::vector<float> xv = x.to_vector();
  std::vector<double> numeric(xv.size());
  autograd::NoGradGuard ng;
  for (size_t i = 0; i < xv.size(); ++i) {
    std::vector<float> xp = xv, xm = xv;
    xp[i] += static_cast<float>(eps);
    xm[i] -= static_cast<float>(eps);
    double fp = weighted(f(Tensor::from_vector(xp, x.shape())));
    double fm = weighted(f(Tensor::from_vector(xm, x.shape())));
    numeric[i] = (fp - fm) / (2 * eps);
  }
  require_close(analytic, numeric, rtol, atol, "gradient vs finite differences");
}

// A fresh directory under the system temp dir, removed with everything in it at scope exit
// (write permission is restored first, for tests that take it away).
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("minidl_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// Number of tests that skipped (MINIDL_REQUIRE_CUDA, missing data) in this process.
inline int& skipped_count() {
  static int n = 0;
  return n;
}

// Directory of the decoded CIFAR-10 binaries (set by CMake/ctest; "" when it is
// absent or not decoded yet).
inline std::string data_dir() {
  const char* d = std::getenv("MINIDL_DATA_DIR");
  if (!d) return "";
  std::FILE* f = std::fopen((std::string(d) + "/test_batch.bin").c_str(), "rb");
  if (!f) return "";
  std::fclose(f);
  return d;
}

}  // namespace minidl::test

// Skips the rest of a [cuda] test, visibly, when there is no GPU.
#define MINIDL_REQUIRE_DATA()                                                         \
  do {                                                                                \
    if (::minidl::test::data_dir().empty()) {                                         \
      WARN("SKIPPED: MINIDL_DATA_DIR is not set (scripts/test.sh decodes the data)"); \
      ++::minidl::test::skipped_count();                                              \
      return;                                                                         \
    }                                                                                 \
  } while (0)

#define MINIDL_REQUIRE_CUDA()                                              \
  do {                                                                     \
    if (!::minidl::cuda_available()) {                                     \
      WARN("SKIPPED: no CUDA GPU on this machine (test needs one)");       \
      ++::minidl::test::skipped_count();                                   \
      return;                                                              \
    }                                                                      \
  } while (0)
