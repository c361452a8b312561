// A token set (data.format "tokens"): llm.c's token files cut into windows of seq_len + 1 tokens,
// batches of their inputs and targets in the epoch's order, micro-batches that are slices of the
// whole batch, and the evaluation's loss and token accuracy against a direct computation.
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/datasets.h"
#include "data/loader.h"
#include "data/token_file.h"
#include "layers/loss/loss.h"
#include "layers/module.h"
#include "test_util.h"
#include "train/config.h"
#include "train/trainer.h"

using namespace minidl;

namespace {

// tokens[i] = (7 i + 3) mod 50: a stream whose windows are all different.
std::vector<int32_t> stream(int64_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<int32_t>((7 * i + 3) % 50);
  return t;
}

DataOptions token_options(const std::string& dir, int64_t seq_len) {
  return DataOptions::from_json({{"format", "tokens"}, {"dir", dir}, {"seq_len", seq_len}}, "data");
}

}  // namespace

TEST_CASE("a token set's windows hold seq_len + 1 tokens, starting every seq_len", "[loader][tokens]") {
  test::TempDir dir("token_set");
  const std::vector<int32_t> train = stream(103), val = stream(40);
  write_token_file(dir.path.string() + "/train.bin", train);
  write_token_file(dir.path.string() + "/val.bin", val);
  DataOptions o = token_options(dir.path.string(), 8);
  const Dataset d = load_dataset(o, Split::Train);
  REQUIRE(d.is_tokens());
  REQUIRE(d.size() == 12);  // (103 - 1) / 8
  REQUIRE(d.images.shape() == Shape{12, 9});
  const std::vector<int32_t> w = d.images.values<int32_t>();
  for (int64_t i = 0; i < 12; ++i)
    for (int64_t t = 0; t < 9; ++t) REQUIRE(w[static_cast<size_t>(i * 9 + t)] == train[static_cast<size_t>(i * 8 + t)]);
  REQUIRE(load_dataset(o, Split::Test).size() == 4);  // val.bin: (40 - 1) / 8
  o.train_limit = 5;
  REQUIRE(load_dataset(o, Split::Train).size() == 5);
  o.seq_len = 50;
  REQUIRE_THROWS_WITH(load_dataset(o, Split::Test),
                      Catch::Contains("val.bin' has 40 tokens, fewer than the 51 of one window"));
  REQUIRE_THROWS_WITH(load_dataset(token_options("", 8), Split::Train),
                      Catch::Contains("data.dir: a token set needs the folder"));
  REQUIRE_THROWS_WITH(DataOptions::from_json(
                          {{"format", "tokens"}, {"dir", "x"}, {"seq_len", 8}, {"augment", {{"flip", true}}}}, "data"),
                      Catch::Contains("data.augment: not for \"format\": \"tokens\""));
  REQUIRE(token_options("x", 8).to_json() ==
          nlohmann::json({{"format", "tokens"}, {"dir", "x"}, {"train_limit", 0}, {"seq_len", 8}}));
}

TEST_CASE("token batches: inputs and targets of the epoch's windows, micro-batches their slices", "[loader][tokens]") {
  test::TempDir dir("token_batches");
  write_token_file(dir.path.string() + "/train.bin", stream(161));
  write_token_file(dir.path.string() + "/val.bin", stream(33));
  const DataOptions o = token_options(dir.path.string(), 4);
  const Dataset d = load_dataset(o, Split::Train);  // 40 windows
  const std::vector<int32_t> w = d.images.values<int32_t>();
  Loader train(d, LoaderOptions::training(o, 8, 11), Device::cpu());
  REQUIRE(train.batches_per_epoch() == 5);
  train.start_epoch(2);
  const std::vector<int32_t> order = epoch_permutation(11, 2, 40);
  REQUIRE(train.advance());
  REQUIRE(train.advance());  // the epoch's second batch
  Batch whole;
  train.emit(whole);
  REQUIRE(whole.images.shape() == Shape{8, 4});
  REQUIRE(whole.labels.shape() == Shape{8, 4});
  const std::vector<int32_t> x = whole.images.values<int32_t>(), y = whole.labels.values<int32_t>();
  for (int64_t b = 0; b < 8; ++b)
    for (int64_t t = 0; t < 4; ++t) {
      const int64_t window = order[static_cast<size_t>(8 + b)];
      REQUIRE(x[static_cast<size_t>(b * 4 + t)] == w[static_cast<size_t>(window * 5 + t)]);
      REQUIRE(y[static_cast<size_t>(b * 4 + t)] == w[static_cast<size_t>(window * 5 + t + 1)]);
    }
  train.select_micro_batch(4, 2);
  Batch micro;
  train.emit(micro);
  const std::vector<int32_t> mx = micro.images.values<int32_t>(), my = micro.labels.values<int32_t>();
  REQUIRE(mx == std::vector<int32_t>(x.begin() + 16, x.begin() + 24));
  REQUIRE(my == std::vector<int32_t>(y.begin() + 16, y.begin() + 24));

  const Dataset test = load_dataset(o, Split::Test);  // 8 windows, in order, the last batch short
  Loader eval(test, LoaderOptions::evaluation(o, 3), Device::cpu());
  REQUIRE(eval.batches_per_epoch() == 3);
  eval.start_epoch(0);
  Batch b;
  int64_t seen = 0;
  while (eval.next(b)) seen += b.images.size(0);
  REQUIRE(seen == 8);
  REQUIRE(b.images.shape() == Shape{2, 4});
}

TEST_CASE("a language model's evaluation: the mean token loss and accuracy of its windows", "[loader][tokens]") {
  test::TempDir dir("token_eval");
  write_token_file(dir.path.string() + "/train.bin", stream(129));
  write_token_file(dir.path.string() + "/val.bin", stream(97));
  const nlohmann::json config = {
      {"seed", 3u},
      {"device", "cpu"},
      {"batch_size", 8},
      {"data", {{"format", "tokens"}, {"dir", dir.path.string()}, {"seq_len", 8}}},
      {"model",
       {{"layers",
         {{{"type", "Embedding"}, {"num_embeddings", 64}, {"embedding_dim", 16}, {"init_std", 0.02}},
          {{"type", "PositionEmbedding"}, {"num_tokens", 8}, {"embed_dim", 16}},
          {{"type", "TransformerEncoderLayer"},
           {"d_model", 16},
           {"nhead", 2},
           {"dim_feedforward", 32},
           {"dropout", 0.0},
           {"norm_first", true},
           {"causal", true}},
          {{"type", "LMHead"}, {"tied_to", 0}}}}}},
      {"optimizer", {{"type", "AdamW"}, {"lr", 0.01}}},
      {"eval", {{"batch_size", 100}}}};
  const TrainConfig c = parse_train_config(config);
  const DataOptions o = DataOptions::from_json(c.data, "data");
  const Dataset train = load_dataset(o, Split::Train), test = load_dataset(o, Split::Test);  // 16 and 12 windows
  Trainer trainer(c, Device::cpu(), train, test);
  REQUIRE(trainer.output_width() == 64);
  REQUIRE(trainer.outputs_per_sample() == 8);
  const Trainer::EvalResult r = trainer.evaluate(TtaMode::None);
  REQUIRE(r.images == 12);
  REQUIRE(r.confusion.empty());

  Loader all(test, LoaderOptions::evaluation(o, 12), Device::cpu());
  all.start_epoch(0);
  Batch b;
  REQUIRE(all.next(b));
  trainer.model().eval();
  const Tensor logits = trainer.model()(b.images);
  REQUIRE(logits.shape() == Shape{12, 8, 64});
  const double loss = cross_entropy(logits, b.labels).item();
  REQUIRE(r.loss == Approx(loss).epsilon(1e-6));
  REQUIRE(r.acc == Approx(100.0 * static_cast<double>(count_correct(logits, b.labels)) / 96.0));
}

TEST_CASE("token batches on CUDA are the CPU's, micro-batches included", "[loader][tokens][cuda]") {
  MINIDL_REQUIRE_CUDA();
  test::TempDir dir("token_cuda");
  write_token_file(dir.path.string() + "/train.bin", stream(1601));
  write_token_file(dir.path.string() + "/val.bin", stream(33));
  const DataOptions o = token_options(dir.path.string(), 16);
  const Dataset d = load_dataset(o, Split::Train);  // 100 windows
  for (bool train : {true, false}) {
    const LoaderOptions lo = train ? LoaderOptions::training(o, 24, 5) : LoaderOptions::evaluation(o, 24);
    Loader cpu(d, lo, Device::cpu()), gpu(d, lo, Device::cuda());
    cpu.start_epoch(3);
    gpu.start_epoch(3);
    Batch bc, bg;
    while (cpu.advance()) {
      REQUIRE(gpu.advance());
      for (const auto& [offset, size] : {std::pair<int64_t, int64_t>{0, cpu.current_batch_size()}, {4, 2}}) {
        if (offset + size > cpu.current_batch_size()) continue;
        cpu.select_micro_batch(offset, size);
        gpu.select_micro_batch(offset, size);
        cpu.emit(bc);
        gpu.emit(bg);
        REQUIRE(bg.images.is_cuda());
        REQUIRE(bg.images.values<int32_t>() == bc.images.values<int32_t>());
        REQUIRE(bg.labels.values<int32_t>() == bc.labels.values<int32_t>());
      }
    }
    REQUIRE(!gpu.advance());
  }
}
