// Trains a small CIFAR-10 net with minidl's C++ API and its own loop: no JSON, no Trainer.
//   train_cifar10 CIFAR10_DIR [--steps N] [--device cpu|cuda|auto] [--out DIR]
// Builds the model from layer classes, feeds it augmented batches from minidl's Loader, steps an
// SGD optimizer under a linear warm-up/decay of the learning rate, evaluates on the test set and
// saves a checkpoint (train/checkpoint.h: resumable by this program's loop) and the weights
// alone (model.safetensors, loadable by PyTorch's safetensors) into --out.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "core/autograd.h"
#include "core/device.h"
#include "core/error.h"
#include "core/init.h"
#include "core/safetensors.h"
#include "core/settings.h"
#include "data/cifar10.h"
#include "data/loader.h"
#include "layers/activation/activation.h"
#include "layers/containers/residual.h"
#include "layers/containers/scale.h"
#include "layers/containers/sequential.h"
#include "layers/conv/conv2d.h"
#include "layers/linear/linear.h"
#include "layers/loss/loss.h"
#include "layers/norm/batchnorm2d.h"
#include "layers/pool/pooling.h"
#include "optim/named_params.h"
#include "optim/sgd.h"
#include "train/checkpoint.h"

using namespace minidl;

namespace {

std::shared_ptr<Module> conv_bn(int64_t in, int64_t out) {
  return std::make_shared<Sequential>(std::vector<std::shared_ptr<Module>>{
      std::make_shared<Conv2d>(in, out, 3, 1, 1, /*bias=*/false),
      std::make_shared<BatchNorm2d>(out, 1e-5, 0.1, true, true, norm::NormActivation::ReLU)});
}

// A ResNet-9-like net at a quarter of the width: conv, pool, a residual block, pool, head.
std::shared_ptr<Module> make_model() {
  auto model = std::make_shared<Sequential>(std::vector<std::shared_ptr<Module>>{
      conv_bn(3, 16), conv_bn(16, 32), std::make_shared<MaxPool2d>(Pool2dGeometry{2, 2, 2, 2, 0, 0}),
      std::make_shared<Residual>(std::vector<std::shared_ptr<Module>>{conv_bn(32, 32), conv_bn(32, 32)}),
      conv_bn(32, 64), std::make_shared<MaxPool2d>(Pool2dGeometry{2, 2, 2, 2, 0, 0}),
      std::make_shared<GlobalMaxPool2d>(), std::make_shared<Linear>(64, 10, /*bias=*/false),
      std::make_shared<Scale>(0.125f)});
  model->assign_paths();  // PyTorch names: "0.0.weight", "3.1.0.weight", ...
  return model;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CIFAR10_DIR [--steps N] [--device cpu|cuda|auto] [--out DIR]\n", argv[0]);
    return 2;
  }
  const std::string data_dir = argv[1];
  int64_t steps = 200;
  std::string device_name = "auto", out = "example_run";
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--steps") steps = std::atoll(argv[i + 1]);
    else if (flag == "--device") device_name = argv[i + 1];
    else if (flag == "--out") out = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown option %s\n", flag.c_str());
      return 2;
    }
  }
  try {
    set_compute_settings({/*deterministic=*/true, /*allow_tf32=*/true});
    const Device device = parse_device(device_name);
    set_init_seed(0);  // the same weights on every run and machine
    std::shared_ptr<Module> model = make_model();
    model->to(device);

    SgdOptions sgd;
    sgd.lr = 0.2;
    sgd.momentum = 0.9;
    sgd.nesterov = true;
    sgd.weight_decay = 5e-4;
    SGD optimizer(named_parameters(*model), sgd);
    optimizer.to(device);

    DataOptions data;
    data.dir = data_dir;
    data.augment.crop_padding = 4;
    data.augment.flip = true;
    const Dataset train_set = load_cifar10(data_dir, Split::Train), test_set = load_cifar10(data_dir, Split::Test);
    Loader train(train_set, LoaderOptions::training(data, 256, /*seed=*/0), device);
    Loader test(test_set, LoaderOptions::evaluation(data, 1000), device);

    int64_t step = 0;
    for (int64_t epoch = 0; step < steps; ++epoch) {
      train.start_epoch(epoch);
      Batch batch;
      while (step < steps && train.next(batch)) {
        // Linear warm-up over the first fifth of the steps, then linear decay to zero.
        const double t = static_cast<double>(step) / static_cast<double>(steps);
        const double lr = sgd.lr * (t < 0.2 ? t / 0.2 : (1 - t) / 0.8);
        Tensor loss = cross_entropy((*model)(batch.images), batch.labels, 0.1f);
        loss.backward();
        optimizer.step(lr);
        optimizer.zero_grad();
        if (step % 50 == 0 || step + 1 == steps)
          std::printf("step %lld  epoch %lld  loss %.4f  lr %.4f\n", static_cast<long long>(step),
                      static_cast<long long>(epoch), loss.item(), lr);
        ++step;
      }
    }

    int64_t correct = 0;
    {
      autograd::NoGradGuard no_grad;
      model->eval();
      test.start_epoch(0);
      Batch batch;
      while (test.next(batch)) correct += count_correct((*model)(batch.images), batch.labels);
      model->train();
    }
    std::printf("test accuracy after %lld steps on %s: %.2f%%\n", static_cast<long long>(step),
                device.str().c_str(), 100.0 * static_cast<double>(correct) / static_cast<double>(test_set.size()));

    std::filesystem::create_directories(out);
    CheckpointInfo info;
    info.step = step;
    save_checkpoint(out + "/checkpoint.safetensors", *model, optimizer, info);
    save_safetensors(out + "/model.safetensors", model->state_dict(), {{"format", "pt"}});
    std::printf("saved %s/checkpoint.safetensors and %s/model.safetensors\n", out.c_str(), out.c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "train_cifar10: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
