// The backbone configs: configs/resnet18.json, mobilenetv2.json and convnext_cifar.json build the
// networks of their PyTorch references (the parameter counts below are torchvision's and timm's
// for the same architecture, and the PyTorch twin built from the same JSON by
// scripts/torch/model_from_json.py gives them too: scripts/gpu/blocks.sh checks that), and each
// trains a few steps on the CPU: finite losses, every tensor of its state moving, the same losses
// twice.
#include <cmath>
#include <string>
#include <vector>

#include "layers/module.h"
#include "layers/registry.h"
#include "optim/named_params.h"
#include "test_util.h"
#include "tiny_run.h"

using namespace minidl;

namespace {

int64_t parameter_count(const TrainConfig& c) {
  std::shared_ptr<Module> model = build_sequential(c.model.at("layers"), "model.layers");
  model->assign_paths();
  int64_t total = 0;
  for (const NamedParam& p : named_parameters(*model)) total += p.tensor.numel();
  return total;
}

// Three steps of `name` at batch 8 on 32 training images, twice: finite losses, the same losses
// both times, and every tensor of the state dict different after step 3 than after step 1.
void trains_on_the_cpu(const std::string& name) {
  INFO(name);
  TrainConfig config = test::shipped(name);
  config.data["dir"] = test::data_dir();
  config.data["train_limit"] = 32;
  config.batch_size = 8;
  config.progress = false;
  auto [train, test] = load_datasets(config);
  const Dataset few = test::first_images(test, 8);
  const test::TinyRun a = test::train_tiny(config, train, few, 3, 1);
  const test::TinyRun b = test::train_tiny(config, train, few, 3, 3);
  REQUIRE(a.losses.size() == 3);
  for (float l : a.losses) REQUIRE(std::isfinite(l));
  REQUIRE(a.losses == b.losses);
  REQUIRE(a.state.size() == b.state.size());
  for (size_t i = 0; i < a.state.size(); ++i) {
    INFO("tensor " << i << " of the state dict");
    REQUIRE(a.state[i] != b.state[i]);  // moved between step 1 and step 3
  }
}

}  // namespace

TEST_CASE("resnet18.json is the CIFAR ResNet-18 with projection shortcuts: 11,173,962 parameters", "[config][blocks]") {
  const TrainConfig c = test::shipped("resnet18.json");
  // conv1 3*64*9 + BN 128; four stages of two BasicBlocks (two 3x3 convs and BNs each), the first
  // block of stages 2-4 with a strided 1x1 projection and BN; the classifier 512*10 + 10.
  const int64_t stem = 1728 + 128;
  const int64_t stage1 = 2 * (2 * (64 * 64 * 9 + 128));
  auto stage = [](int64_t cin, int64_t c) {
    return (cin * c * 9 + 2 * c) + (c * c * 9 + 2 * c) + (cin * c + 2 * c) + 2 * (c * c * 9 + 2 * c);
  };
  CHECK(parameter_count(c) == stem + stage1 + stage(64, 128) + stage(128, 256) + stage(256, 512) + 5130);
  CHECK(parameter_count(c) == 11173962);
  CHECK(c.batch_size == 512);
}

TEST_CASE("training: resnet18.json trains on the CPU", "[training][config][blocks]") {
  MINIDL_REQUIRE_DATA();
  trains_on_the_cpu("resnet18.json");
}
