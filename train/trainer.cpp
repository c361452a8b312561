#include "train/trainer.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "core/allocator.h"
#include "core/autocast.h"
#include "core/autograd.h"
#include "core/device.h"
#include "core/error.h"
#include "core/settings.h"
#include "core/tensor_ops.h"
#include "data/datasets.h"
#include "data/holdout.h"
#include "data/image_folder.h"
#include "data/tta.h"
#include "distributed/communicator.h"
#include "layers/containers/sequential.h"
#include "layers/loss/loss.h"
#include "layers/norm/norm_path.h"
#include "layers/registry.h"
#include "layers/regularization/dropout.h"
#include "optim/named_params.h"
#include "train/checkpoint.h"
#include "train/init_from.h"
#include "train/precision.h"
#include "train/run_log.h"
#include "train/step_observer.h"
#include "train/step_work.h"
#include "train/text_format.h"
#include "train/training_loss.h"

namespace minidl {

std::string data_dir_for(const DataOptions& data) {
  if (!data.dir.empty() || data.format != DataFormat::Cifar10) return data.dir;
  const char* env = std::getenv("CIFAR10_DIR");
  MINIDL_CHECK(env && *env, "data.dir: no CIFAR-10 folder given; set data.dir in the config, pass --set "
               "data.dir=PATH, or set CIFAR10_DIR (scripts/data.sh makes one)");
  return env;
}

namespace {

// Eager steps before a capture: the first step makes cuDNN choose its algorithms and cuBLAS set
// up, and fills the allocator's cache; the second runs as every later step will.
constexpr int kTrainGraphWarmup = 2;
// A kind of training step (Trainer::step_kind): Lookahead::next_kind's 3 bits, a bit for a step
// of several micro-batches that reduces after backward though it could overlap (the benchmark's),
// the freeze phase above them.
constexpr int kLookaheadKinds = 8;
constexpr int kKindsPerPhase = 2 * kLookaheadKinds;

// The type the training batch is written in: the activation type where the model's first layer
// is one that autocast runs in it (its descriptor's AutocastRule::LowerPrecision: Conv2d,
// Linear), which would cast the float32 batch to the same values first; float32 otherwise (a
// first layer that runs in float32 must see the batch unrounded).
DType batch_dtype(const Module& model, DType activation) {
  const auto& layers = model.children();
  if (layers.empty()) return DType::Float32;
  const LayerDescriptor* first = find_layer(layers.front().second->type_name());
  return first && first->autocast == AutocastRule::LowerPrecision ? activation : DType::Float32;
}

// The context a run computes in: the config's switches and init seed.
RunContext run_context_for(const TrainConfig& config) {
  RunContext context;
  context.compute = {config.deterministic, config.allow_tf32};
  context.init_seed = config.seed;
  return context;
}

}  // namespace

Device setup_compute(TrainConfig& config) {
  set_compute_settings({config.deterministic, config.allow_tf32});
  const Device device = parse_device(config.device);
  config = resolve_for_device(config, device);
  return device;
}

TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides,
                              const std::string& device, const std::string& output_dir) {
  nlohmann::json j = read_json_file(path);
  for (const std::string& o : overrides) apply_override(j, o);
  TrainConfig c = parse_train_config(j);
  if (!device.empty()) c.device = device;
  if (!output_dir.empty()) c.output_dir = output_dir;
  return c;
}

std::shared_ptr<Module> build_model(const TrainConfig& config, Device device) {
  std::shared_ptr<Module> model = build_sequential(config.model.at("layers"), "model.layers", device);
  model->assign_paths();
  if (!config.norm_single_read) set_norm_single_read(*model, false);
  return model;
}

PreparedConfig prepare_config(const std::string& path, const std::vector<std::string>& overrides,
                              const std::string& device) {
  PreparedConfig p{load_train_config(path, overrides, device, ""), Device::cpu()};
  p.device = setup_compute(p.config);
  return p;
}

namespace {

Dataset load_split(const TrainConfig& config, Split split) {
  DataOptions data = DataOptions::from_json(config.data, "data");
  data.dir = data_dir_for(data);
  return load_dataset(data, split);
}

// An image folder's val/ split beside train/ and test/; none for other data.
Dataset load_val_folder(const TrainConfig& config) {
  const DataOptions data = DataOptions::from_json(config.data, "data");
  if (data.format != DataFormat::ImageFolder || !image_folder_has_val(data)) return Dataset();
  MINIDL_CHECK(
      data.val_fraction == 0, "data.val_fraction: the image folder '", data.dir, "' has a val/ split of its ",
      "own (beside train/ and test/), which is the validation split; leave val_fraction out, or move val/ away");
  return load_dataset(data, Split::Val);
}

std::string stats_text(const std::array<double, 3>& v) {
  return str("[", fixed(v[0], 4), ", ", fixed(v[1], 4), ", ", fixed(v[2], 4), "]");
}

}  // namespace

std::pair<Dataset, Dataset> load_datasets(const TrainConfig& config) {
  return {load_split(config, Split::Train), load_split(config, Split::Test)};
}

Trainer::Trainer(const TrainConfig& config, Device device, Weights weights)
    : Trainer(config, device, load_split(config, Split::Train), load_split(config, Split::Test),
              load_val_folder(config), weights) {}

Trainer::Trainer(const TrainConfig& config, Device device, Dataset train_set, Dataset test_set, Dataset val_set,
                 Weights weights)
    : config_(resolve_for_device(config, device)),
      context_(run_context_for(config)),
      dropout_state_(std::make_shared<DropoutState>(config.seed)),
      device_(device),
      data_options_(DataOptions::from_json(config.data, "data")),
      data_parallel_(config_.batch_size, config_.accumulate_steps, config_.bucket_mb, device),
      cuda_graphs_(false) {
  const RunContextScope scope(context_);
  activation_dtype_ = minidl::activation_dtype(*config_.precision);
  activation_format_ = *config_.memory_format;
  if (activation_dtype_ == DType::Float16) {
    grad_scaler_ = std::make_unique<GradScaler>(GradScalerOptions::from_json(config.grad_scaler, "grad_scaler"), device);
  }
  set_cuda_graphs(config.cuda_graph);
  model_ = build_model(config, device_);
  set_dropout_state(*model_, dropout_state_);
  model_->to(device_);

  if (data_options_.val_fraction > 0) {
    MINIDL_CHECK(val_set.size() == 0, "data.val_fraction: the data has a validation split of its own");
    HeldOut split = hold_out(train_set, data_options_.val_fraction, data_options_.val_seed);
    train_set_ = std::move(split.train);
    val_set_ = std::move(split.val);
  } else {
    train_set_ = std::move(train_set);
    val_set_ = std::move(val_set);
  }
  test_set_ = std::move(test_set);
  // The run's channels-last format is NDHWC (channels_last_3d) for volumes.
  if (train_set_.is_volumes() && is_channels_last_format(activation_format_))
    activation_format_ = MemoryFormat::ChannelsLast3d;
  MINIDL_CHECK(config_.tta == TtaMode::None || !train_set_.is_volumes(), "eval.tta: the views of \"",
               to_string(config_.tta), "\" are of 2-d images; volumes are evaluated plain (\"none\")");
  check_class_count();
  // "auto" normalization: the statistics of the images the run trains on (the held-out ones not
  // among them), computed once here; config.json records the numbers, so a resume reads them.
  Normalization& norm = data_options_.normalize;
  if (norm.auto_mean || norm.auto_std) {
    const ChannelStats stats = channel_stats(train_set_.images);
    if (norm.auto_mean) norm.mean = stats.mean;
    if (norm.auto_std) {
      for (int c = 0; c < 3; ++c)
        MINIDL_CHECK(stats.std[c] > 0, "data.std \"auto\": channel ", c, " of the ", train_set_.size(),
                     " training images is constant (standard deviation 0); give data.std as numbers");
      norm.std = stats.std;
    }
    normalization_note_ =
        str("normalization from the ", train_set_.size(), " training images (data.mean/std \"auto\"): ", "mean ",
            stats_text(norm.mean), ", std ", stats_text(norm.std));
    norm.auto_mean = norm.auto_std = false;
  }
  LoaderOptions train_options = LoaderOptions::training(data_options_, config.batch_size, config.seed);
  train_options.dtype = batch_dtype(*model_, activation_dtype_);
  train_options.format = activation_format_;
  train_loader_ = std::make_unique<Loader>(train_set_, train_options, device_);
  MINIDL_CHECK(train_loader_->batches_per_epoch() > 0, "batch_size ", config.batch_size, " is larger than the ",
               train_set_.size(), " training images: no full batch to train on");
  evaluator_ = std::make_unique<Evaluator>(
      *model_, [this](const Tensor& x) { return forward(x); }, config_, data_options_, device_, context_,
      output_width(), test_set_, val_set_);
  // ceil(epochs * steps per epoch): a fractional last epoch (9.9) stops part-way through.
  const double total = std::ceil(static_cast<double>(train_loader_->batches_per_epoch()) * config.epochs);
  MINIDL_CHECK(total < 9.0e15, "total steps (steps per epoch * epochs) = ", total, " is too large");
  total_steps_ = static_cast<int64_t>(total);

  const std::vector<NamedParam> params = named_parameters(*model_);
  for (const NamedParam& p : params) parameters_.push_back(p.tensor);
  if (config.grad_clip > 0) grad_clipper_ = std::make_unique<GradClipper>(config.grad_clip, parameters_, device_);
  apply_init_rules(config.init, params, [&](int64_t n) {
    // The first n training images, normalized and not augmented, as one batch.
    Loader first(train_set_, LoaderOptions::evaluation(data_options_, std::min(n, train_set_.size())), device_);
    first.start_epoch(0);
    Batch b;
    first.next(b);
    return b.images;
  });
  freeze_ = FreezeRules(config.freeze, params, steps_per_epoch());
  if (config.init_from.enabled() && weights == Weights::FromConfig) {
    const InitFromReport report = load_init_from(*model_, config.init_from);
    int64_t total = 0;
    for (const NamedParam& p : params) total += p.tensor.numel();
    const int64_t frozen = freeze_.frozen_elements(0);
    init_from_lines_ = minidl::init_from_lines(report, total - frozen, frozen);
  }
  optimizer_ = make_optimizer(config.optimizer, params, "optimizer");
  optimizer_->to(device_);
  if (!config.lookahead.is_null()) {
    std::vector<std::pair<std::string, Tensor>> averaged;
    for (auto& [name, t] : model_->state_dict())
      if (t.dtype() == DType::Float32) averaged.emplace_back(name, t);
    auto la = std::make_unique<Lookahead>(std::move(optimizer_), std::move(averaged),
                                          LookaheadOptions::from_json(config.lookahead, "lookahead"),
                                          steps_per_epoch(), total_steps());
    lookahead_ = la.get();
    optimizer_ = std::move(la);
  }
  if (grad_scaler_) optimizer_->set_skip_flag(grad_scaler_->found_inf_flag());
  schedule_ = make_schedule(config.schedule, "schedule");
}

uint32_t Trainer::training_data_crc32() const {
  if (!train_set_crc32_) train_set_crc32_ = dataset_crc32(train_set_);
  return *train_set_crc32_;
}

void Trainer::check_vocabulary() {
  MINIDL_CHECK(activation_format_ == MemoryFormat::Contiguous, "memory_format: a language model's activations are ",
               "(B, T, D), which have no channels_last layout; use \"contiguous\" or \"auto\"");
  MINIDL_CHECK(config_.tta == TtaMode::None, "eval.tta: \"", to_string(config_.tta),
               "\" augments images; a language model is evaluated on its val.bin windows as they are (use \"none\")");
  // The model's output for one window of zero ids, in eval mode without autograd (no state changes).
  const int64_t t = train_set_.seq_len;
  Tensor out;
  {
    autograd::NoGradGuard no_grad;
    model_->eval();
    try {
      out = forward(Tensor::zeros({1, t}, DType::Int32, device_));
    } catch (const Error& e) {
      model_->train();
      fail(str("model.layers: the model does not take the data's windows of ", t, " token ids: ", e.what()));
    }
    model_->train();
  }
  MINIDL_CHECK(out.dim() == 3 && out.size(1) == t, "model.layers: the model gives ", shape_str(out.shape()),
               " for one window of ", t, " token ids; a language model's loss needs (N, ", t,
               ", vocabulary) logits: end it with LMHead or a Linear layer over the vocabulary");
  output_width_ = out.size(2);
  int32_t top = -1;
  for (const Dataset* d : {&train_set_, &test_set_}) {
    const std::vector<int32_t> ids = d->images.values<int32_t>();
    for (int32_t id : ids) top = std::max(top, id);
  }
  MINIDL_CHECK(output_width_ > top, "model.layers: the model's output has ", output_width_,
               " values per token, but the data has token ", top, "; the vocabulary needs at least ", top + 1,
               " (set the embedding's num_embeddings and the head's width)");
}

void Trainer::check_segmentation() {
  // The model's output for one zero volume, in eval mode without autograd (no state changes).
  Shape shape = train_set_.images.shape();
  shape[0] = 1;
  const std::string volume = str(shape[1], "x", shape[2], "x", shape[3], "x", shape[4]);
  Tensor out;
  {
    autograd::NoGradGuard no_grad;
    model_->eval();
    try {
      out = forward(Tensor::zeros(shape, DType::Float32, device_));
    } catch (const Error& e) {
      model_->train();
      fail(str("model.layers: the model does not take the data's ", volume, " volumes: ", e.what()));
    }
    model_->train();
  }
  const int64_t classes = train_set_.num_classes();
  Shape want{1, classes};
  want.insert(want.end(), shape.begin() + 2, shape.end());
  MINIDL_CHECK(out.shape() == want, "model.layers: the model gives ", shape_str(out.shape()), " for one ", volume,
               " volume; segmentation needs ", shape_str(want), " logits (one per class and voxel: the data has ",
               classes, " classes; end the model with a Conv3d of out_channels ", classes, ")");
  classes_ = train_set_.classes;
}

void Trainer::check_class_count() {
  if (train_set_.is_tokens()) return check_vocabulary();
  if (train_set_.is_volumes()) return check_segmentation();
  // The model's output width, from one zero image in eval mode without autograd (no state changes).
  const Tensor& images = train_set_.images;
  MINIDL_CHECK(images.defined() && images.dim() == 4, "data: expected (N, C, H, W) images, got ",
               images.defined() ? images.str() : std::string("none"));
  int64_t width = 0;
  {
    autograd::NoGradGuard no_grad;
    model_->eval();
    const Tensor x = Tensor::zeros({1, images.size(1), images.size(2), images.size(3)}, DType::Float32, device_);
    Tensor out;
    try {
      out = forward(x);
    } catch (const Error& e) {
      model_->train();
      fail(str("model.layers: the model does not take the data's ", images.size(1), "x", images.size(2), "x",
               images.size(3), " images: ", e.what()));
    }
    model_->train();
    // Cross entropy takes (N, classes) logits: a model ending in a feature map (no pooling and
    // Linear head) is told so, with the shape it gives.
    MINIDL_CHECK(out.dim() == 2, "model.layers: the model gives ", shape_str(out.shape()), " for one ", images.size(1),
                 "x", images.size(2), "x", images.size(3), " image; the loss needs (N, classes) logits: end the model ",
                 "with a pooling layer (GlobalAvgPool2d or GlobalMaxPool2d), Flatten if needed, and a Linear layer");
    width = out.size(1);
  }
  if (train_set_.num_classes() > 0) {
    classes_ = train_set_.classes;
    const int64_t classes = num_classes();
    MINIDL_CHECK(width == classes, "model.layers: the model's output has ", width, " values per image, but the data (",
                 to_string(data_options_.format), ") has ", classes, " classes; set the last layer's out_features to ",
                 classes, " (e.g. --set model.layers.N.out_features=", classes, ")");
    return;
  }
  // Data sets made in memory carry no class names: the labels bound the class count from below.
  int32_t top = -1;
  for (const Dataset* d : {&train_set_, &test_set_, &val_set_}) {
    if (d->size() == 0) continue;
    const std::vector<int32_t> labels = d->labels.to(Device::cpu()).values<int32_t>();
    for (int32_t l : labels) top = std::max(top, l);
  }
  MINIDL_CHECK(width > top, "model.layers: the model's output has ", width, " values per image, but the data has ",
               "label ", top, "; the last layer needs at least ", top + 1, " outputs");
  for (int64_t i = 0; i < width; ++i) classes_.push_back(std::to_string(i));
}

nlohmann::json Trainer::resolved_config() const {
  nlohmann::json j = config_.to_json();
  j["model"] = {{"layers", std::static_pointer_cast<Sequential>(model_)->layers_json()}};
  j["optimizer"] = optimizer_->to_json();
  j["schedule"] = schedule_->to_json();
  j["data"] = data_options_.to_json();
  if (lookahead_) j["lookahead"] = lookahead_->options().to_json();
  if (grad_scaler_) j["grad_scaler"] = grad_scaler_->options().to_json();
  return j;
}

double Trainer::lr_at(int64_t step) const {
  return optimizer_->base_lr() * schedule_->factor(step, steps_per_epoch(), total_steps());
}

bool Trainer::train_step(int64_t step, StepRecord* record, StepObserver* observer) {
  const RunContextScope scope(context_);
  if (!train_loader_->advance()) return false;
  const bool several = data_parallel_.micro_batches() > 1;
  MINIDL_CHECK(!several || !observer, "the profiler times steps of one micro-batch; this run has ",
               data_parallel_.micro_batches(),
               " (world size x accumulate_steps): profile it with accumulate_steps 1 on one process");
  // Dropout draws read the step from the device (a graph replay too). Each micro-batch of a step
  // of several draws its own masks, keyed by its global index (DataParallel::dropout_step_of).
  // Each has a step word of its own (slot j), all queued here, before the step's device work.
  if (several) {
    const int64_t first = data_parallel_.first_micro_batch();
    for (int64_t j = 0; j < config_.accumulate_steps; ++j)
      dropout_state_->set_step(data_parallel_.dropout_step_of(step, first + j), device_, static_cast<int>(j));
  } else {
    dropout_state_->set_step(step, device_);
  }
  freeze_.apply(step);
  optimizer_->set_position({step, steps_per_epoch(), total_steps()});
  const double lr = lr_at(step);
  StepResults results;
  // The benchmark's timing of the reduction waits for the device inside the step: eager.
  if (observer || !cuda_graphs_ || (several && data_parallel_.reduction_timing().enabled)) {
    results = several ? data_parallel_step(step, false, lr) : device_step(false, lr, observer);
  } else {
    const int kind = step_kind(step);
    StepGraph& graph = train_graph(kind);
    // A replay runs apply() with the table of this prepare(); an eager step prepares after its
    // backward, as Optimizer::step does. Either way the same scalars reach the same kernels.
    const bool graphed = graph.next_run_graphed();
    if (graphed) optimizer_->prepare(lr);
    // The collectives a graph holds pass no host code when it replays: the host passes the
    // collective watch once for them all (distributed/communicator.h).
    if (graphed && several) data_parallel_.communicator().enter_graph("a graphed training step");
    // A failed capture ran the backward on the host only: the gradients it summed into were never
    // computed, so zero them again before the eager run; a step of several micro-batches also
    // starts its gradient buckets' bookkeeping again, which the capture left part-way.
    StepResults& kind_results = step_results_[kind];
    graph.run(
        [&] { kind_results = several ? data_parallel_step(step, graphed, lr) : device_step(graphed, lr, nullptr); },
        [&] {
          optimizer_->zero_grad();
          if (several) data_parallel_.restart_step();
        });
    results = kind_results;
  }
  copy_bytes_async(&record->loss, Device::cpu(), results.loss.raw_data(), device_, sizeof(float));
  copy_bytes_async(&record->correct, Device::cpu(), results.correct.raw_data(), device_, sizeof(int32_t));
  return true;
}

int Trainer::step_kind(int64_t step) const {
  const int serial_reduction = data_parallel_.serial_reduction() ? kLookaheadKinds : 0;
  return freeze_.phase(step) * kKindsPerPhase + (lookahead_ ? lookahead_->next_kind() : 0) + serial_reduction;
}

StepGraph& Trainer::train_graph(int kind) {
  auto it = train_graphs_.find(kind);
  if (it == train_graphs_.end()) {
    for (auto g = train_graphs_.begin(); g != train_graphs_.end();) {
      if (g->first / kKindsPerPhase != kind / kKindsPerPhase) {
        step_results_.erase(g->first);
        g = train_graphs_.erase(g);
      } else {
        ++g;
      }
    }
    if (!train_graph_pool_) train_graph_pool_ = std::make_shared<GraphMemoryPool>();
    it = train_graphs_.try_emplace(kind, "training step", true, kTrainGraphWarmup, train_graph_pool_).first;
  }
  return it->second;
}

int Trainer::captured_graphs() const {
  int captured = 0;
  for (const auto& [kind, graph] : train_graphs_) captured += graph.graphed() ? 1 : 0;
  return captured;
}

const StepGraph* Trainer::failed_graph() const {
  for (const auto& [kind, graph] : train_graphs_)
    if (graph.failed()) return &graph;
  return nullptr;
}

bool Trainer::steps_graphed() const { return !failed_graph() && captured_graphs() > 0; }

std::string Trainer::step_mode() const {
  if (const StepGraph* failed = failed_graph()) return failed->mode();
  const int captured = captured_graphs();
  if (captured == 0) return "eager";
  return captured == 1 ? "CUDA graph" : str("CUDA graph (", captured, " kinds of step)");
}

Trainer::StepResults Trainer::device_step(bool prepared, double lr, StepObserver* observer) {
  Batch batch;
  {
    const StepSection s(observer, "data");
    train_loader_->emit(batch);
    if (observer) observer->add_work([&]() -> std::optional<LayerWork> { return batch_work(batch); });
  }
  Tensor logits = forward(batch.images);
  StepResults results;
  Tensor loss;
  {
    const StepSection s(observer, "loss");
    loss = training_loss(config_, logits, batch.labels);
    results.correct = correct_predictions(logits.detach(), batch.labels);
    if (observer)
      observer->add_work([&]() -> std::optional<LayerWork> { return cross_entropy_work(logits, batch.labels); });
  }
  backward_and_update(loss, prepared, lr, observer);
  results.loss = loss.detach();
  return results;
}

Trainer::~Trainer() = default;

void Trainer::set_communicator(std::shared_ptr<Communicator> comm) {
  MINIDL_CHECK(comm, "Trainer: no communicator");
  data_parallel_.check_split(*comm);
  // Graphs captured before hold the old communicator's collectives, or none.
  train_graphs_.clear();
  step_results_.clear();
  data_parallel_.set_communicator(std::move(comm), *model_);
}

bool Trainer::phase_graphed(int64_t step) const {
  const int phase = freeze_.phase(step);
  for (const auto& [kind, graph] : train_graphs_)
    if (kind / kKindsPerPhase == phase && graph.graphed()) return true;
  return false;
}

Trainer::StepResults Trainer::data_parallel_step(int64_t step, bool prepared, double lr) {
  const int64_t first = data_parallel_.first_micro_batch();
  auto forward_loss = [&](int64_t j) {
    // The step train_step queued into this micro-batch's slot (no upload here: a graph captures this).
    dropout_state_->set_step(data_parallel_.dropout_step_of(step, first + j), device_, static_cast<int>(j));
    Batch batch;
    train_loader_->emit(batch);
    const Tensor logits = forward(batch.images);
    DataParallel::MicroBatch out;
    out.loss = training_loss(config_, logits, batch.labels);
    out.correct = correct_predictions(logits.detach(), batch.labels);
    return out;
  };
  auto run_backward = [&](const Tensor& loss) { backward(loss); };
  const DataParallel::MicroBatch reduced = data_parallel_.step(
      {*model_, parameters_, *train_loader_, *optimizer_, forward_loss, run_backward, phase_graphed(step)});
  update(prepared, lr, nullptr);
  return {reduced.loss, reduced.correct};
}

nlohmann::json Trainer::grad_scaler_state() const {
  return grad_scaler_ ? grad_scaler_->state() : nlohmann::json();
}

void Trainer::load_grad_scaler_state(const nlohmann::json& state, const std::string& where) {
  if (!grad_scaler_) {
    MINIDL_CHECK(state.is_null(), "checkpoint '", where, "' holds loss-scaler state but this run's precision is \"",
                 to_string(*config_.precision), "\"");
    return;
  }
  MINIDL_CHECK(!state.is_null(), "checkpoint '", where,
               "' has no loss-scaler state (metadata 'grad_scaler'), which a precision \"fp16\" run needs");
  try {
    grad_scaler_->load_state(state);
  } catch (const Error& e) {
    fail(str("checkpoint '", where, "': ", e.what()));
  }
}

Tensor Trainer::forward(const Tensor& images) {
  const AutocastGuard autocast(activation_dtype_);
  return (*model_)(images.to(activation_format_));
}

void Trainer::backward_and_update(const Tensor& loss, bool prepared, double lr, StepObserver* observer) {
  backward(loss);
  update(prepared, lr, observer);
}

void Trainer::backward(const Tensor& loss) {
  if (grad_scaler_)
    autograd::backward(loss, grad_scaler_->backward_seed());
  else
    loss.backward();
}

void Trainer::update(bool prepared, double lr, StepObserver* observer) {
  const StepSection s(observer, "optimizer");
  if (grad_scaler_ || grad_clipper_) {
    std::vector<Tensor> grads;
    for (const Tensor& p : parameters_)
      if (p.grad().defined()) grads.push_back(p.grad());
    if (grad_scaler_) grad_scaler_->unscale(grads);
    if (grad_clipper_) grad_clipper_->clip(grads);
  }
  // Under loss scaling the update's kernels read the scaler's flag and skip themselves.
  if (!prepared) optimizer_->prepare(lr);
  optimizer_->apply();
  if (grad_scaler_) grad_scaler_->update();
  optimizer_->zero_grad();
  if (observer)
    observer->add_work([&] {
      std::optional<LayerWork> w = optimizer_->work();
      if (w && grad_clipper_) {
        const LayerWork clip = grad_clip_work(parameters_);
        w->forward.bytes += clip.forward.bytes;
        w->forward.flops += clip.forward.flops;
      }
      return w;
    });
}

Trainer::EvalResult Trainer::evaluate(TtaMode tta, Split split, const EvalProgress& progress) {
  return evaluator_->evaluate(tta, split, progress);
}

std::vector<std::string> Trainer::data_notes() const {
  std::vector<std::string> notes = {train_set_.note};
  if (has_validation()) notes.push_back(val_set_.note);
  notes.push_back(test_set_.note);
  if (!normalization_note_.empty()) notes.push_back(normalization_note_);
  return notes;
}

}  // namespace minidl
