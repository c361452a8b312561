// The run context (core/run_context.h): settings and init seed belong to the context current when
// they are set or read, and dropout's seed and step to the state a trainer hands its model
// (layers/regularization/dropout_state.h), so two trainers alive at once, stepped in turn or on two
// threads, each give the bits of running alone and leave the caller's settings as they were; the
// module table reuses the ids of destroyed modules.
#include <memory>
#include <thread>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"
#include "core/init.h"
#include "core/run_context.h"
#include "core/settings.h"
#include "layers/module.h"
#include "layers/registry.h"
#include "layers/regularization/dropout.h"
#include "train/config.h"
#include "train/trainer.h"
#include "test_util.h"

using namespace minidl;
using nlohmann::json;

namespace {

// 48 images of 3x8x8 with labels 0..9: a step of a batch of 8 takes a few milliseconds.
Dataset synthetic_images(int64_t n, uint32_t salt) {
  std::vector<uint8_t> px(static_cast<size_t>(n * 3 * 8 * 8));
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(((i + salt) * 2654435761u) >> 24);
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7 + salt) % 10);
  Dataset d;
  d.images = Tensor::from_vector(px, {n, 3, 8, 8});
  d.labels = Tensor::from_vector(labels, {n});
  return d;
}

json tiny_layers(double dropout) {
  return json::array({{{"type", "Conv2d"}, {"in_channels", 3}, {"out_channels", 4}, {"kernel_size", 3}, {"padding", 1}},
                      {{"type", "GroupNorm"}, {"num_groups", 2}, {"num_channels", 4}},
                      {{"type", "ReLU"}},
                      {{"type", "Dropout"}, {"p", dropout}},
                      {{"type", "DropPath"}, {"p", dropout / 2}},
                      {{"type", "GlobalMaxPool2d"}},
                      {{"type", "Linear"}, {"in_features", 4}, {"out_features", 10}}});
}

// accumulate_steps > 1: each step is that many micro-batches, each drawing its own dropout masks
// from a step word of its own.
TrainConfig tiny_config(uint64_t seed, bool deterministic, bool allow_tf32, bool norm_single_read, double dropout,
                        int64_t accumulate_steps = 1) {
  json j = {{"seed", seed},
            {"device", "cpu"},
            {"deterministic", deterministic},
            {"allow_tf32", allow_tf32},
            {"norm_single_read", norm_single_read},
            {"epochs", 2},
            {"batch_size", 8},
            {"accumulate_steps", accumulate_steps},
            {"data", {{"augment", {{"crop_padding", 1}, {"flip", true}}}}},
            {"model", {{"layers", tiny_layers(dropout)}}},
            {"optimizer", {{"type", "SGD"}, {"lr", 0.1}, {"momentum", 0.9}}},
            {"eval", {{"batch_size", 16}}}};
  return parse_train_config(j);
}

struct RunBits {
  std::vector<float> losses;
  std::vector<std::vector<float>> state;
  double acc = -1;
};

// Steps a trainer one step at a time (so runs can interleave), then reads its weights and accuracy.
class SteppedRun {
 public:
  explicit SteppedRun(const TrainConfig& config, Device device = Device::cpu())
      : trainer_(config, device, synthetic_images(48, 1), synthetic_images(16, 2)),
        record_(allocate_pinned(sizeof(Trainer::StepRecord))) {}
  void step() {
    auto* r = static_cast<Trainer::StepRecord*>(record_.get());
    if (step_ % trainer_.steps_per_epoch() == 0) trainer_.train_loader().start_epoch(step_ / trainer_.steps_per_epoch());
    REQUIRE(trainer_.train_step(step_++, r));
    synchronize(trainer_.device());  // the GPU writes the record when it gets to the step
    bits_.losses.push_back(r->loss);
  }
  RunBits finish() {
    bits_.acc = trainer_.evaluate(TtaMode::None).acc;
    for (auto& [name, t] : trainer_.model().state_dict()) bits_.state.push_back(t.to_vector());
    return bits_;
  }
  Trainer& trainer() { return trainer_; }

 private:
  Trainer trainer_;
  std::shared_ptr<void> record_;
  int64_t step_ = 0;
  RunBits bits_;
};

constexpr int kSteps = 8;

RunBits run_alone(const TrainConfig& config, Device device = Device::cpu()) {
  SteppedRun run(config, device);
  for (int i = 0; i < kSteps; ++i) run.step();
  return run.finish();
}

void require_same_bits(const RunBits& a, const RunBits& b) {
  REQUIRE(a.losses == b.losses);
  REQUIRE(a.state == b.state);
  REQUIRE(a.acc == b.acc);
}

bool same_settings(const ComputeSettings& a, const ComputeSettings& b) {
  return a.deterministic == b.deterministic && a.allow_tf32 == b.allow_tf32;
}

}  // namespace

TEST_CASE("run context: a scope makes its context current and restores the previous one", "[settings][context]") {
  const ComputeSettings outer = compute_settings();
  RunContext a, b;
  a.compute = {false, false};
  b.compute = {true, false};
  {
    const RunContextScope in_a(a);
    REQUIRE(&current_run_context() == &a);
    REQUIRE(same_settings(compute_settings(), a.compute));
    {
      const RunContextScope in_b(b);
      set_compute_settings({false, true});  // b's, not a's
      REQUIRE(&current_run_context() == &b);
    }
    REQUIRE(&current_run_context() == &a);
    REQUIRE(same_settings(compute_settings(), {false, false}));
  }
  REQUIRE(same_settings(b.compute, {false, true}));
  REQUIRE(same_settings(compute_settings(), outer));
}

TEST_CASE("run context: each context keeps its own init seed and draw count", "[init][context]") {
  // Drawn in turn, A's second tensor is still A's ordinal 1, whatever B drew meanwhile.
  RunContext a, b;
  Tensor a0 = Tensor::zeros({16}), a1 = Tensor::zeros({16}), b0 = Tensor::zeros({16}), b1 = Tensor::zeros({16});
  {
    const RunContextScope in_a(a);
    set_init_seed(5);
    init_uniform_(a0, 1.f);
  }
  {
    const RunContextScope in_b(b);
    set_init_seed(5);
    init_uniform_(b0, 1.f);
    init_uniform_(b1, 1.f);
  }
  {
    const RunContextScope in_a(a);
    init_uniform_(a1, 1.f);
  }
  REQUIRE(a.init_ordinal == 2);
  REQUIRE(a0.to_vector() == b0.to_vector());
  REQUIRE(a1.to_vector() == b1.to_vector());
  REQUIRE(a0.to_vector() != a1.to_vector());
}

TEST_CASE("run context: a model's dropout draws with the state handed to it", "[dropout][context]") {
  const uint64_t outer_seed = dropout_seed();
  const int64_t outer_step = dropout_step();
  const std::shared_ptr<Module> model = build_sequential(tiny_layers(0.5), "model.layers");
  model->assign_paths();
  auto state = std::make_shared<DropoutState>(11);
  state->set_step(3);
  REQUIRE(set_dropout_state(*model, state) == 2);  // the Dropout and the DropPath
  auto* drop = dynamic_cast<Dropout*>(model->children()[3].second.get());
  REQUIRE(drop != nullptr);
  REQUIRE(drop->dropout_state() == state);
  const Tensor x = Tensor::full({4, 4, 8, 8}, 1.f);
  const std::vector<float> y = (*drop)(x).to_vector();
  // The mask of the state's seed and step and the layer's path, whatever the default state holds.
  REQUIRE(y == dropout(x, state->draw(0.5f, dropout_salt(drop->path()), 1), state).to_vector());
  set_dropout_seed(outer_seed + 1);
  set_dropout_step(outer_step + 1);
  REQUIRE((*drop)(x).to_vector() == y);
  state->set_step(4);
  CHECK((*drop)(x).to_vector() != y);
  set_dropout_seed(outer_seed);
  set_dropout_step(outer_step);
  // A module no one handed a state draws with the thread's default one.
  Dropout loose(0.5);
  REQUIRE(loose.dropout_state() == default_dropout_state());
}

TEST_CASE("run context: two trainers stepped in turn each give the bits of running alone", "[trainer][context]") {
  // Different seeds (init, data order, dropout masks), dropout rates, compute switches and
  // micro-batches per step.
  const TrainConfig first = tiny_config(1, true, true, true, 0.25);
  const TrainConfig second = tiny_config(2, false, false, false, 0.5, 2);
  const RunBits first_alone = run_alone(first);
  const RunBits second_alone = run_alone(second);
  REQUIRE(first_alone.losses != second_alone.losses);
  // The masks matter: without dropout the first run's bits differ.
  REQUIRE(run_alone(tiny_config(1, true, true, true, 0)).losses != first_alone.losses);

  SteppedRun a(first);
  SteppedRun b(second);
  for (int i = 0; i < kSteps; ++i) {
    a.step();
    b.step();
  }
  const RunBits a_bits = a.finish();
  const RunBits b_bits = b.finish();
  require_same_bits(a_bits, first_alone);
  require_same_bits(b_bits, second_alone);
  CHECK(same_settings(a.trainer().run_context().compute, {true, true}));
  CHECK(same_settings(b.trainer().run_context().compute, {false, false}));
}

TEST_CASE("run context: two trainers on two threads at once each give the bits of running alone",
          "[trainer][context]") {
  // Each thread builds, steps and evaluates its own run; their steps overlap in time, with other
  // seeds, dropout rates and compute switches.
  const TrainConfig first = tiny_config(3, true, true, true, 0.25, 2);
  const TrainConfig second = tiny_config(4, false, false, false, 0.5);
  const RunBits first_alone = run_alone(first);
  const RunBits second_alone = run_alone(second);
  REQUIRE(first_alone.losses != second_alone.losses);
  for (int attempt = 0; attempt < 3; ++attempt) {
    RunBits a_bits, b_bits;
    // Catch2's assertions are not thread-safe: the threads only compute, the checks come after.
    const auto train = [](const TrainConfig& config, RunBits* out) {
      Trainer trainer(config, Device::cpu(), synthetic_images(48, 1), synthetic_images(16, 2));
      const std::shared_ptr<void> record = allocate_pinned(sizeof(Trainer::StepRecord));
      auto* r = static_cast<Trainer::StepRecord*>(record.get());
      for (int64_t step = 0; step < kSteps; ++step) {
        if (step % trainer.steps_per_epoch() == 0) trainer.train_loader().start_epoch(step / trainer.steps_per_epoch());
        if (!trainer.train_step(step, r)) return;
        out->losses.push_back(r->loss);
      }
      out->acc = trainer.evaluate(TtaMode::None).acc;
      for (auto& [name, t] : trainer.model().state_dict()) out->state.push_back(t.to_vector());
    };
    std::thread a(train, std::cref(first), &a_bits);
    std::thread b(train, std::cref(second), &b_bits);
    a.join();
    b.join();
    require_same_bits(a_bits, first_alone);
    require_same_bits(b_bits, second_alone);
  }
}

TEST_CASE("run context: two trainers replaying CUDA graphs in turn each give the bits of running alone",
          "[cuda][graph][trainer][context]") {
  // On the GPU the compute switches pick kernels (TF32 convolutions, the single-read norm), and
  // the dropout step reaches the kernels through device words each run's dropout state owns.
  MINIDL_REQUIRE_CUDA();
  const Device cuda = Device::cuda(0);
  TrainConfig first = tiny_config(1, true, true, true, 0.25);
  TrainConfig second = tiny_config(2, true, false, false, 0.5, 2);
  for (TrainConfig* c : {&first, &second}) {
    c->device = "cuda";
    c->cuda_graph = true;
    c->precision = Precision::Fp32;  // where allow_tf32 picks the convolutions
    c->memory_format = MemoryFormat::Contiguous;
  }
  const RunBits first_alone = run_alone(first, cuda);
  const RunBits second_alone = run_alone(second, cuda);
  SteppedRun a(first, cuda);
  SteppedRun b(second, cuda);
  for (int i = 0; i < kSteps; ++i) {
    a.step();
    b.step();
  }
  REQUIRE(a.trainer().steps_graphed());
  REQUIRE(b.trainer().steps_graphed());
  require_same_bits(a.finish(), first_alone);
  require_same_bits(b.finish(), second_alone);
}

TEST_CASE("run context: a trainer leaves the caller's settings as they were", "[trainer][settings][context]") {
  const ComputeSettings outer = compute_settings();
  const uint64_t outer_dropout_seed = dropout_seed();
  const int64_t outer_step = dropout_step();
  {
    // Every switch the opposite of the caller's, and a seed the caller does not have.
    SteppedRun run(tiny_config(outer_dropout_seed + 7, !outer.deterministic, !outer.allow_tf32, false, 0.25));
    REQUIRE(same_settings(compute_settings(), outer));
    run.step();
    run.step();
    REQUIRE(same_settings(compute_settings(), outer));
    REQUIRE(dropout_seed() == outer_dropout_seed);
    REQUIRE(dropout_step() == outer_step);
    run.finish();
  }
  REQUIRE(same_settings(compute_settings(), outer));
  REQUIRE(dropout_seed() == outer_dropout_seed);
}

TEST_CASE("module table: ids of destroyed modules are reused, under a new generation", "[module][context]") {
  // Once a model has been built and destroyed, building it again takes no new ids (each model
  // is released before the next is built, as bench accuracy's runs are).
  build_sequential(tiny_layers(0.25), "model.layers");
  const size_t before = module_table_size();
  std::shared_ptr<Module> last;
  for (int i = 0; i < 1000; ++i) {
    last.reset();
    last = build_sequential(tiny_layers(0.25), "model.layers");
  }
  REQUIRE(module_table_size() == before);
  const int id = last->id();
  const uint32_t generation = last->generation();
  REQUIRE(module_by_id(id) == last.get());
  last.reset();
  REQUIRE(module_by_id(id) == nullptr);
  last = build_sequential(tiny_layers(0.25), "model.layers");
  REQUIRE(module_table_size() == before);
  // The id comes back, and the generation tells the new module from the old one.
  bool reused = false;
  for (auto& [path, m] : last->named_modules())
    if (m->id() == id) {
      reused = true;
      REQUIRE(m->generation() != generation);
    }
  REQUIRE(reused);
}
