// Synchronized BatchNorm (sync_batch_norm, BatchNorm2d "sync"): the rank-ordered merge of the
// ranks' shifted sums, and the op over ranks simulated in one process against batch_norm over the
// whole batch (y, dx, the summed dweight/dbias, the running statistics), on the CPU and on CUDA.
// tests/dist_test.sh runs it over MPI ranks in a real data-parallel run.
#include <cmath>
#include <memory>
#include <vector>

#include "core/allocator.h"
#include "core/autograd.h"
#include "core/error.h"
#include "layers/norm/batchnorm2d.h"
#include "layers/norm/norm.h"
#include "layers/norm/norm_math.h"
#include "layers/registry.h"
#include "test_util.h"

using namespace minidl;

namespace {

// `world` ranks in one process, run one after another. A rank's gather can only be answered once
// every rank has sent that gather's input, and an input is only right when every gather before it
// in that rank's pass was answered. So the ranks' passes are run again and again (run()): each
// round records the inputs that are right so far and fills what it cannot answer with the rank's
// own input, until a round answers every gather; that round's results are the synchronized ones.
class SimulatedRanks {
 public:
  explicit SimulatedRanks(int world) : world_(world) {
    group_ = std::make_shared<NormGroup>();
    group_->world_size = world;
    group_->all_gather = [this](const Tensor& in, Tensor& out) { gather(in, out); };
  }
  std::shared_ptr<const NormGroup> group() const { return group_; }

  // Runs pass(rank) for every rank, rounds until every gather was answered (a round per gather of
  // a pass, plus one).
  template <class Pass>
  void run(Pass&& pass) {
    for (int round = 0; round < 16; ++round) {
      bool answered = true;
      for (rank_ = 0; rank_ < world_; ++rank_) {
        call_ = 0;
        right_ = true;
        pass(rank_);
        answered = answered && right_;
      }
      if (answered) return;
    }
    FAIL("the simulated ranks did not settle");
  }

 private:
  void gather(const Tensor& in, Tensor& out) {
    REQUIRE(out.nbytes() == in.nbytes() * static_cast<size_t>(world_));
    if (sent_.size() <= call_) sent_.resize(call_ + 1, std::vector<Tensor>(static_cast<size_t>(world_)));
    std::vector<Tensor>& row = sent_[call_++];
    if (right_) row[static_cast<size_t>(rank_)] = in.clone();
    bool complete = true;
    for (const Tensor& t : row) complete = complete && t.defined();
    for (int r = 0; r < world_; ++r) {
      const Tensor& src = complete ? row[static_cast<size_t>(r)] : in;
      copy_bytes(static_cast<char*>(out.raw_data()) + static_cast<size_t>(r) * in.nbytes(), out.device(),
                 src.raw_data(), src.device(), in.nbytes());
    }
    right_ = right_ && complete;
  }

  int world_;
  int rank_ = 0;
  size_t call_ = 0;
  bool right_ = true;
  std::vector<std::vector<Tensor>> sent_;  // [gather][rank]: undefined until sent right
  std::shared_ptr<NormGroup> group_;
};

struct Outputs {
  std::vector<float> y, dx, dweight, dbias, running_mean, running_var;
};

// A batch (N = sum of rows, C, H, W) cut by samples into ranks of `rows[r]` samples: the whole
// batch through batch_norm, and each rank's share through sync_batch_norm (dweight and dbias
// summed over the ranks, y and dx put back in sample order).
struct SplitBatch {
  std::vector<int64_t> rows;
  int64_t c, h, w;
  DType dtype = DType::Float32;
  MemoryFormat format = MemoryFormat::Contiguous;
  Device device = Device::cpu();
  norm::NormActivation activation = norm::NormActivation::ReLU;

  int64_t n() const {
    int64_t s = 0;
    for (int64_t r : rows) s += r;
    return s;
  }
  int64_t sample() const { return c * h * w; }
  std::vector<float> x() const { return test::random_values(n() * sample(), 71, 3.f, 9.f); }
  std::vector<float> dy() const { return test::random_values(n() * sample(), 72); }
  // Float32 in the memory format: a half batch is cast from it (only float32 leaves take gradients).
  Tensor input(const std::vector<float>& v, int64_t first, int64_t count) const {
    const auto at = v.begin() + first * sample();
    return Tensor::from_vector(std::vector<float>(at, at + count * sample()), {count, c, h, w}, device).to(format);
  }

  // One pass of batch_norm (group null) or sync_batch_norm over samples [first, first + count).
  Outputs pass(const std::shared_ptr<const NormGroup>& group, int64_t first, int64_t count) const {
    const std::vector<float> xv = x(), dyv = dy();
    Tensor xi = input(xv, first, count);
    xi.set_requires_grad(true);
    Tensor weight = test::random_tensor({c}, 73, 0.5f, 1.5f, device), bias = test::random_tensor({c}, 74, -1, 1, device);
    weight.set_requires_grad(true);
    bias.set_requires_grad(true);
    Tensor rm = Tensor::zeros({c}, DType::Float32, device), rv = Tensor::full({c}, 2.f, device);
    const Tensor xd = xi.to(dtype);
    Tensor y = group ? sync_batch_norm(xd, rm, rv, weight, bias, group, 0.2, 1e-5, activation)
                     : batch_norm(xd, rm, rv, weight, bias, true, 0.2, 1e-5, activation);
    autograd::backward(y, input(dyv, first, count).to(dtype));
    return {y.to(DType::Float32).contiguous().to_vector(),
            xi.grad().to(DType::Float32).contiguous().to_vector(),
            weight.grad().to_vector(),
            bias.grad().to_vector(),
            rm.to_vector(),
            rv.to_vector()};
  }

  Outputs whole() const { return pass(nullptr, 0, n()); }

  Outputs synchronized() const {
    const int world = static_cast<int>(rows.size());
    SimulatedRanks ranks(world);
    std::vector<Outputs> per_rank(rows.size());
    ranks.run([&](int r) {
      int64_t first = 0;
      for (int q = 0; q < r; ++q) first += rows[static_cast<size_t>(q)];
      per_rank[static_cast<size_t>(r)] = pass(ranks.group(), first, rows[static_cast<size_t>(r)]);
    });
    Outputs all = per_rank[0];
    all.y.clear();
    all.dx.clear();
    for (size_t r = 0; r < per_rank.size(); ++r) {
      const Outputs& o = per_rank[r];
      all.y.insert(all.y.end(), o.y.begin(), o.y.end());
      all.dx.insert(all.dx.end(), o.dx.begin(), o.dx.end());
      if (r == 0) continue;
      for (size_t i = 0; i < o.dweight.size(); ++i) {
        all.dweight[i] += o.dweight[i];
        all.dbias[i] += o.dbias[i];
      }
      // Every rank updates the running statistics from the same merged moments.
      CHECK(o.running_mean == per_rank[0].running_mean);
      CHECK(o.running_var == per_rank[0].running_var);
    }
    return all;
  }
};

void check_close(const Outputs& got, const Outputs& want, double tolerance) {
  const std::vector<float> Outputs::*fields[] = {&Outputs::y,       &Outputs::dx,           &Outputs::dweight,
                                                 &Outputs::dbias,   &Outputs::running_mean, &Outputs::running_var};
  const char* names[] = {"y", "dx", "dweight", "dbias", "running_mean", "running_var"};
  for (int k = 0; k < 6; ++k) {
    INFO(names[k]);
    const std::vector<float>& a = got.*fields[k];
    const std::vector<float>& b = want.*fields[k];
    REQUIRE(a.size() == b.size());
    double scale = 0;
    for (float v : b) scale = std::max(scale, std::fabs(static_cast<double>(v)));
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
    CHECK(worst <= tolerance * std::max(scale, 1.0));
  }
}

void check_ranks_match_whole_batch(Device device) {
  for (const MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    for (const DType dtype : {DType::Float32, DType::BFloat16}) {
      if (dtype != DType::Float32 && !device.is_cuda()) continue;
      INFO("format " << (format == MemoryFormat::ChannelsLast ? "channels_last" : "contiguous") << ", dtype "
                     << dtype_name(dtype));
      // Uneven ranks (the merge weighs each by its count), and ranks large enough for the
      // per-block finalize of the three-launch kernels.
      for (const SplitBatch& base : {SplitBatch{{3, 5, 2}, 5, 4, 3}, SplitBatch{{16, 16}, 24, 32, 32}}) {
        for (const norm::NormActivation activation : {norm::NormActivation::ReLU, norm::NormActivation::GELU}) {
          SplitBatch b = base;
          b.dtype = dtype;
          b.format = format;
          b.device = device;
          b.activation = activation;
          INFO("ranks " << b.rows.size() << ", C " << b.c << ", " << b.h << "x" << b.w
                        << (activation == norm::NormActivation::GELU ? ", GELU" : ", ReLU"));
          check_close(b.synchronized(), b.whole(), dtype == DType::Float32 ? 2e-5 : 2e-2);
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("merged_moments: ranks' shifted sums merged in rank order give the whole batch's moments", "[norm][sync]") {
  const std::vector<int64_t> counts{7, 1, 12, 4};
  const std::vector<float> x = test::random_values(24, 81, 1000.f, 1000.5f);  // |mean| >> std
  std::vector<double> gathered;
  int64_t at = 0;
  for (int64_t n : counts) {
    const double k = x[static_cast<size_t>(at)];  // each rank shifts by its own first value
    double s1 = 0, s2 = 0;
    for (int64_t i = at; i < at + n; ++i) {
      s1 += x[static_cast<size_t>(i)] - k;
      s2 += (x[static_cast<size_t>(i)] - k) * (x[static_cast<size_t>(i)] - k);
    }
    gathered.insert(gathered.end(), {static_cast<double>(n), s1, s2, k});
    at += n;
  }
  double mean = 0, var = 0;
  for (float v : x) mean += v;
  mean /= 24;
  for (float v : x) var += (v - mean) * (v - mean);
  var /= 24;
  double count = 0;
  const norm::Moments m = norm::merged_moments(gathered.data(), 4, 1, 0, count);
  CHECK(count == 24);
  CHECK(std::fabs(m.mean - mean) <= 1e-12 * std::fabs(mean));
  CHECK(std::fabs(m.var - var) <= 1e-9 * var);

  double sa = 0, sb = 0;
  const std::vector<double> grads{3, 1.5, -2, 0, 5, 0.25, 4, 0};
  norm::merged_grad_sums(grads.data(), 2, 1, 0, count, sa, sb);
  CHECK(count == 8);
  CHECK(sa == 1.75);
  CHECK(sb == 2);
}

TEST_CASE("sync_batch_norm over ranks equals batch_norm over the whole batch (CPU)", "[norm][sync]") {
  check_ranks_match_whole_batch(Device::cpu());
}

TEST_CASE("sync_batch_norm over ranks equals batch_norm over the whole batch (CUDA)", "[norm][sync][cuda]") {
  MINIDL_REQUIRE_CUDA();
  check_ranks_match_whole_batch(Device::cuda());
}

TEST_CASE("sync_batch_norm gives the same bits on every run", "[norm][sync][cuda]") {
  MINIDL_REQUIRE_CUDA();
  SplitBatch b{{16, 16}, 24, 32, 32};
  b.device = Device::cuda();
  b.dtype = DType::BFloat16;
  b.format = MemoryFormat::ChannelsLast;
  const Outputs first = b.synchronized(), second = b.synchronized();
  CHECK(first.y == second.y);
  CHECK(first.dx == second.dx);
  CHECK(first.dweight == second.dweight);
  CHECK(first.running_var == second.running_var);
}

TEST_CASE("sync_batch_norm over one rank is batch_norm, bit for bit", "[norm][sync]") {
  SplitBatch b{{6}, 5, 4, 3};
  SimulatedRanks one(1);
  const Outputs synced = b.pass(one.group(), 0, 6), plain = b.whole();
  CHECK(synced.y == plain.y);
  CHECK(synced.dx == plain.dx);
  CHECK(synced.dweight == plain.dweight);
  CHECK(synced.running_mean == plain.running_mean);
  CHECK_THROWS_WITH(sync_batch_norm(Tensor::zeros({2, 5, 4, 3}), Tensor(), Tensor(), Tensor(), Tensor(), nullptr),
                    Catch::Contains("no group of ranks"));
}

TEST_CASE("BatchNorm2d \"sync\": read from JSON, printed back, plain without a group of ranks", "[norm][sync]") {
  const nlohmann::json spec = {{"type", "BatchNorm2d"}, {"num_features", 5}, {"sync", true}};
  std::shared_ptr<Module> m = build_layer(spec, "model.layers.0");
  auto* bn = dynamic_cast<BatchNorm2d*>(m.get());
  REQUIRE(bn != nullptr);
  CHECK(bn->sync());
  CHECK(bn->to_json().at("sync") == true);
  CHECK(bn->describe() == "BatchNorm2d 5 sync");
  CHECK_FALSE(BatchNorm2d(5).to_json().contains("sync"));  // a plain layer's config is unchanged
  CHECK_THROWS_WITH(build_layer({{"type", "BatchNorm2d"}, {"num_features", 5}, {"sync", "yes"}}, "model.layers.0"),
                    Catch::Contains("sync"));

  // Without a group (one process) the layer is BatchNorm2d: the same bits.
  BatchNorm2d plain(5);
  const Tensor x = test::random_tensor({4, 5, 3, 3}, 91);
  CHECK(bn->forward(x).to_vector() == plain.forward(x).to_vector());
  CHECK(bn->running_var.to_vector() == plain.running_var.to_vector());
}
