// The data-parallel pieces that need no second process: the ordered reduction sums micro-batch
// vectors in global order, exactly as a chain of adds; the single-process communicator; the
// launcher's variables; the refusals of make_communicator; and the loader's micro-batches, which
// together are the whole batch, bit for bit; the gradient buckets. The multi-rank checks are
// tests/dist_test.sh.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/side_stream.h"
#include "core/tensor_ops.h"
#include "data/loader.h"
#include "distributed/communicator.h"
#include "distributed/launch.h"
#include "distributed/ordered_reduce.h"
#include "train/gradient_buckets.h"
#include "test_util.h"

using namespace minidl;

namespace {

std::vector<uint32_t> bits(const Tensor& t) {
  const std::vector<float> v = t.contiguous().to_vector();
  std::vector<uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
  return out;
}

// Sets the given variables for the scope, and unsets them after.
struct ScopedEnv {
  std::vector<std::string> names;
  ScopedEnv(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const auto& [name, value] : vars) {
      setenv(name, value, 1);
      names.emplace_back(name);
    }
  }
  ~ScopedEnv() {
    for (const std::string& n : names) unsetenv(n.c_str());
  }
};

}  // namespace

TEST_CASE("dist: ordered_sum adds the micro-batch vectors in order, as a chain of adds", "[dist]") {
  // Values whose float sum depends on the order: (1e8 + 1) - 1e8 is 0, 1e8 - 1e8 + 1 is 1.
  const int64_t n = 7;
  std::vector<float> v;
  for (int64_t k = 0; k < 4; ++k)
    for (int64_t i = 0; i < n; ++i)
      v.push_back(k == 0 ? 1e8f : k == 1 ? 1.0f + static_cast<float>(i) : k == 2 ? -1e8f : 0.25f * static_cast<float>(i));
  const Tensor rows = Tensor::from_vector(v, {4, n});
  auto comm = make_single_process_communicator();
  const Tensor sum = ordered_sum(*comm, rows);
  REQUIRE(sum.numel() == n);
  Tensor chain = flat_slice(rows.reshape({4 * n}), 0, n).clone();
  for (int64_t k = 1; k < 4; ++k) chain = add(chain, flat_slice(rows.reshape({4 * n}), k * n, n));
  CHECK(bits(sum) == bits(chain));
  const std::vector<float> s = sum.to_vector();
  for (int64_t i = 0; i < n; ++i) {
    float expect = 1e8f;
    expect += 1.0f + static_cast<float>(i);
    expect += -1e8f;
    expect += 0.25f * static_cast<float>(i);
    CHECK(s[static_cast<size_t>(i)] == expect);
  }
  // The other order gives other bits here, so the check above can tell orders apart.
  CHECK(s[0] != (1e8f + -1e8f) + 1.0f + 0.0f + 0.0f);
}

TEST_CASE("dist: the single-process communicator is a world of one", "[dist]") {
  auto comm = make_single_process_communicator();
  CHECK(comm->world_size() == 1);
  CHECK(comm->rank() == 0);
  CHECK(comm->local_rank() == 0);
  CHECK(std::string(comm->backend()) == "single");
  Tensor t = Tensor::from_vector(std::vector<float>{1.5f, -2.0f}, {2});
  Tensor out = Tensor::zeros({2});
  comm->all_gather(t, out);
  CHECK(out.to_vector() == std::vector<float>{1.5f, -2.0f});
  Tensor out2 = Tensor::zeros({2});
  comm->all_to_all(t, out2);
  CHECK(out2.to_vector() == std::vector<float>{1.5f, -2.0f});
  comm->all_reduce_sum(t);
  comm->broadcast(t, 0);
  comm->barrier();
  CHECK(t.to_vector() == std::vector<float>{1.5f, -2.0f});
  REQUIRE_THROWS_WITH(comm->broadcast(t, 1), Catch::Contains("root 1 is not a rank"));
  Tensor wrong = Tensor::zeros({3});
  REQUIRE_THROWS_WITH(comm->all_gather(t, wrong), Catch::Contains("do not fit a world of 1"));
}

TEST_CASE("dist: the launcher's variables give world size, rank and local rank", "[dist]") {
  CHECK(detect_launch().world_size == 1);
  {
    const ScopedEnv env{{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}};
    const Launch l = detect_launch();
    CHECK(l.world_size == 4);
    CHECK(l.rank == 2);
    CHECK(l.local_rank == 1);
    CHECK(l.launcher == "OMPI_COMM_WORLD_SIZE");
  }
  {
    const ScopedEnv env{{"PMI_SIZE", "2"}, {"PMI_RANK", "two"}};
    REQUIRE_THROWS_WITH(detect_launch(), Catch::Contains("PMI_RANK='two'"));
  }
  {
    const ScopedEnv env{{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "2"}};
    REQUIRE_THROWS_WITH(detect_launch(), Catch::Contains("is not below"));
  }
}

TEST_CASE("dist: make_communicator picks the backend and refuses what cannot work", "[dist]") {
  const Launch one;
  CHECK(std::string(make_communicator("auto", one, Device::cpu())->backend()) == "single");
  CHECK(std::string(make_communicator("single", one, Device::cpu())->backend()) == "single");
  REQUIRE_THROWS_WITH(make_communicator("gloo", one, Device::cpu()), Catch::Contains("expected auto, single, mpi or nccl"));
  REQUIRE_THROWS_WITH(make_communicator("nccl", one, Device::cpu()), Catch::Contains("NCCL reduces CUDA tensors"));
  for (const double timeout : {0.0, -1.0, 1e9, std::nan("")})
    REQUIRE_THROWS_WITH(make_communicator("auto", one, Device::cpu(), timeout),
                        Catch::Contains("--dist-timeout: expected seconds in (0, 604800]"));
  Launch two;
  two.world_size = 2;
  two.rank = 1;
  two.launcher = "OMPI_COMM_WORLD_SIZE";
  REQUIRE_THROWS_WITH(make_communicator("single", two, Device::cpu()), Catch::Contains("cannot join them"));
  if (!built_with_mpi())
    REQUIRE_THROWS_WITH(make_communicator("auto", two, Device::cpu()), Catch::Contains("built without MPI"));
}

TEST_CASE("dist: a batch's micro-batches are the batch, bit for bit, augmentation included", "[dist][data]") {
  const int64_t n = 96;
  std::vector<uint8_t> px(static_cast<size_t>(n * 3 * 32 * 32));
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>((i * 2654435761u) >> 24);
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>(i % 10);
  Dataset d;
  d.images = Tensor::from_vector(px, {n, 3, 32, 32});
  d.labels = Tensor::from_vector(labels, {n});
  DataOptions data;
  AugmentOptions augment;
  augment.crop_padding = 4;
  augment.flip = true;
  augment.cutout = 8;
  data.augment = augment;
  std::vector<Device> devices{Device::cpu()};
  if (cuda_available()) devices.push_back(Device::cuda());
  for (const Device device : devices) {
    INFO(device.str());
    Loader loader(d, LoaderOptions::training(data, 32, 5), device);
    loader.start_epoch(1);
    REQUIRE(loader.advance());
    REQUIRE(loader.advance());  // the second batch: positions 32 .. 63 of the epoch
    Batch whole;
    loader.emit(whole);
    const std::vector<uint32_t> whole_bits = bits(whole.images);
    const std::vector<int32_t> whole_labels = whole.labels.values<int32_t>();
    const int64_t per_image = 3 * 32 * 32;
    for (const int64_t micro : {int64_t{8}, int64_t{16}}) {
      for (int64_t at = 0; at < 32; at += micro) {
        loader.select_micro_batch(at, micro);
        CHECK(loader.current_batch_size() == micro);
        Batch part;
        loader.emit(part);
        const std::vector<uint32_t> b = bits(part.images);
        CHECK(std::equal(b.begin(), b.end(), whole_bits.begin() + at * per_image));
        const std::vector<int32_t> l = part.labels.values<int32_t>();
        CHECK(std::equal(l.begin(), l.end(), whole_labels.begin() + at));
      }
    }
    REQUIRE_THROWS_WITH(loader.select_micro_batch(24, 16), Catch::Contains("not inside the current batch of 32"));
    // The next batch follows the whole one, whatever micro-batch was selected last.
    REQUIRE(loader.advance());
    CHECK(loader.current_batch_size() == 32);
    Batch next;
    loader.emit(next);
    loader.select_micro_batch(0, 32);
    Batch again;
    loader.emit(again);
    CHECK(bits(next.images) == bits(again.images));
  }
}

namespace {

// Two micro-batches of three gradients through GradientBuckets on `device` (on CUDA the buckets
// are reduced on the side stream), at three bucket sizes: each gradient's mean has the bits of
// the two micro-batches' sum times 1/2, and the tail's sum is the sum of the tails.
void check_gradient_buckets(Device device) {
  auto comm = make_single_process_communicator();
  const std::vector<int64_t> sizes{5, 300, 7};
  // Bucket bytes -> buckets: 0 one; 1 one per parameter; 1000: the last two (28 + 1200 bytes, in
  // reverse order) fill one, the first another.
  for (const auto& [bucket_bytes, expected] : std::vector<std::pair<int64_t, int>>{{0, 1}, {1, 3}, {1000, 2}}) {
    INFO("bucket_bytes " << bucket_bytes);
    std::vector<Tensor> params;
    for (int64_t n : sizes) {
      Tensor p = Tensor::zeros({n}, DType::Float32, device);
      p.set_requires_grad(true);
      params.push_back(p);
    }
    GradientBuckets buckets(*comm, params, 3, 2, bucket_bytes, device);
    CHECK(buckets.buckets() == expected + 1);  // and the tail
    CHECK(buckets.serves(params, 3));
    CHECK_FALSE(buckets.serves({params[0], params[1]}, 3));
    CHECK_FALSE(buckets.serves(params, 4));
    std::vector<std::vector<Tensor>> grads(2);
    for (int64_t j = 0; j < 2; ++j) {
      for (size_t k = 0; k < params.size(); ++k) {
        // Values whose float sums round: the mean's bits tell a wrong pairing apart.
        grads[j].push_back(test::random_tensor({sizes[k]}, 500 + 10 * j + k, -1e4f, 1e4f, device));
        if (params[k].grad().defined()) params[k].grad().zero_();
        autograd::backward(params[k], grads[j][k]);
      }
      buckets.tail_row(j).copy_(Tensor::from_vector(std::vector<float>{1.5f + j, 2.5f, 100.f * j}, {3}, device));
      if (j == 0) {
        buckets.pack(0);
        continue;
      }
      for (size_t k = params.size(); k-- > 0;) buckets.gradient_complete(params[k].impl(), 1);
      buckets.finish(1);
    }
    buckets.write_mean_gradients(0.5f);
    for (size_t k = 0; k < params.size(); ++k) {
      INFO("parameter " << k);
      CHECK(bits(params[k].grad()) == bits(mul(add(grads[0][k], grads[1][k]), 0.5f)));
    }
    CHECK(buckets.tail_sum().to_vector() == std::vector<float>{4.f, 5.f, 100.f});
  }
}

}  // namespace

TEST_CASE("dist: gradient buckets give each gradient the ordered sum's bits, whatever the buckets", "[dist]") {
  check_gradient_buckets(Device::cpu());
}

TEST_CASE("dist: gradient buckets reduced on the side stream give the ordered sum's bits", "[dist][cuda]") {
  MINIDL_REQUIRE_CUDA();
  check_gradient_buckets(Device::cuda());
  // The side stream's work may not allocate: the caching allocator's reuse is only safe on one stream.
  SideStream side(Device::cuda());
  CHECK_THROWS_WITH(side.run([] { Tensor::empty({4}, DType::Float32, Device::cuda()); }),
                    Catch::Contains("must be allocated beforehand"));
  const Tensor after = Tensor::zeros({4}, DType::Float32, Device::cuda());  // and after it, it may again
  CHECK(after.to_vector() == std::vector<float>(4, 0.f));
}
