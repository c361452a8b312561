// The backbone configs: configs/resnet18.json, mobilenetv2.json and convnext_cifar.json build the
// networks they name (the parameter counts below, worked out layer by layer, are those of the
// PyTorch twin built from the same JSON by scripts/torch/model_from_json.py, which
// scripts/gpu/blocks.sh compares, and for MobileNetV2 torchvision's mobilenet_v2(num_classes=10)),
// and each trains a few steps on the CPU: finite losses, every tensor of its state moving, the
// same losses twice.
#include <array>
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

TEST_CASE("mobilenetv2.json is torchvision's MobileNetV2 at width 1.0: 2,236,682 parameters", "[config][blocks]") {
  const TrainConfig c = test::shipped("mobilenetv2.json");
  // An inverted residual of expansion t from cin to cout: the 1x1 expansion and its BN (when t > 1),
  // the depthwise 3x3 (9 weights per channel) and its BN, the 1x1 projection and its BN.
  auto block = [](int64_t cin, int64_t t, int64_t cout) {
    const int64_t hid = cin * t;
    return (t > 1 ? cin * hid + 2 * hid : 0) + hid * 9 + 2 * hid + hid * cout + 2 * cout;
  };
  int64_t blocks = 0, cin = 32;
  for (const auto& [t, cout, n] : std::vector<std::array<int64_t, 3>>{
           {1, 16, 1}, {6, 24, 2}, {6, 32, 3}, {6, 64, 4}, {6, 96, 3}, {6, 160, 3}, {6, 320, 1}})
    for (int64_t b = 0; b < n; ++b, cin = cout) blocks += block(cin, t, cout);
  const int64_t stem = 3 * 32 * 9 + 64, head = 320 * 1280 + 2 * 1280, classifier = 1280 * 10 + 10;
  CHECK(parameter_count(c) == stem + blocks + head + classifier);
  CHECK(parameter_count(c) == 2236682);
}

TEST_CASE("convnext_cifar.json is a small ConvNeXt: 3,551,818 parameters", "[config][blocks]") {
  const TrainConfig c = test::shipped("convnext_cifar.json");
  // A block of width d: depthwise 7x7 with bias, LayerNorm2d, 1x1 to 4d and back with biases,
  // gamma. Stem 3x3 with bias and LayerNorm2d; a downsampling LayerNorm2d and 2x2 conv per stage.
  auto block = [](int64_t d) { return d * 49 + d + 2 * d + d * 4 * d + 4 * d + 4 * d * d + d + d; };
  auto down = [](int64_t cin, int64_t cout) { return 2 * cin + cin * cout * 4 + cout; };
  const int64_t stem = 3 * 96 * 9 + 96 + 2 * 96;
  const int64_t stages = 2 * block(96) + down(96, 192) + 2 * block(192) + down(192, 384) + 2 * block(384);
  const int64_t head = 2 * 384 + 384 * 10 + 10;
  CHECK(parameter_count(c) == stem + stages + head);
  CHECK(parameter_count(c) == 3551818);
}

TEST_CASE("training: mobilenetv2.json trains on the CPU", "[training][config][blocks]") {
  MINIDL_REQUIRE_DATA();
  trains_on_the_cpu("mobilenetv2.json");
}

TEST_CASE("training: convnext_cifar.json trains on the CPU", "[training][config][blocks]") {
  MINIDL_REQUIRE_DATA();
  trains_on_the_cpu("convnext_cifar.json");
}
