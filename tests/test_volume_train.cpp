// Volumes in `minidl train` (data.format "volumes"): the splits of the seeded set and the data
// keys; batches of the epoch's volumes in the batch's dtype and layout, micro-batches that are
// slices of the whole batch; cross-entropy per voxel against its float64 definition (loss and
// gradient, NCDHW, channels_last_3d and bf16); the loss types; the evaluation's Dice against
// DiceScores computed directly; [cuda]: the GPU's batches and voxel loss against the CPU's.
#include <cmath>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "core/half_types.h"
#include "data/datasets.h"
#include "data/loader.h"
#include "data/volumes.h"
#include "layers/loss/dice.h"
#include "layers/loss/loss.h"
#include "tests/test_util.h"
#include "train/config.h"
#include "train/trainer.h"
#include "train/training_loss.h"

using namespace minidl;
using namespace minidl::test;

namespace {

nlohmann::json volume_data(int64_t train, int64_t test) {
  return {{"format", "volumes"}, {"size", 8},         {"classes", 3},           {"objects", 2},
          {"noise", 0.05},       {"volume_seed", 5u}, {"train_volumes", train}, {"test_volumes", test}};
}

std::vector<float> floats(const Tensor& t) { return t.to(Device::cpu()).to_vector(); }
std::vector<int32_t> ints(const Tensor& t) { return t.to(Device::cpu()).values<int32_t>(); }

// The bf16 rounding of each value.
std::vector<float> bf16_rounded(std::vector<float> v) {
  for (float& x : v) x = to_float(to_bf16(x));
  return v;
}

// Volume `index`'s values of (N, ...) values in the shape's order, per_volume each.
std::vector<float> volume_values(const std::vector<float>& all, int64_t index, int64_t per_volume) {
  return {all.begin() + index * per_volume, all.begin() + (index + 1) * per_volume};
}

// Cross-entropy per voxel in float64: logits (N, C, S) in NC(S) order; the mean loss and its
// gradient (softmax - onehot) / (N * S).
double reference_voxel_loss(const std::vector<float>& x, const std::vector<int32_t>& t, int64_t n, int64_t c, int64_t s,
                            std::vector<double>& grad) {
  grad.assign(x.size(), 0);
  double sum = 0;
  const double rows = static_cast<double>(n * s);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t v = 0; v < s; ++v) {
      double m = -1e300, z = 0;
      for (int64_t k = 0; k < c; ++k) m = std::max(m, static_cast<double>(x[(i * c + k) * s + v]));
      for (int64_t k = 0; k < c; ++k) z += std::exp(x[(i * c + k) * s + v] - m);
      const int32_t label = t[i * s + v];
      sum += m + std::log(z) - x[(i * c + label) * s + v];
      for (int64_t k = 0; k < c; ++k)
        grad[(i * c + k) * s + v] = (std::exp(x[(i * c + k) * s + v] - m) / z - (k == label ? 1.0 : 0.0)) / rows;
    }
  return sum / rows;
}

// The loader's second batch of `epoch`.
Batch second_batch(Loader& loader, int64_t epoch) {
  loader.start_epoch(epoch);
  for (int i = 0; i < 2; ++i) REQUIRE(loader.advance());
  Batch b;
  loader.emit(b);
  return b;
}

// The per-voxel cross-entropy of x (on its device) and its gradient, on the host.
std::pair<float, std::vector<float>> loss_and_gradient(const Tensor& x, const Tensor& labels) {
  Tensor a = x.clone();
  a.set_requires_grad(true);
  const Tensor loss = cross_entropy(a, labels.to(x.device()));
  autograd::backward(loss, Tensor::full({1}, 1.f, x.device()));
  return {loss.to(Device::cpu()).item(), floats(a.grad())};
}

}  // namespace

TEST_CASE("a volume set: training volumes 0..N-1, test volumes N..N+M-1 of the seeded set", "[loader][volumes]") {
  DataOptions o = DataOptions::from_json(volume_data(6, 3), "data");
  REQUIRE(o.format == DataFormat::Volumes);
  REQUIRE(o.volumes.size == 8);
  REQUIRE(o.volumes.seed == 5);
  const Dataset train = load_dataset(o, Split::Train), test = load_dataset(o, Split::Test);
  REQUIRE(train.is_volumes());
  REQUIRE(train.size() == 6);
  REQUIRE(train.outputs_per_sample() == 512);
  REQUIRE(train.classes == std::vector<std::string>{"background", "class 1", "class 2"});
  const VolumeBatch first = synthetic_volumes(o.volumes, 0, 6), next = synthetic_volumes(o.volumes, 6, 3);
  REQUIRE(floats(train.images) == floats(first.images));
  REQUIRE(ints(train.labels) == ints(first.labels));
  REQUIRE(test.size() == 3);
  REQUIRE(floats(test.images) == floats(next.images));
  REQUIRE(ints(test.labels) == ints(next.labels));
  o.train_limit = 4;
  REQUIRE(load_dataset(o, Split::Train).size() == 4);
  REQUIRE(DataOptions::from_json(volume_data(6, 3), "data").to_json() == nlohmann::json({{"format", "volumes"},
                                                                                         {"train_limit", 0},
                                                                                         {"train_volumes", 6},
                                                                                         {"test_volumes", 3},
                                                                                         {"size", 8},
                                                                                         {"classes", 3},
                                                                                         {"objects", 2},
                                                                                         {"noise", 0.05},
                                                                                         {"volume_seed", 5}}));

  auto refused = [](const char* key, const nlohmann::json& value) {
    nlohmann::json j = volume_data(6, 3);
    j[key] = value;
    return [j] { DataOptions::from_json(j, "data"); };
  };
  REQUIRE_THROWS_WITH(refused("mean", {0.5, 0.5, 0.5})(),
                      Catch::Contains("data.mean: not for \"format\": \"volumes\""));
  REQUIRE_THROWS_WITH(refused("dir", "x")(), Catch::Contains("data.dir: not for \"format\": \"volumes\""));
  REQUIRE_THROWS_WITH(refused("augment", {{"flip", true}})(), Catch::Contains("data.augment: not for"));
  REQUIRE_THROWS_WITH(refused("val_fraction", 0.1)(), Catch::Contains("data.val_fraction: not for a volume set"));
  REQUIRE_THROWS_WITH(refused("size", 7)(), Catch::Contains("data.size"));
  REQUIRE_THROWS_WITH(refused("classes", 1)(), Catch::Contains("data.classes"));
  REQUIRE_THROWS_WITH(DataOptions::from_json({{"size", 8}}, "data"),
                      Catch::Contains("data.size: only for \"format\": \"volumes\""));
}

TEST_CASE("volume batches: the epoch's volumes in the batch's dtype and layout, micro-batches their slices",
          "[loader][volumes]") {
  const DataOptions o = DataOptions::from_json(volume_data(8, 3), "data");
  const Dataset d = load_dataset(o, Split::Train);
  const std::vector<float> images = floats(d.images);
  const std::vector<int32_t> labels = ints(d.labels);
  for (const bool half : {false, true}) {
    INFO((half ? "bf16 channels_last_3d" : "float32 NCDHW"));
    LoaderOptions lo = LoaderOptions::training(o, 4, 11);
    if (half) {
      lo.dtype = DType::BFloat16;
      lo.format = MemoryFormat::ChannelsLast;  // the run's channels-last: NDHWC for volumes
    }
    const std::vector<int32_t> order = epoch_permutation(11, 1, 8);
    Loader train(d, lo, Device::cpu());
    REQUIRE(train.batches_per_epoch() == 2);
    const Batch whole = second_batch(train, 1);
    REQUIRE(whole.images.shape() == Shape{4, 1, 8, 8, 8});
    REQUIRE(whole.images.dtype() == (half ? DType::BFloat16 : DType::Float32));
    REQUIRE(whole.images.memory_format() == (half ? MemoryFormat::ChannelsLast3d : MemoryFormat::Contiguous));
    REQUIRE(whole.labels.shape() == Shape{4, 8, 8, 8});
    const std::vector<float> x = floats(whole.images);
    const std::vector<int32_t> y = ints(whole.labels);
    for (int64_t b = 0; b < 4; ++b) {
      const int64_t volume = order[static_cast<size_t>(4 + b)];
      const std::vector<float> want = volume_values(images, volume, 512);
      REQUIRE(volume_values(x, b, 512) == (half ? bf16_rounded(want) : want));
      REQUIRE(std::vector<int32_t>(y.begin() + b * 512, y.begin() + (b + 1) * 512) ==
              std::vector<int32_t>(labels.begin() + volume * 512, labels.begin() + (volume + 1) * 512));
    }
    train.select_micro_batch(2, 2);
    Batch micro;
    train.emit(micro);
    REQUIRE(micro.images.shape() == Shape{2, 1, 8, 8, 8});
    REQUIRE(floats(micro.images) == std::vector<float>(x.begin() + 1024, x.end()));
    REQUIRE(ints(micro.labels) == std::vector<int32_t>(y.begin() + 1024, y.end()));
  }
  const Dataset test = load_dataset(o, Split::Test);
  Loader eval(test, LoaderOptions::evaluation(o, 2), Device::cpu());
  eval.start_epoch(0);
  Batch b;
  int64_t seen = 0;
  while (eval.next(b)) seen += b.images.size(0);
  REQUIRE(seen == 3);
  REQUIRE(b.labels.shape() == Shape{1, 8, 8, 8});
}

TEST_CASE("cross_entropy per voxel is the mean of each voxel's cross-entropy, in every layout", "[loss][volumes]") {
  const int64_t n = 2, c = 3;
  for (const Shape& spatial : {Shape{3, 4, 5}, Shape{4, 6}}) {
    Shape shape{n, c};
    shape.insert(shape.end(), spatial.begin(), spatial.end());
    Shape label_shape{n};
    label_shape.insert(label_shape.end(), spatial.begin(), spatial.end());
    const int64_t s = shape_numel(spatial);
    const Tensor labels = random_ids(label_shape, static_cast<int32_t>(c), 3);
    const Tensor x = random_tensor(shape, 4, -3.f, 3.f);
    std::vector<double> grad;
    const double want = reference_voxel_loss(x.to_vector(), labels.values<int32_t>(), n, c, s, grad);
    for (const bool last : {false, true}) {
      INFO(shape_str(shape) << (last ? " channels-last" : " contiguous"));
      Tensor a = last ? x.to(channels_last_for(x.dim())) : x.clone();
      a.set_requires_grad(true);
      const Tensor loss = cross_entropy(a, labels);
      CHECK(loss.item() == Approx(want).epsilon(1e-6));
      autograd::backward(loss, Tensor::full({1}, 1.f));
      REQUIRE(a.grad().memory_format() == a.memory_format());
      require_close(a.grad().to_vector(), grad, 1e-5, 1e-9, "dlogits");
      REQUIRE(count_correct(a.detach(), labels) == [&] {
        const std::vector<float> v = x.to_vector();
        const std::vector<int32_t> t = labels.values<int32_t>();
        int64_t right = 0;
        for (int64_t i = 0; i < n; ++i)
          for (int64_t p = 0; p < s; ++p) {
            int64_t best = 0;
            for (int64_t k = 1; k < c; ++k)
              if (v[(i * c + k) * s + p] > v[(i * c + best) * s + p]) best = k;
            right += best == t[i * s + p] ? 1 : 0;
          }
        return right;
      }());
    }
  }
  // bf16 logits: the loss of their float32 values.
  const Tensor labels = random_ids({2, 4, 4, 4}, 3, 5);
  const Tensor h = random_tensor({2, 3, 4, 4, 4}, 6, -2.f, 2.f).to(DType::BFloat16, MemoryFormat::ChannelsLast3d);
  CHECK(cross_entropy(h, labels).item() == cross_entropy(h.to(DType::Float32), labels).item());
  REQUIRE_THROWS_WITH(cross_entropy(h, random_ids({2, 4, 4}, 3, 5)),
                      Catch::Contains("cross_entropy: logits (2, 3, 4, 4, 4) take int32 labels (2, 4, 4, 4)"));
  REQUIRE_THROWS_WITH(cross_entropy(random_tensor({1, 3, 2, 2, 2}, 1), random_ids({1, 2, 2, 2}, 4, 1)),
                      Catch::Contains("out of range for 3 classes"));
}

TEST_CASE("loss.type: cross_entropy, dice, and dice_ce = dice + cross_entropy", "[loss][volumes]") {
  const Tensor logits = random_tensor({2, 3, 4, 4, 4}, 7, -2.f, 2.f);
  const Tensor labels = random_ids({2, 4, 4, 4}, 3, 8);
  TrainConfig c;
  c.label_smoothing = 0.1;
  c.loss_type = LossType::CrossEntropy;
  const float ce = training_loss(c, logits, labels).item();
  CHECK(ce == cross_entropy(logits, labels, 0.1f).item());
  c.loss_type = LossType::Dice;
  const float dice = training_loss(c, logits, labels).item();
  CHECK(dice == dice_loss(logits, labels).item());
  c.loss_type = LossType::DiceCe;
  CHECK(training_loss(c, logits, labels).item() == dice + ce);
  // The gradient of the sum is the sum of the gradients.
  Tensor a = logits.clone(), b = logits.clone();
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  autograd::backward(training_loss(c, a, labels), Tensor::full({1}, 1.f));
  autograd::backward(dice_loss(b, labels), Tensor::full({1}, 1.f));
  autograd::backward(cross_entropy(b, labels, 0.1f), Tensor::full({1}, 1.f));
  require_close(a.grad().to_vector(), b.grad().to_vector(), 1e-6, 1e-9, "dice_ce gradient");
}

TEST_CASE("a segmentation run's evaluation: DiceScores over every test voxel", "[loader][volumes]") {
  const nlohmann::json layers = {
      {{"type", "Conv3d"}, {"in_channels", 1}, {"out_channels", 4}, {"kernel_size", 3}, {"padding", 1}},
      {{"type", "GroupNorm"}, {"num_groups", 2}, {"num_channels", 4}, {"relu", true}},
      {{"type", "Conv3d"}, {"in_channels", 4}, {"out_channels", 3}, {"kernel_size", 1}}};
  nlohmann::json config = {{"seed", 3u},
                           {"device", "cpu"},
                           {"batch_size", 4},
                           {"data", volume_data(8, 5)},
                           {"model", {{"layers", layers}}},
                           {"loss", {{"type", "dice_ce"}}},
                           {"optimizer", {{"type", "AdamW"}, {"lr", 0.01}}},
                           {"eval", {{"batch_size", 2}}}};
  const TrainConfig c = parse_train_config(config);
  const DataOptions o = DataOptions::from_json(c.data, "data");
  const Dataset train = load_dataset(o, Split::Train), test = load_dataset(o, Split::Test);
  Trainer trainer(c, Device::cpu(), train, test);
  REQUIRE(trainer.output_width() == 3);
  REQUIRE(trainer.outputs_per_sample() == 512);
  trainer.train_loader().start_epoch(0);
  Trainer::StepRecord record{};
  REQUIRE(trainer.train_step(0, &record));
  const Trainer::EvalResult r = trainer.evaluate(TtaMode::None);
  REQUIRE(r.images == 5);
  REQUIRE(r.confusion.empty());

  // The same numbers from the model's logits of all five volumes at once.
  trainer.model().eval();
  Tensor logits;
  {
    autograd::NoGradGuard no_grad;
    logits = trainer.model()(test.images);
  }
  trainer.model().train();
  DiceScores scores(3);
  scores.add(dice_counts(logits, test.labels));
  REQUIRE(r.dice == scores.mean());
  REQUIRE(r.class_dice.size() == 3);
  for (int64_t k = 0; k < 3; ++k) {
    if (std::isnan(scores.dice(k)))
      REQUIRE(std::isnan(r.class_dice[static_cast<size_t>(k)]));
    else
      REQUIRE(r.class_dice[static_cast<size_t>(k)] == scores.dice(k));
  }
  REQUIRE(r.acc == Approx(100.0 * static_cast<double>(count_correct(logits, test.labels)) / (5.0 * 512)));
  // The mean of the batches' dice_ce losses, weighted by their volumes (2, 2, 1).
  double loss = 0;
  for (int64_t first : {0, 2, 4}) {
    const int64_t count = first == 4 ? 1 : 2;
    const VolumeBatch v = synthetic_volumes(o.volumes, 8 + first, count);
    autograd::NoGradGuard no_grad;
    trainer.model().eval();
    loss +=
        static_cast<double>(training_loss(c, trainer.model()(v.images), v.labels).item()) * static_cast<double>(count);
    trainer.model().train();
  }
  REQUIRE(r.loss == Approx(loss / 5).epsilon(1e-6));

  // A model whose output is not one logit per class and voxel, TTA on volumes, Dice on images.
  config["model"]["layers"][2]["out_channels"] = 2;
  REQUIRE_THROWS_WITH(Trainer(parse_train_config(config), Device::cpu(), train, test),
                      Catch::Contains("segmentation needs (1, 3, 8, 8, 8) logits"));
  config["model"]["layers"][2]["out_channels"] = 3;
  config["eval"]["tta"] = "flip";
  REQUIRE_THROWS_WITH(Trainer(parse_train_config(config), Device::cpu(), train, test),
                      Catch::Contains("eval.tta: the views of \"flip\" are of 2-d images"));
}

TEST_CASE("volume batches and the voxel cross-entropy on CUDA match the CPU", "[loader][volumes][cuda]") {
  MINIDL_REQUIRE_CUDA();
  const DataOptions o = DataOptions::from_json(volume_data(8, 3), "data");
  const Dataset d = load_dataset(o, Split::Train);
  for (const DType dtype : {DType::Float32, DType::BFloat16, DType::Float16})
    for (const MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      INFO(dtype_name(dtype) << " " << memory_format_name(format));
      LoaderOptions lo = LoaderOptions::training(o, 4, 11);
      lo.dtype = dtype;
      lo.format = format;
      Loader cpu(d, lo, Device::cpu()), gpu(d, lo, Device::cuda());
      Batch a = second_batch(cpu, 3), b = second_batch(gpu, 3);
      REQUIRE(b.images.memory_format() == a.images.memory_format());
      REQUIRE(floats(b.images) == floats(a.images));
      REQUIRE(ints(b.labels) == ints(a.labels));
      cpu.select_micro_batch(1, 2);
      gpu.select_micro_batch(1, 2);
      cpu.emit(a);
      gpu.emit(b);
      REQUIRE(floats(b.images) == floats(a.images));
      REQUIRE(ints(b.labels) == ints(a.labels));
    }
  const Tensor labels = random_ids({2, 16, 16, 16}, 4, 9);
  for (const bool last : {false, true}) {
    Tensor x = random_tensor({2, 4, 16, 16, 16}, 10, -3.f, 3.f);
    if (last) x = x.to(MemoryFormat::ChannelsLast3d);
    const auto [cpu_loss, cpu_grad] = loss_and_gradient(x, labels);
    const auto [gpu_loss, gpu_grad] = loss_and_gradient(x.to(Device::cuda()), labels);
    CHECK(std::fabs(cpu_loss - gpu_loss) <= 1e-5);
    require_close(gpu_grad, cpu_grad, 1e-4, 1e-9, "dlogits");
    REQUIRE(ints(correct_predictions(x.to(Device::cuda()), labels.to(Device::cuda()))) ==
            ints(correct_predictions(x, labels)));
  }
}
