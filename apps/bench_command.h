// `minidl bench <what>`: one CLI11 subcommand per benchmark. The ranges of every option are
// checked by the parser, so a benchmark function receives typed options (bench/bench_*.h) and a
// wrong number is a usage error (exit 2) naming the option, not a conversion failure inside it.
#pragma once
#include <CLI/CLI.hpp>

#include "bench/bench_accuracy.h"
#include "bench/bench_allreduce.h"
#include "bench/bench_attention.h"
#include "bench/bench_conv.h"
#include "bench/bench_data.h"
#include "bench/bench_norm.h"
#include "bench/bench_train.h"

namespace minidl {

class BenchCommand {
 public:
  // Adds `bench` and its subcommands to `app`; the options bind to this object, which must
  // outlive the parse.
  explicit BenchCommand(CLI::App& app);
  BenchCommand(const BenchCommand&) = delete;
  BenchCommand& operator=(const BenchCommand&) = delete;

  bool chosen() const { return static_cast<bool>(*bench_); }
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

}  // namespace minidl
