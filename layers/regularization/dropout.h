// Dropout (torch.nn.Dropout) and DropPath (stochastic depth, timm's drop_path: a whole sample's
// branch is dropped), identity in eval mode. Their masks are counter-based draws
// (dropout_draw.h) keyed by the run's seed, the layer's path, the step and the element or sample
// index: the same config and seed drop the same elements on the CPU and the GPU, eager or in a
// CUDA graph. Each module draws with the DropoutState handed to it (dropout_state.h): a
// trainer's, whose seed it sets once and whose step before each step's device work.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/fields.h"
#include "layers/layer.h"
#include "layers/regularization/dropout_draw.h"
#include "layers/regularization/dropout_state.h"

namespace minidl {

// A layer's salt: a hash of its module path, so two layers never share a mask.
uint32_t dropout_salt(const std::string& path);
// The draw parameters of a layer with `salt` for the default state's seed.
DropoutDraw dropout_draw(float p, uint32_t salt, int64_t group);

// y = x * mask / (1 - p) with the mask of `draw` at `state`'s step (null: the thread's default
// state); differentiable (the backward redraws the same mask). Any floating dtype; half on the
// CPU runs storage-rounded.
Tensor dropout(const Tensor& x, const DropoutDraw& draw, std::shared_ptr<DropoutState> state = nullptr);

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

class Dropout : public Layer<DropoutSpec>, public DrawsDropout {
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
class DropPath : public Layer<DropPathSpec>, public DrawsDropout {
 public:
  explicit DropPath(double p) : DropPath(DropPathSpec{p}) {}
  explicit DropPath(const DropPathSpec& spec);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;  // "DropPath p=0.1"
  std::optional<LayerWork> work(const Tensor& x, const Tensor& y) const override;
  double p() const { return spec().p; }
};

}  // namespace minidl
