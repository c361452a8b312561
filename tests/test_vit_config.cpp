// The ViT configs: configs/vit_cifar10.json builds the reference model (8.9M parameters, weight
// decay on matrices only), and configs/vit_tiny_cpu.json trains on the CPU with gradient
// clipping: the loss falls and the same seed gives the same bits.
#include <filesystem>
#include <string>
#include <vector>

#include "core/json_args.h"
#include "layers/module.h"
#include "layers/registry.h"
#include "optim/named_params.h"
#include "optim/param_groups.h"
#include "test_util.h"
#include "tiny_run.h"
#include "train/config.h"

using namespace minidl;
using nlohmann::json;

using test::first_images;
using test::shipped;
using test::TinyRun;
using test::train_tiny;

TEST_CASE("ViT config: vit_cifar10.json is the 8.9M-parameter reference ViT with weight decay on matrices only",
          "[config][vit]") {
  const TrainConfig c = shipped("vit_cifar10.json");
  CHECK(c.grad_clip == 1.0);
  CHECK(c.precision == Precision::Bf16);
  CHECK(c.batch_size == 512);
  CHECK(c.epochs == 30);
  std::shared_ptr<Module> model = build_sequential(c.model.at("layers"), "model.layers");
  model->assign_paths();
  const std::vector<NamedParam> params = named_parameters(*model);
  int64_t total = 0;
  for (const NamedParam& p : params) total += p.tensor.numel();
  // Patch embedding 3*16*384 + 384, position embedding 64*384, six layers of 1,479,168 (in- and
  // out-projection, two MLP matrices, their biases, two LayerNorms), the final LayerNorm, the head.
  CHECK(total == 18816 + 24576 + 6 * 1479168 + 768 + 3850);
  JsonArgs args(c.optimizer, "optimizer");
  const std::vector<ParamGroup> groups = read_param_groups(args);
  for (const NamedParam& p : params) {
    INFO(p.name);
    const int g = find_param_group(groups, p);
    if (p.tensor.dim() >= 2) {
      CHECK(g < 0);  // the optimizer's weight_decay
    } else {
      REQUIRE(g >= 0);
      CHECK(groups[g].weight_decay == 0.0);
    }
  }
  CHECK(c.optimizer.at("weight_decay") == 0.05);
}

TEST_CASE("training: vit_tiny_cpu.json trains with gradient clipping, the loss falls, the same bits twice",
          "[training][vit]") {
  MINIDL_REQUIRE_DATA();
  TrainConfig config = shipped("vit_tiny_cpu.json");
  CHECK(config.grad_clip > 0);
  config.data["dir"] = test::data_dir();
  config.progress = false;
  auto [train, test] = load_datasets(config);
  const Dataset few = first_images(test, 10);
  const TinyRun a = train_tiny(config, train, few, 16, 3);
  REQUIRE(a.losses.size() == 16);
  const float first = a.losses[0] + a.losses[1] + a.losses[2] + a.losses[3];
  const float last = a.losses[12] + a.losses[13] + a.losses[14] + a.losses[15];
  CHECK(last < first - 0.2f);
  const TinyRun b = train_tiny(config, train, few, 3, 3);
  REQUIRE(std::vector<float>(a.losses.begin(), a.losses.begin() + 3) == b.losses);
  REQUIRE(a.state == b.state);
}
