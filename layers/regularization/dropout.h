// Dropout (torch.nn.Dropout) and DropPath (stochastic depth, timm's drop_path: a whole sample's
// branch is dropped), identity in eval mode. Their masks are counter-based draws
// (dropout_draw.h) keyed by the run's seed, the layer's path, the step and the element or sample
// index: the same config and seed drop the same elements on the CPU and the GPU, eager or in a
// CUDA graph. The trainer sets the seed once and the step before each step's device work.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/fields.h"
#include "layers/layer.h"
#include "layers/regularization/dropout_draw.h"

namespace minidl {

// The current run's dropout seed and step (core/run_context.h; a trainer sets its config's seed).
void set_dropout_seed(uint64_t seed);
uint64_t dropout_seed();
// The step the next draws belong to. On a CUDA `device` it is also queued into that device's
// step word `slot`, which the kernels read, so set it before capturing a graph and before each
// replay (an eager draw requeues the current run's step itself when the word holds another). A
// step of several micro-batches sets each micro-batch's step in a slot of its own (slot j for
// micro-batch j): one graph then holds them all.
void set_dropout_step(int64_t step, Device device = Device::cpu(), int slot = 0);
int64_t dropout_step();
// The device word of the current slot (at a fixed address for graph replays), with the current
// run's step queued into it.
const int64_t* dropout_step_on(Device device);

// A layer's salt: a hash of its module path, so two layers never share a mask.
uint32_t dropout_salt(const std::string& path);
// The draw parameters of a layer with `salt` for the current seed.
DropoutDraw dropout_draw(float p, uint32_t salt, int64_t group);

// y = x * mask / (1 - p) with the mask of `draw` at the current step; differentiable (the
// backward redraws the same mask). Any floating dtype; half on the CPU runs storage-rounded.
Tensor dropout(const Tensor& x, const DropoutDraw& draw);

const LayerDescriptor& dropout_layer();
const LayerDescriptor& drop_path_layer();

// PyTorch's default: nn.Dropout(p=0.5).
struct DropoutSpec {
  double p;
  static const Fields<DropoutSpec>& fields();
};

// timm's default: DropPath(drop_prob=0.0).
struct DropPathSpec {
  double p;
  static const Fields<DropPathSpec>& fields();
};

class Dropout : public Layer<DropoutSpec> {
 public:
  explicit Dropout(double p) : Dropout(DropoutSpec{p}) {}
  explicit Dropout(const DropoutSpec& spec);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;  // "Dropout p=0.1"
  std::optional<LayerWork> work(const Tensor& x, const Tensor& y) const override;
  double p() const { return spec().p; }
};

// Drops each sample (the first dimension) with probability p and scales the kept ones by
// 1/(1-p), timm's drop_path with scale_by_keep.
class DropPath : public Layer<DropPathSpec> {
 public:
  explicit DropPath(double p) : DropPath(DropPathSpec{p}) {}
  explicit DropPath(const DropPathSpec& spec);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;  // "DropPath p=0.1"
  std::optional<LayerWork> work(const Tensor& x, const Tensor& y) const override;
  double p() const { return spec().p; }
};

}  // namespace minidl
