#include "bench/bench_data.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "core/allocator.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "data/image_folder.h"
#include "data/loader.h"
#include "train/trainer.h"

namespace minidl {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Images/s of one epoch of augmented training batches (crop 4, flip, cutout 8) from `data`.
double batch_rate(const Dataset& data, int64_t batch, Device device) {
  DataOptions options;
  options.augment.crop_padding = std::min<int>(4, static_cast<int>(data.images.size(2)) - 1);
  options.augment.flip = true;
  options.augment.cutout = std::min<int>(8, static_cast<int>(data.images.size(2)));
  Loader loader(data, LoaderOptions::training(options, std::min(batch, data.size()), 0), device);
  Batch b;
  loader.start_epoch(0);
  loader.next(b);  // warm-up: first launch, allocator
  synchronize(device);
  loader.start_epoch(1);
  const auto t0 = Clock::now();
  int64_t images = 0;
  while (loader.next(b)) images += b.images.size(0);
  synchronize(device);
  return static_cast<double>(images) / since(t0);
}

}  // namespace

int bench_data(const BenchDataOptions& options) {
  DataOptions data;
  data.format = DataFormat::ImageFolder;
  data.dir = options.dir;
  data.image_size = options.image_size;
  data.resize = from_string<FitMode>(options.resize, "--resize");
  const std::string& device_name = options.device;
  const std::string& cifar10 = options.cifar10;
  const int64_t repeats = options.repeats, batch = options.batch;
  MINIDL_CHECK(!data.dir.empty() && data.image_size > 0, "bench data: --dir ROOT and --image-size S are required");
  MINIDL_CHECK(repeats >= 1 && batch >= 1, "bench data: --repeats and --batch must be >= 1");
  const Device device = parse_device(device_name);
  std::printf("bench data: %s at %lldx%lld (%s), %d threads, device %s\n", data.dir.c_str(),
              static_cast<long long>(data.image_size), static_cast<long long>(data.image_size), to_string(data.resize),
              omp_get_max_threads(), device.str().c_str());

  // Cold caches in a folder of our own, removed at the end.
  const fs::path scratch = fs::temp_directory_path() / str("minidl-bench-data-", ::getpid());
  double best = 1e30;
  Dataset train;
  for (int64_t r = 0; r < repeats; ++r) {
    DataOptions cold = data;
    cold.cache_dir = (scratch / std::to_string(r)).string();
    ImageFolderStats st;
    train = load_image_folder(cold, Split::Train, &st, true);
    MINIDL_CHECK(!st.from_cache, "bench data: the cold cache was not cold");
    best = std::min(best, st.seconds);
  }
  DataOptions warm = data;
  warm.cache_dir = (scratch / "0").string();
  ImageFolderStats cached;
  const auto c0 = Clock::now();
  load_image_folder(warm, Split::Train, &cached, true);
  const double cache_seconds = since(c0);
  const Dataset test = load_image_folder(warm, Split::Test, nullptr, true);
  std::error_code ec;
  fs::remove_all(scratch, ec);

  const double n = static_cast<double>(train.size());
  std::printf("decode + fit + write cache: %lld images in %.3f s: %.0f images/s (best of %lld, cold cache)\n",
              static_cast<long long>(train.size()), best, n / best, static_cast<long long>(repeats));
  std::printf("read the cache:             %lld images in %.3f s: %.0f images/s%s\n",
              static_cast<long long>(train.size()), cache_seconds, n / cache_seconds,
              cached.from_cache ? "" : " (NOT from the cache)");
  const double from_cache = batch_rate(train, batch, device);
  std::printf("training batches from the cache (batch %lld, crop+flip+cutout, %s): %.0f images/s\n",
              static_cast<long long>(batch), device.str().c_str(), from_cache);
  if (!cifar10.empty()) {
    const double from_binary = batch_rate(load_cifar10(cifar10, Split::Train), batch, device);
    std::printf("training batches from the CIFAR-10 binary:                      %.0f images/s (cache / binary %.3f)\n",
                from_binary, from_cache / from_binary);
  }
  std::printf("pixels sha256 (class-sorted) train %s\n",
              sha256_hex(train.images.raw_data(), static_cast<size_t>(train.images.numel())).c_str());
  std::printf("pixels sha256 (class-sorted) test  %s\n",
              sha256_hex(test.images.raw_data(), static_cast<size_t>(test.images.numel())).c_str());
  return 0;
}

}  // namespace minidl
