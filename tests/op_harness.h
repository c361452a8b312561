// The op harness's pieces (tests/test_op_harness.cpp on the CPU, test_op_harness_cuda.cpp on the
// GPU): every example of every registered layer type (layers/layer_descriptor.h), the dtypes and
// memory formats it runs in, one forward and backward of it recorded as float values, and the
// comparison with a tolerance per dtype.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "layers/registry.h"

namespace minidl::test {

struct OpExample {
  const LayerDescriptor* layer;
  LayerExample example;
  std::string name;  // "Conv2d #2 {...spec...} on (3, 5, 9, 7)"
};
// Every example of every layer type in the registry's table.
std::vector<OpExample> op_examples();

struct OpMode {
  DType dtype;
  MemoryFormat format;
};
// float32, bfloat16 and float16, each contiguous and, for a 4-d input, channels_last (for a 5-d
// one, channels_last_3d): every layer
// takes each (half inputs run in their own type, or storage-rounded where a layer has no half
// kernel: core/storage_rounding.h).
std::vector<OpMode> op_modes(const Shape& input);
std::string mode_name(const OpMode& mode);
// x in the mode's dtype, and channels-last for its rank (channels_last_for) in a channels-last
// mode; token ids stay int32.
Tensor to_mode(const Tensor& x, const OpMode& mode);

// The module an example runs: the layer built from `spec` (the example's, or one printed back),
// or, for a layer that needs others before it in its list (an LMHead's Embedding), all of them as
// one Sequential.
std::shared_ptr<Module> example_module(const LayerExample& e, const nlohmann::json& spec);

// The example's module with every floating parameter and buffer drawn from `seed`: running
// variances in [0.5, 1.5], everything else in [-1, 1]. The same values on every build.
std::shared_ptr<Module> build_example(const LayerExample& e, uint64_t seed);

// The example's input drawn from `seed`: values in [-1, 1), or int32 ids in [0, e.ids_below) for
// a layer that takes token ids.
Tensor example_input(const LayerExample& e, uint64_t seed, Device device = Device::cpu());

// Uniform values in [-1, 1) from `seed`, rounded to `round_to`, as a `dtype` tensor of `format`.
Tensor random_like_mode(const Shape& shape, uint64_t seed, DType round_to, DType dtype, MemoryFormat format,
                        Device device);

// One training-mode forward and backward of `layer` on x0 (float32 values: a fresh leaf is made
// of them on `device`, cast to the mode; int32 token ids are fed as they are and "dx" is empty),
// with an output gradient drawn from `dy_seed` and rounded to `round_to`; then an eval-mode
// forward. Each result as float values, by name: "y", "dx",
// "grad.<parameter>", "buffer.<buffer>" (after the training forward), "eval y".
struct OpRun {
  std::vector<std::pair<std::string, std::vector<float>>> tensors;
  Shape y_shape;
  DType y_dtype;
  MemoryFormat y_format;
};
OpRun run_op(Module& layer, const Tensor& x0, Device device, const OpMode& mode, uint64_t dy_seed, DType round_to);

// Per element, |got - want| <= rtol |want| + of_max * max |want| (NaN fails): relative to each
// element and to the tensor's scale, so cancellation near zero is no failure but a misplaced
// element is.
struct Tolerance {
  double rtol, of_max;
};
// Two runs of one layer in a mode: CUDA against the CPU, or (half types) the half run against the
// float32 run on the same rounded values. float32 (TF32 off) differs in the order of float32
// sums: 1e-5 relative, 5e-5 of the scale. A half type rounds each op's result on the way, and the
// layers after it (a LayerNorm's gradients most) grow a unit in the last place: 2 units relative,
// 8 of the scale (the largest seen on the CPU is about 5). A misplaced element is off by the
// scale itself.
Tolerance mode_tolerance(DType dtype);
// The largest |got - want| over its bound, and where (NaN counts as infinitely far).
std::pair<double, size_t> worst_ratio(const std::vector<float>& got, const std::vector<float>& want, Tolerance tol);
void require_near(const std::vector<float>& got, const std::vector<float>& want, Tolerance tol,
                  const std::string& what);

}  // namespace minidl::test
