// `minidl bench <what>`: one CLI11 subcommand per benchmark. The ranges of every option are
// checked by the parser, so a benchmark function receives typed options (bench/bench_*.h) and a
// wrong number is a usage error (exit 2) naming the option, not a conversion failure inside it.
#include <iostream>
#include <limits>
#include <memory>

#include "apps/commands.h"
#include "bench/bench_accuracy.h"
#include "bench/bench_allreduce.h"
#include "bench/bench_attention.h"
#include "bench/bench_conv.h"
#include "bench/bench_data.h"
#include "bench/bench_norm.h"
#include "bench/bench_train.h"

namespace minidl {

namespace {

class BenchCommand {
 public:
  // Adds `bench` and its subcommands to `app`; the options bind to this object, which must
  // outlive the parse.
  explicit BenchCommand(CLI::App& app);
  BenchCommand(const BenchCommand&) = delete;
  BenchCommand& operator=(const BenchCommand&) = delete;

  CLI::App* app() const { return bench_; }
  // Runs the chosen benchmark; its exit status.
  int run() const;

 private:
  CLI::App* bench_;
  CLI::App *accuracy_, *train_, *norm_, *conv_, *data_, *attention_, *allreduce_;
  BenchAccuracyOptions accuracy_options_;
  BenchTrainOptions train_options_;
  BenchNormOptions norm_options_;
  BenchConvOptions conv_options_;
  BenchDataOptions data_options_;
  BenchAttentionOptions attention_options_;
  BenchAllreduceOptions allreduce_options_;
};

BenchCommand::BenchCommand(CLI::App& app) {
  constexpr int64_t kMaxCount = std::numeric_limits<int32_t>::max();
  bench_ = app.add_subcommand("bench", "benchmarks: accuracy (time to accuracy), train (images/s), norm (kernels), "
                                       "conv (GEMM rates), data (image decoding), attention (kernels), allreduce "
                                       "(the ordered reduction against the engine's)");
  bench_->require_subcommand(0, 1);

  accuracy_ = bench_->add_subcommand("accuracy",
                                     "time to accuracy: N seeds of a config, each timed to its final "
                                     "test accuracy");
  BenchAccuracyOptions& a = accuracy_options_;
  add_config_options(accuracy_, a.config, a.overrides, a.device);
  accuracy_->get_option("--config")->required();
  accuracy_->add_option("--runs", a.runs, "runs, seeds 0..runs-1")->capture_default_str()->check(CLI::Range(int64_t{1}, kMaxCount));
  accuracy_->add_option("--max-steps", a.max_steps, "stop each run after this many steps (0: the config's epochs)")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
  accuracy_->add_option("--json", a.json, "write every figure to this file");

  train_ = bench_->add_subcommand("train", "training and evaluation images/s of a config");
  BenchTrainOptions& t = train_options_;
  add_config_options(train_, t.config, t.overrides, t.device);
  train_->add_option("--steps", t.steps, "timed steps")->capture_default_str()->check(CLI::Range(int64_t{1}, kMaxCount));
  train_->add_option("--warmup", t.warmup, "untimed steps first")->capture_default_str()->check(CLI::Range(int64_t{0}, kMaxCount));
  train_->add_option("--dist", t.dist, "the communicator (nccl without a launcher: a world of one on NCCL)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "single", "mpi", "nccl"}));

  norm_ = bench_->add_subcommand("norm",
                                 "the normalization kernels against the DRAM floor and PyTorch "
                                 "(needs a GPU)");
  BenchNormOptions& n = norm_options_;
  norm_->add_option("--json", n.json, "write every number to this file");
  norm_->add_option("--reps", n.reps, "timed calls (median)")->capture_default_str()->check(CLI::Range(1, 1000000));
  norm_->add_option("--warmup", n.warmup, "untimed calls first")->capture_default_str()->check(CLI::Range(0, 1000000));
  norm_->add_option("--path", n.path, "every pass on this path where it can run")
      ->capture_default_str()->check(CLI::IsMember({"auto", "block", "cluster", "warp", "3-launch"}));
  norm_->add_option("--dtype", n.dtype, "activation type")->capture_default_str()->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  norm_->add_option("--memory-format", n.memory_format, "activation layout")
      ->capture_default_str()->check(CLI::IsMember({"contiguous", "channels_last"}));
  norm_->add_option("--torch", n.torch, "PyTorch's figures of this mode (scripts/bench/torch_norm.py --json)");
  norm_->add_flag("--volumes", n.volumes, "GroupNorm and BatchNorm3d at a 128^3 3-D UNet's shapes instead of the anchors");

  conv_ = bench_->add_subcommand("conv", "convolution GFLOP/s against the machine's ceiling");
  BenchConvOptions& c = conv_options_;
  conv_->add_option("--device", c.device, "cpu or cuda")->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  conv_->add_option("--repeat", c.repeat, "timed repetitions (median)")->capture_default_str()->check(CLI::Range(1, 1000000));
  conv_->add_option("--csv", c.csv, "one row per measurement to this file");
  conv_->add_flag("--depthwise", c.depthwise, "the depthwise kernels at MobileNetV2's and ConvNeXt's shapes (CUDA)");
  conv_->add_option("--batch", c.batch, "--depthwise: batch size")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  conv_->add_option("--dtype", c.dtype, "--depthwise: channels-last operands of this type")
      ->capture_default_str()
      ->check(CLI::IsMember({"bf16", "fp16", "fp32"}));

  data_ = bench_->add_subcommand("data", "decoding, caching and batching an image folder");
  BenchDataOptions& d = data_options_;
  data_->add_option("--dir", d.dir, "the image folder (train/<class>/..., test/<class>/...)")->required();
  data_->add_option("--image-size", d.image_size, "the size every image is fitted to")->required()->check(CLI::Range(int64_t{1}, int64_t{65536}));
  data_->add_option("--resize", d.resize, "how an image of another size is fitted")
      ->capture_default_str()->check(CLI::IsMember({"crop", "pad", "stretch"}));
  data_->add_option("--repeats", d.repeats, "cold-cache decodes (best)")->capture_default_str()->check(CLI::Range(int64_t{1}, kMaxCount));
  data_->add_option("--device", d.device, "cpu, cuda or auto: where the batches are made")->capture_default_str();
  data_->add_option("--batch", d.batch, "batch size")->capture_default_str()->check(CLI::Range(int64_t{1}, kMaxCount));
  data_->add_option("--cifar10", d.cifar10, "CIFAR-10 binaries to time beside the folder");

  attention_ = bench_->add_subcommand("attention", "self-attention forward + backward on the GPU");
  BenchAttentionOptions& at = attention_options_;
  attention_->add_option("--batch", at.batch, "batch")->capture_default_str()->check(CLI::Range(int64_t{1}, kMaxCount));
  attention_->add_option("--tokens", at.tokens, "tokens per sequence")->capture_default_str()->check(CLI::Range(int64_t{1}, kMaxCount));
  attention_->add_option("--width", at.width, "model width (a multiple of --heads)")->capture_default_str()->check(CLI::Range(int64_t{1}, kMaxCount));
  attention_->add_option("--heads", at.heads, "heads")->capture_default_str()->check(CLI::Range(int64_t{1}, kMaxCount));
  attention_->add_option("--dtype", at.dtype, "bf16, fp16 or fp32")->capture_default_str()->check(CLI::IsMember({"bf16", "fp16", "fp32"}));
  attention_->add_option("--dropout", at.dropout, "attention dropout probability")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  attention_->add_flag("--causal", at.causal, "a language model's causal mask");
  attention_->add_option("--repeat", at.repeat, "timed spans (median)")->capture_default_str()->check(CLI::Range(1, 1000000));
  attention_->add_option("--csv", at.csv, "one row per measurement to this file");

  allreduce_ = bench_->add_subcommand("allreduce",
                                      "the ordered gradient reduction against the engine's all-reduce "
                                      "per message size; run it under mpirun");
  BenchAllreduceOptions& r = allreduce_options_;
  allreduce_->add_option("--device", r.device, "cpu, cuda or auto")->capture_default_str();
  allreduce_->add_option("--dist", r.dist, "the communicator")->capture_default_str()->check(CLI::IsMember({"auto", "single", "mpi", "nccl"}));
  allreduce_->add_option("--max-mib", r.max_mib, "the largest message, MiB")->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{16384}));
  allreduce_->add_option("--iters", r.iters, "timed calls per size")->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{100000}));
}

int BenchCommand::run() const {
  if (bench_->get_subcommands().empty()) {
    std::cerr << "minidl bench: which benchmark? accuracy, train, norm, conv, data, attention or allreduce (minidl bench "
                 "--help)\n";
    return 2;
  }
  if (*accuracy_) return bench_accuracy(accuracy_options_);
  if (*train_) return bench_train(train_options_);
  if (*norm_) return bench_norm(norm_options_);
  if (*conv_) return bench_conv(conv_options_);
  if (*data_) return bench_data(data_options_);
  if (*allreduce_) return bench_allreduce(allreduce_options_);
  return bench_attention(attention_options_);
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  auto bench = std::make_shared<BenchCommand>(app);
  return {bench->app(), [bench] { return bench->run(); }};
}

}  // namespace minidl
