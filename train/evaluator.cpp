#include "train/evaluator.h"

#include <algorithm>

#include "core/allocator.h"
#include "core/autograd.h"
#include "core/device.h"
#include "core/error.h"
#include "core/tensor_ops.h"
#include "layers/loss/dice.h"
#include "layers/loss/loss.h"
#include "train/training_loss.h"

namespace minidl {

namespace {

// A token set's labels: each window's tokens after the first, in window order.
std::vector<int32_t> window_targets(const Dataset& data) {
  const int64_t t = data.seq_len;
  const std::vector<int32_t> windows = data.images.to(Device::cpu()).values<int32_t>();
  std::vector<int32_t> targets;
  targets.reserve(static_cast<size_t>(data.size() * t));
  for (int64_t i = 0; i < data.size(); ++i)
    targets.insert(targets.end(), windows.begin() + i * (t + 1) + 1, windows.begin() + (i + 1) * (t + 1));
  return targets;
}

// Eager batches before a capture: the first makes cuDNN choose its algorithms and fills the
// allocator's cache.
constexpr int kEvalGraphWarmup = 1;

}  // namespace

Evaluator::Evaluator(Module& model, Forward forward, const TrainConfig& config, const DataOptions& data, Device device,
                     RunContext& context, int64_t num_classes, const Dataset& test_set, const Dataset& val_set)
    : model_(model),
      forward_(std::move(forward)),
      config_(config),
      data_(data),
      device_(device),
      context_(context),
      num_classes_(num_classes) {
  make_split(test_, test_set);
  if (val_set.size() > 0) make_split(val_, val_set);
}

Evaluator::~Evaluator() = default;

void Evaluator::make_split(EvalSplit& e, const Dataset& data) {
  e.loader = std::make_unique<Loader>(data, LoaderOptions::evaluation(data_, config_.eval_batch_size), device_);
  e.per_sample = data.outputs_per_sample();
  e.volumes = data.is_volumes();
  const size_t batches = static_cast<size_t>(e.loader->batches_per_epoch());
  e.losses = allocate_pinned(batches * sizeof(float));
  if (e.volumes) {
    // A volume's predictions stay on the device: each batch leaves its Dice counts only.
    e.dice_counts = allocate_pinned(batches * static_cast<size_t>(num_classes_ * 3) * sizeof(int32_t));
    return;
  }
  e.labels = data.is_tokens() ? window_targets(data) : data.labels.to(Device::cpu()).values<int32_t>();
  const size_t n = e.labels.size();
  e.predicted = allocate_pinned(n * sizeof(int32_t));
  e.tta_predicted = allocate_pinned(n * sizeof(int32_t));
}

Evaluator::Outputs Evaluator::device_eval(TtaMode tta, const Loader& loader, bool volumes) {
  Batch batch;
  loader.emit(batch);
  Tensor logits = forward_(batch.images).to(DType::Float32);
  Outputs out;
  out.loss = training_loss(config_, logits, batch.labels);
  if (volumes) {
    out.dice_counts = dice_counts(logits, batch.labels);
    return out;
  }
  out.predicted = argmax_rows(logits);
  const std::vector<TtaView> v = views(tta);
  if (v.size() > 1) out.tta_predicted = argmax_rows(tta_logits(forward_, batch.images, logits, v));
  return out;
}

void Evaluator::add_dice(Result& r, const int32_t* counts, int64_t batches, int64_t voxels) const {
  const int64_t k = num_classes_;
  DiceScores scores(k);
  int64_t correct = 0;
  for (int64_t b = 0; b < batches; ++b) {
    const int32_t* c = counts + b * k * 3;
    scores.add(Tensor::from_vector(std::vector<int32_t>(c, c + k * 3), {k, 3}));
    for (int64_t j = 0; j < k; ++j) correct += c[3 * j];  // a voxel predicted and labelled j is right
  }
  r.acc = 100.0 * static_cast<double>(correct) / static_cast<double>(voxels);
  r.dice = scores.mean();
  for (int64_t j = 0; j < k; ++j) r.class_dice.push_back(scores.dice(j));
}

double Evaluator::mean_loss(const float* batch_losses, int64_t batches, int64_t batch_size, int64_t images) {
  double sum = 0;
  for (int64_t b = 0; b < batches; ++b)
    sum += static_cast<double>(batch_losses[b]) * static_cast<double>(std::min(batch_size, images - b * batch_size));
  return sum / static_cast<double>(images);
}

Evaluator::Result Evaluator::evaluate(TtaMode tta, Split split, const Progress& progress) {
  MINIDL_CHECK(split != Split::Train, "evaluate: the training split is not evaluated");
  MINIDL_CHECK(split == Split::Test || has_validation(), "evaluate: the data has no validation split (set ",
               "data.val_fraction)");
  EvalSplit& e = split == Split::Val ? val_ : test_;
  if (tta != TtaMode::None && config_.tta_share < 1) return evaluate_selective(tta, split, *e.loader);
  const RunContextScope scope(context_);
  autograd::NoGradGuard no_grad;
  model_.eval();
  Loader& loader = *e.loader;
  const int64_t batches = loader.batches_per_epoch();
  if (!e.graph || e.graph_tta != tta) {
    e.graph =
        std::make_unique<StepGraph>("evaluation batch", config_.cuda_graph && device_.is_cuda(), kEvalGraphWarmup);
    e.graph_tta = tta;
  }
  int32_t* predicted = static_cast<int32_t*>(e.predicted.get());
  int32_t* tta_predicted = static_cast<int32_t*>(e.tta_predicted.get());
  float* losses = static_cast<float*>(e.losses.get());
  loader.start_epoch(0);
  int64_t seen = 0;
  for (int64_t b = 0; loader.advance(); ++b) {
    // The last, shorter batch runs eagerly: a graph holds the shapes of its capture.
    const int64_t size = loader.current_batch_size();
    Outputs out;
    if (size == loader.options().batch_size) {
      e.graph->run([&] { e.graph_outputs = device_eval(tta, loader, e.volumes); }, [] {});
      out = e.graph_outputs;
    } else {
      out = device_eval(tta, loader, e.volumes);
    }
    copy_bytes_async(losses + b, Device::cpu(), out.loss.raw_data(), device_, sizeof(float));
    if (e.volumes) {
      const int64_t counts = num_classes_ * 3;
      copy_bytes_async(static_cast<int32_t*>(e.dice_counts.get()) + b * counts, Device::cpu(),
                       out.dice_counts.raw_data(), device_, static_cast<size_t>(counts) * sizeof(int32_t));
      seen += size;
      if (progress) progress(b + 1, batches);
      continue;
    }
    const size_t bytes = static_cast<size_t>(size * e.per_sample) * sizeof(int32_t);
    copy_bytes_async(predicted + seen * e.per_sample, Device::cpu(), out.predicted.raw_data(), device_, bytes);
    if (tta != TtaMode::None)
      copy_bytes_async(tta_predicted + seen * e.per_sample, Device::cpu(), out.tta_predicted.raw_data(), device_,
                       bytes);
    seen += size;
    if (progress) progress(b + 1, batches);
  }
  synchronize(device_);
  model_.train();
  const int64_t k = num_classes_;
  Result r;
  r.images = seen;
  r.loss = mean_loss(losses, batches, loader.options().batch_size, seen);
  if (e.volumes) {
    add_dice(r, static_cast<const int32_t*>(e.dice_counts.get()), batches, seen * e.per_sample);
    return r;
  }
  // A vocabulary's confusion matrix (50257^2 counts for GPT-2) says nothing a person reads.
  const bool confusion = e.per_sample == 1;
  if (confusion) r.confusion.assign(static_cast<size_t>(k * k), 0);
  int64_t correct = 0, correct_tta = 0;
  const int32_t* counted = tta != TtaMode::None ? tta_predicted : predicted;
  const int64_t outputs = seen * e.per_sample;
  for (int64_t i = 0; i < outputs; ++i) {
    const int32_t label = e.labels[static_cast<size_t>(i)];
    // A label out of range made the batch's loss NaN on a GPU (its error is raised by the next
    // kernel); it must not index the counts.
    MINIDL_CHECK(label >= 0 && label < k, "evaluation: ", split_name(split), " image ", i, " has label ", label,
                 " (expected 0..", k - 1, ")");
    correct += predicted[i] == label ? 1 : 0;
    if (tta != TtaMode::None) correct_tta += tta_predicted[i] == label ? 1 : 0;
    if (confusion) r.confusion[static_cast<size_t>(label * k + counted[i])] += 1;
  }
  r.acc = 100.0 * static_cast<double>(correct) / static_cast<double>(outputs);
  if (tta != TtaMode::None) r.tta_acc = 100.0 * static_cast<double>(correct_tta) / static_cast<double>(outputs);
  return r;
}

}  // namespace minidl
