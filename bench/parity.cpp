// `minidl parity`: runs one layer (forward + backward) or one training step of a whole model on
// tensors from a safetensors file and writes every result PyTorch can be compared against.
#include "bench/parity.h"

#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "train/config.h"
#include "train/precision.h"
#include "core/autocast.h"
#include "core/autograd.h"
#include "core/error.h"
#include "core/json_limits.h"
#include "core/safetensors.h"
#include "core/settings.h"
#include "layers/loss/loss.h"
#include "layers/module.h"
#include "layers/registry.h"
#include "optim/grad_clip.h"
#include "optim/grad_scaler.h"
#include "optim/named_params.h"
#include "optim/optimizer.h"

namespace minidl {
namespace {

using Named = std::vector<std::pair<std::string, Tensor>>;

const char* kUsage =
    "usage: minidl parity --spec LAYER_JSON --in IN.safetensors --out OUT.safetensors\n"
    "                     [--device cpu|cuda] [--train|--eval] [--no-tf32]\n"
    "                     [--precision auto|fp32|bf16|fp16] [--memory-format auto|contiguous|channels_last]\n"
    "       minidl parity --config CONFIG.json --in IN.safetensors --out OUT.safetensors\n"
    "                     [--device cpu|cuda] [--no-tf32] [--precision P] [--memory-format F]\n"
    "LAYER_JSON is a file or the JSON text itself; see bench/parity.h and docs/parity.md.";

struct ParityArgs {
  std::string spec, config, in, out, device = "cpu";
  // A model: empty takes the config's; a layer: fp32, contiguous. "auto": what a run on the device
  // would choose (train/precision.h).
  std::string precision, memory_format;
  bool train = true;
  bool mode_given = false;
  bool no_tf32 = false;
  bool help = false;
};

ParityArgs parse_args(const std::vector<std::string>& args) {
  ParityArgs a;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& w = args[i];
    auto value = [&]() -> std::string {
      MINIDL_CHECK(i + 1 < args.size(), "minidl parity: ", w, " needs a value\n", kUsage);
      return args[++i];
    };
    if (w == "--spec") a.spec = value();
    else if (w == "--config") a.config = value();
    else if (w == "--in") a.in = value();
    else if (w == "--out") a.out = value();
    else if (w == "--device") a.device = value();
    else if (w == "--train" || w == "--eval") { a.train = w == "--train"; a.mode_given = true; }
    else if (w == "--no-tf32") a.no_tf32 = true;
    else if (w == "--precision") a.precision = value();
    else if (w == "--memory-format") a.memory_format = value();
    else if (w == "--help" || w == "-h") a.help = true;
    else fail(str("minidl parity: unknown argument '", w, "'\n", kUsage));
  }
  if (a.help) return a;
  MINIDL_CHECK(a.spec.empty() != a.config.empty(),
               "minidl parity: give exactly one of --spec (one layer) and --config (a model)\n", kUsage);
  MINIDL_CHECK(!a.in.empty() && !a.out.empty(), "minidl parity: --in and --out are required\n", kUsage);
  MINIDL_CHECK(a.config.empty() || !a.mode_given,
               "minidl parity: --train/--eval apply to --spec only (a model step always trains)");
  if (!a.spec.empty()) {
    if (a.precision.empty()) a.precision = "fp32";
    if (a.memory_format.empty()) a.memory_format = "contiguous";
  }
  // A wrong name is refused before any file is read.
  from_string_or_auto<Precision>(a.precision.empty() ? "auto" : a.precision, "precision");
  from_string_or_auto<MemoryFormat>(a.memory_format.empty() ? "auto" : a.memory_format, "memory_format");
  return a;
}

nlohmann::json read_spec(const std::string& spec) {
  const size_t first = spec.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && spec[first] == '{') {
    return parse_json_limited(spec, "minidl parity: --spec text");
  }
  return read_json_file(spec);
}

// Loads the module's parameters and buffers from `in`, which must hold all of them; any tensor
// of `in` that is neither a state tensor nor one of `inputs` is an error, so a misspelt name
// cannot silently leave a layer at its random init.
void load_state(Module& m, const SafeTensors& in, const std::set<std::string>& inputs,
                const std::string& in_path) {
  std::set<std::string> names;
  std::string known;
  for (const auto& [name, t] : m.state_dict()) {
    names.insert(name);
    known += (known.empty() ? "" : ", ") + name;
  }
  Named state;
  for (const auto& [name, t] : in.tensors) {
    if (names.count(name)) state.emplace_back(name, t);
    else
      MINIDL_CHECK(inputs.count(name), "minidl parity: '", in_path, "' has tensor '", name,
                   "', which is neither an input nor a parameter or buffer of the model (",
                   known.empty() ? "it has none" : known, ")");
  }
  m.load_state_dict(state);
}

// What the file holds of a result: float32 in (N, C, H, W) order, whatever type and layout it
// had (numpy reads neither bfloat16 nor strides).
Tensor as_float32_contiguous(const Tensor& t) { return t.to(DType::Float32, MemoryFormat::Contiguous); }

int run_layer(const ParityArgs& a, Device device) {
  const nlohmann::json spec = read_spec(a.spec);
  std::shared_ptr<Module> layer = build_layer(spec, "spec");
  layer->assign_paths();
  const SafeTensors in = load_safetensors(a.in);
  load_state(*layer, in, {"input", "grad_output"}, a.in);
  layer->to(device);
  layer->train(a.train);

  // The input is float32 (the leaf whose gradient is reported), or int32 token ids (no gradient);
  // the layer sees it in the memory format asked for, under autocast for bf16/fp16 as the trainer
  // runs a model (core/autocast.h).
  const DType dtype = activation_dtype(from_string<Precision>(a.precision, "precision"));
  const MemoryFormat format = from_string<MemoryFormat>(a.memory_format, "memory_format");
  Tensor x = find_tensor(in, "input", a.in).to(device);
  const bool ids = x.dtype() == DType::Int32;
  if (!ids) x.set_requires_grad(true);
  Tensor y;
  {
    const AutocastGuard autocast(dtype);
    y = (*layer)(x.dim() == 4 ? x.to(format) : x);
  }
  const Tensor dy = find_tensor(in, "grad_output", a.in).to(device);
  MINIDL_CHECK(dy.shape() == y.shape(), "minidl parity: '", a.in, "' grad_output has shape ",
               shape_str(dy.shape()), " but the layer's output has shape ", shape_str(y.shape()));
  autograd::backward(y, dy.to(y.dtype()));

  Named out{{"output", y.detach()}};
  if (!ids) {
    MINIDL_CHECK(x.grad().defined(), "minidl parity: no gradient reached the input");
    out.emplace_back("grad_input", x.grad());
  }
  for (const auto& [name, p] : layer->named_parameters()) {
    MINIDL_CHECK(p.grad().defined(), "minidl parity: no gradient reached parameter '", name, "'");
    out.emplace_back("grad." + name, p.grad());
  }
  for (const auto& [name, b] : layer->named_buffers()) out.emplace_back("buffer." + name, b);
  for (auto& [name, t] : out) t = as_float32_contiguous(t);
  save_safetensors(a.out, out,
                   {{"minidl_parity", "layer"},
                    {"spec", spec.dump()},
                    {"device", device.str()},
                    {"mode", a.train ? "train" : "eval"},
                    {"precision", a.precision},
                    {"memory_format", a.memory_format},
                    {"allow_tf32", compute_settings().allow_tf32 ? "true" : "false"}});
  std::cout << "minidl parity: " << layer->describe() << " on " << device.str() << " ("
            << (a.train ? "train" : "eval") << "): input " << shape_str(x.shape()) << " -> output "
            << shape_str(y.shape()) << ", wrote " << out.size() << " tensors to " << a.out << "\n";
  return 0;
}

int run_model(const ParityArgs& a, Device device) {
  TrainConfig cfg = parse_train_config(read_json_file(a.config));
  if (!a.precision.empty()) cfg.precision = from_string<Precision>(a.precision, "precision");
  if (!a.memory_format.empty()) cfg.memory_format = from_string<MemoryFormat>(a.memory_format, "memory_format");
  cfg = resolve_for_device(cfg, device);
  MINIDL_CHECK(cfg.model.is_object() && cfg.model.contains("layers"), "minidl parity: '", a.config,
               "' has no model.layers");
  set_compute_settings({cfg.deterministic, cfg.allow_tf32 && !a.no_tf32});

  std::shared_ptr<Module> model = build_sequential(cfg.model["layers"], "model.layers");
  model->assign_paths();
  const SafeTensors in = load_safetensors(a.in);
  load_state(*model, in, {"input", "labels"}, a.in);
  model->to(device);
  model->train(true);
  std::unique_ptr<Optimizer> optimizer = make_optimizer(cfg.optimizer, named_parameters(*model), "optimizer");
  optimizer->to(device);

  const Tensor x = find_tensor(in, "input", a.in).to(device);
  const Tensor labels = find_tensor(in, "labels", a.in);
  MINIDL_CHECK(labels.dtype() == DType::Int32, "minidl parity: '", a.in,
               "' labels must be int32, got ", dtype_name(labels.dtype()));
  // The trainer's step (train/trainer.cpp): the forward under autocast in the run's memory format,
  // for fp16 a backward from the loss scale with the gradients unscaled, then the config's
  // gradient clipping, then the update.
  Tensor logits;
  {
    const AutocastGuard autocast(activation_dtype(*cfg.precision));
    logits = (*model)(x.to(*cfg.memory_format));
  }
  const Tensor loss = cross_entropy(logits, labels.to(device), static_cast<float>(cfg.label_smoothing));
  bool skipped = false;
  std::vector<Tensor> grads;
  if (cfg.precision == Precision::Fp16) {
    GradScaler scaler(GradScalerOptions::from_json(cfg.grad_scaler, "grad_scaler"), device);
    autograd::backward(loss, scaler.backward_seed());
    for (const auto& [name, p] : model->named_parameters())
      if (p.grad().defined()) grads.push_back(p.grad());
    scaler.unscale(grads);
    skipped = scaler.found_inf();
  } else {
    loss.backward();
    for (const auto& [name, p] : model->named_parameters())
      if (p.grad().defined()) grads.push_back(p.grad());
  }
  // The recorded gradients are the clipped ones, as the update sees them (PyTorch's recipe:
  // unscale, clip_grad_norm_, step).
  if (cfg.grad_clip > 0) {
    std::vector<Tensor> params;
    for (const auto& [name, p] : model->named_parameters()) params.push_back(p);
    GradClipper(cfg.grad_clip, params, device).clip(grads);
  }
  MINIDL_CHECK(!skipped, "minidl parity: the fp16 step's gradients hold an inf or NaN at the initial loss scale, so "
               "the trainer would skip it; nothing to compare");

  Named out{{"loss", loss.detach()}, {"output", logits.detach()}};
  // Gradients are copied before the step, which may update them in place (weight decay).
  for (const auto& [name, p] : model->named_parameters()) {
    MINIDL_CHECK(p.grad().defined(), "minidl parity: no gradient reached parameter '", name, "'");
    out.emplace_back("grad." + name, p.grad().clone());
  }
  const double lr = optimizer->base_lr();
  optimizer->step(lr);
  for (const auto& [name, p] : model->named_parameters()) out.emplace_back("param." + name, p.detach());
  for (const auto& [name, b] : model->named_buffers()) out.emplace_back("buffer." + name, b);
  for (auto& [name, t] : out) t = as_float32_contiguous(t);
  save_safetensors(a.out, out,
                   {{"minidl_parity", "model"},
                    {"config", a.config},
                    {"precision", to_string(*cfg.precision)},
                    {"memory_format", to_string(*cfg.memory_format)},
                    {"device", device.str()},
                    {"lr", str(lr)},
                    {"allow_tf32", compute_settings().allow_tf32 ? "true" : "false"}});
  std::cout << "minidl parity: model of " << model->children().size() << " layers on " << device.str()
            << ", batch " << x.size(0) << ": loss " << loss.item() << ", one " << cfg.optimizer.value("type", "")
            << " step at lr " << lr << ", wrote " << out.size() << " tensors to " << a.out << "\n";
  return 0;
}

}  // namespace

int parity_main(const std::vector<std::string>& args) {
  ParityArgs a = parse_args(args);
  if (a.help) {
    std::cout << kUsage << "\n";
    return 0;
  }
  const Device device = parse_device(a.device);
  // The output's metadata records the choice.
  if (a.precision == "auto") a.precision = to_string(auto_precision(device.type, compute_capability(device)));
  if (a.memory_format == "auto") a.memory_format = to_string(auto_memory_format(device.type));
  set_compute_settings({true, !a.no_tf32});
  return a.spec.empty() ? run_model(a, device) : run_layer(a, device);
}

}  // namespace minidl
