#include "op_harness.h"

#include <algorithm>
#include <cmath>

#include "core/autograd.h"
#include "test_util.h"

namespace minidl::test {

std::vector<OpExample> op_examples() {
  std::vector<OpExample> out;
  for (const LayerDescriptor* layer : layer_descriptors()) {
    const std::vector<LayerExample> examples = layer_examples(*layer);
    for (size_t i = 0; i < examples.size(); ++i)
      out.push_back({layer, examples[i],
                     str(layer->name, " #", i, " ", examples[i].spec.dump(), " on ", shape_str(examples[i].input))});
  }
  return out;
}

std::vector<OpMode> op_modes(const Shape& input) {
  std::vector<OpMode> out;
  for (DType d : {DType::Float32, DType::BFloat16, DType::Float16}) {
    out.push_back({d, MemoryFormat::Contiguous});
    const MemoryFormat last = channels_last_for(static_cast<int64_t>(input.size()));
    if (last != MemoryFormat::Contiguous) out.push_back({d, last});
  }
  return out;
}

std::string mode_name(const OpMode& mode) { return str(dtype_name(mode.dtype), " ", memory_format_name(mode.format)); }

Tensor to_mode(const Tensor& x, const OpMode& mode) {
  if (!is_floating(x.dtype())) return x;
  return x.to(mode.dtype, is_channels_last_format(mode.format) ? channels_last_for(x.dim()) : MemoryFormat::Contiguous);
}

std::shared_ptr<Module> example_module(const LayerExample& e, const nlohmann::json& spec) {
  if (e.before.empty()) return build_layer(spec, "example");
  nlohmann::json list = e.before;
  list.push_back(spec);
  return build_sequential(list, "example");
}

Tensor example_input(const LayerExample& e, uint64_t seed, Device device) {
  if (e.ids_below > 0) return random_ids(e.input, static_cast<int32_t>(e.ids_below), seed, device);
  return random_tensor(e.input, seed, -1.f, 1.f, device);
}

std::shared_ptr<Module> build_example(const LayerExample& e, uint64_t seed) {
  std::shared_ptr<Module> layer = example_module(e, e.spec);
  uint64_t stream = seed;
  for (auto& [name, t] : layer->state_dict()) {
    if (t.dtype() != DType::Float32) continue;
    const bool variance = name.size() >= 11 && name.compare(name.size() - 11, 11, "running_var") == 0;
    t.copy_(random_tensor(t.shape(), ++stream, variance ? 0.5f : -1.f, variance ? 1.5f : 1.f, t.device()));
  }
  return layer;
}

Tensor random_like_mode(const Shape& shape, uint64_t seed, DType round_to, DType dtype, MemoryFormat format,
                        Device device) {
  const MemoryFormat f = is_channels_last_format(format) ? channels_last_for(static_cast<int64_t>(shape.size()))
                                                         : MemoryFormat::Contiguous;
  return random_tensor(shape, seed, -1.f, 1.f, device).to(round_to).to(dtype, f);
}

OpRun run_op(Module& layer, const Tensor& x0, Device device, const OpMode& mode, uint64_t dy_seed, DType round_to) {
  for (auto& [name, p] : layer.named_parameters()) p.set_grad(Tensor());
  layer.train();
  // A fresh leaf: on the CPU to() returns x0 itself, whose gradient would carry over.
  Tensor x = x0.to(device).clone();
  const bool ids = !is_floating(x.dtype());
  if (!ids) x.set_requires_grad(true);
  const Tensor y = layer(to_mode(x, mode));
  autograd::backward(y, random_like_mode(y.shape(), dy_seed, round_to, y.dtype(), y.memory_format(), device));
  OpRun run{{{"y", y.to_vector()}, {"dx", ids ? std::vector<float>() : x.grad().to_vector()}},
            y.shape(),
            y.dtype(),
            y.memory_format()};
  for (auto& [name, p] : layer.named_parameters())
    run.tensors.push_back({"grad." + name, p.grad().defined() ? p.grad().to_vector() : std::vector<float>()});
  for (auto& [name, b] : layer.named_buffers())
    if (is_floating(b.dtype())) run.tensors.push_back({"buffer." + name, b.to_vector()});
  layer.eval();
  {
    autograd::NoGradGuard no_grad;
    run.tensors.push_back({"eval y", layer(to_mode(x0.to(device), mode)).to_vector()});
  }
  layer.train();
  return run;
}

Tolerance mode_tolerance(DType dtype) {
  // One unit in the last place of a value in [1, 2): 2^-7 in bfloat16, 2^-10 in float16.
  switch (dtype) {
    case DType::BFloat16:
      return {2 * std::ldexp(1.0, -7), 8 * std::ldexp(1.0, -7)};
    case DType::Float16:
      return {2 * std::ldexp(1.0, -10), 8 * std::ldexp(1.0, -10)};
    default:
      return {1e-5, 5e-5};
  }
}

std::pair<double, size_t> worst_ratio(const std::vector<float>& got, const std::vector<float>& want, Tolerance tol) {
  double scale = 0;
  for (float v : want) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = tol.rtol * std::fabs(want[i]) + tol.of_max * scale;
    const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double r = diff == 0 ? 0 : diff / bound;
    if (!(r <= worst)) {  // NaN counts as worst
      worst = std::isnan(r) ? INFINITY : r;
      at = i;
    }
  }
  return {worst, at};
}

void require_near(const std::vector<float>& got, const std::vector<float>& want, Tolerance tol,
                  const std::string& what) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  if (got.empty()) return;
  const auto [worst, at] = worst_ratio(got, want, tol);
  INFO("worst element " << at << " of " << got.size() << ": got " << got[at] << ", want " << want[at] << " (" << worst
                        << " times the tolerance)");
  REQUIRE(worst <= 1.0);
}

}  // namespace minidl::test
