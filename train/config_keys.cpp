#include "train/config_keys.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

#include "core/error.h"

namespace minidl {

using nlohmann::json;

std::string ConfigKey::section() const {
  const size_t dot = path.find('.');
  return dot == std::string::npos ? std::string() : path.substr(0, dot);
}

std::string ConfigKey::name() const { return path.substr(path.find('.') + 1); }

namespace {

// Whole numbers print as integers ("1000000", not "1e+06").
std::string number_text(double v) {
  if (std::fabs(v) < 1e15 && v == std::floor(v)) return std::to_string(static_cast<int64_t>(v));
  return str(v);
}

// A range of a "number" key; hi = infinity: no upper bound.
struct Interval {
  double lo;
  bool lo_open;
  double hi;
  bool hi_open;

  bool contains(double v) const {
    return std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  }
  std::string text() const {
    if (std::isinf(hi)) return (lo_open ? "> " : ">= ") + number_text(lo);
    return (lo_open ? "(" : "[") + number_text(lo) + ", " + number_text(hi) + (hi_open ? ")" : "]");
  }
};
constexpr double kUnbounded = std::numeric_limits<double>::infinity();

ConfigKey row(const char* path, const char* type, json fallback, bool required, std::string allowed,
              const char* meaning, const char* documented_in = "") {
  ConfigKey k;
  k.path = path;
  k.type = type;
  k.default_value = std::move(fallback);
  k.required = required;
  k.allowed = std::move(allowed);
  k.meaning = meaning;
  k.documented_in = documented_in;
  return k;
}

ConfigKey flag(const char* path, bool TrainConfig::*member, bool fallback, const char* meaning) {
  ConfigKey k = row(path, "bool", fallback, false, "true, false", meaning);
  k.read = [member, fallback](JsonArgs& a, const std::string& key, TrainConfig& c) {
    c.*member = a.get_bool(key, fallback);
  };
  k.write = [member](const TrainConfig& c) { return json(c.*member); };
  return k;
}

ConfigKey count(const char* path, uint64_t TrainConfig::*member, uint64_t fallback, const char* meaning) {
  ConfigKey k = row(path, "integer", fallback, false, ">= 0", meaning);
  k.read = [member, fallback](JsonArgs& a, const std::string& key, TrainConfig& c) {
    c.*member = a.get_uint(key, fallback);
  };
  k.write = [member](const TrainConfig& c) { return json(c.*member); };
  return k;
}

ConfigKey integer(const char* path, int64_t TrainConfig::*member, int64_t fallback, int64_t lo, int64_t hi,
                  const char* meaning) {
  const std::string allowed = hi == INT64_MAX ? str(">= ", lo) : str(lo, "..", hi);
  ConfigKey k = row(path, "integer", fallback, false, allowed, meaning);
  k.read = [member, fallback, lo, hi](JsonArgs& a, const std::string& key, TrainConfig& c) {
    c.*member = a.get_int(key, fallback, lo, hi);
  };
  k.write = [member](const TrainConfig& c) { return json(c.*member); };
  return k;
}

// A number in `range`; `fallback` NaN: the key is off when left out (the member holds 0 and
// config.json leaves it out). `note` follows the range in docs and errors.
ConfigKey number(const char* path, double TrainConfig::*member, double fallback, Interval range, const char* note,
                 const char* meaning) {
  const bool off = std::isnan(fallback);
  const std::string allowed = range.text() + (*note ? str(" (", note, ")") : std::string());
  ConfigKey k = row(path, "number", off ? json() : json(fallback), false, allowed, meaning);
  k.read = [member, fallback, off, range, allowed](JsonArgs& a, const std::string& key, TrainConfig& c) {
    if (off && !a.has(key)) {
      c.*member = 0;
      return;
    }
    const double v = a.get_float(key, off ? 0 : fallback);
    MINIDL_CHECK(range.contains(v), a.key_path(key), ": expected a number ", std::isinf(range.hi) ? "" : "in ", allowed,
                 ", got ", v);
    c.*member = v;
  };
  k.write = [member, off](const TrainConfig& c) { return off && c.*member == 0 ? json() : json(c.*member); };
  return k;
}

template <typename E>
ConfigKey choice(const char* path, E TrainConfig::*member, E fallback, const char* meaning) {
  ConfigKey k = row(path, "string", to_string(fallback), false, enum_choices<E>(), meaning);
  k.read = [member, fallback](JsonArgs& a, const std::string& key, TrainConfig& c) {
    c.*member = from_string<E>(a.get_string(key, to_string(fallback)), a.key_path(key));
  };
  k.write = [member](const TrainConfig& c) { return json(to_string(c.*member)); };
  return k;
}

// "auto" (std::nullopt, resolved once the run's device is known: resolve_for_device) or one of
// E's names; "auto" is the default.
template <typename E>
ConfigKey choice_or_auto(const char* path, std::optional<E> TrainConfig::*member, const char* meaning) {
  ConfigKey k = row(path, "string", "auto", false, enum_choices_or_auto<E>(), meaning);
  k.read = [member](JsonArgs& a, const std::string& key, TrainConfig& c) {
    c.*member = from_string_or_auto<E>(a.get_string(key, "auto"), a.key_path(key));
  };
  k.write = [member](const TrainConfig& c) { return json(to_string_or_auto(c.*member)); };
  return k;
}

ConfigKey text(const char* path, std::string TrainConfig::*member, const char* fallback, const char* allowed,
               const char* meaning) {
  ConfigKey k = row(path, "string", fallback, false, allowed, meaning);
  k.read = [member, fallback](JsonArgs& a, const std::string& key, TrainConfig& c) {
    c.*member = a.get_string(key, fallback);
  };
  k.write = [member](const TrainConfig& c) { return json(c.*member); };
  return k;
}

// A section another part of minidl parses, kept as JSON; `fallback` null and not `required`: off.
ConfigKey object(const char* path, json TrainConfig::*member, json fallback, bool required, const char* documented_in,
                 const char* meaning) {
  ConfigKey k = row(path, "object", fallback, required, "", meaning, documented_in);
  k.read = [member, fallback, required](JsonArgs& a, const std::string& key, TrainConfig& c) {
    c.*member = required || a.has(key) ? a.get_object(key, required) : fallback;
  };
  k.write = [member](const TrainConfig& c) { return c.*member; };
  return k;
}

ConfigKey rule_list(const char* path, json TrainConfig::*member, const char* meaning) {
  ConfigKey k = row(path, "list", json::array(), false, "", meaning, "train/param_rules.h");
  k.read = [member](JsonArgs& a, const std::string& key, TrainConfig& c) {
    c.*member = json::array();
    if (!a.has(key)) return;
    const json& list = a.get_json(key);
    MINIDL_CHECK(list.is_array(), a.key_path(key), ": expected a list of rule objects, got ", list.dump());
    c.*member = list;
  };
  k.write = [member](const TrainConfig& c) { return c.*member; };
  return k;
}

ConfigKey written_when_set(ConfigKey k) {
  k.written_at_default = false;
  return k;
}

std::vector<ConfigKey> make_config_keys() {
  using C = TrainConfig;
  std::vector<ConfigKey> keys = {
      count("seed", &C::seed, 0,
            "seeds every random draw (initialization, data order, augmentation, dropout): same config and seed, "
            "same bits"),
      flag("deterministic", &C::deterministic, true,
           "only algorithms that give the same bits every run (cuDNN's deterministic ones; minidl's own kernels "
           "always are); false lets cuDNN pick its fastest"),
      flag("allow_tf32", &C::allow_tf32, true, "on a GPU, float32 convolutions and matrix products may use TF32"),
      flag("cuda_graph", &C::cuda_graph, true,
           "on a GPU, replay each training step and full evaluation batch as one CUDA graph, the bits of the "
           "eager step (docs/perf/cuda_graph.md); no effect on the CPU"),
      flag("norm_single_read", &C::norm_single_read, true,
           "on a GPU, BatchNorm2d, GroupNorm and LayerNorm run their single-read kernels where faster "
           "(core/settings.h, docs/perf/norm.md); false: the three-launch kernels everywhere"),
      choice_or_auto("precision", &C::precision,
                     "activation type with PyTorch autocast's rules; statistics, loss, optimizer and master weights "
                     "stay float32; fp16 adds dynamic loss scaling; auto: bf16 on a GPU of compute capability 8.0 "
                     "or later, else fp32; config.json records the choice (docs/precision.md)"),
      choice_or_auto("memory_format", &C::memory_format,
                     "activation layout: NCHW, or NHWC from the model's input on; auto: channels_last on a GPU, "
                     "contiguous on the CPU; config.json records the choice (docs/precision.md)"),
      text("device", &C::device, "auto", "\"auto\", \"cpu\" or \"cuda\" (checked when the run starts)",
           "where the run trains (auto: a GPU when there is one); --device overrides it"),
      number("epochs", &C::epochs, 1, {0, true, static_cast<double>(kMaxEpochs), false}, "",
             "passes over the training set; fractions allowed (9.9): the run takes ceil(epochs * steps per "
             "epoch) steps"),
      integer("batch_size", &C::batch_size, 128, 1, kMaxBatchSize,
              "the global batch: all ranks' micro-batches of one optimizer step"),
      written_when_set(integer(
          "accumulate_steps", &C::accumulate_steps, 1, 1, kMaxBatchSize,
          "micro-batches per optimizer step on each rank, their gradients summed in order (k on one device give "
          "the bits of k ranks; docs/distributed.md); must divide batch_size")),
      written_when_set(number(
          "bucket_mb", &C::bucket_mb, 25, {0, false, 1 << 20, false}, "",
          "data parallel: the gradients are reduced in buckets of about this many MiB, each as soon as backward "
          "has completed it (PyTorch DDP's bucket_cap_mb); 0: one reduction after backward. The bits do not "
          "depend on it (docs/distributed.md)")),
      object("data", &C::data, json::object(), false, "data/options.h, docs/data.md",
             "the data set (format, folder, limits), normalization and training augmentation"),
      object("model", &C::model, json(), true, "`minidl layers`, docs/layers.json",
             "the network: {\"layers\": [layer specs, PyTorch names]}"),
      number("loss.label_smoothing", &C::label_smoothing, 0, {0, false, 1, true}, "",
             "cross-entropy label smoothing, as torch.nn.CrossEntropyLoss(label_smoothing=...)"),
      object("optimizer", &C::optimizer, json(), true, "optim/optimizer.h, optim/param_groups.h",
             "the optimizer (\"type\": SGD, AdamW or Muon) and its parameter groups"),
      object("schedule", &C::schedule, {{"type", "constant"}}, false, "optim/optimizer.h",
             "the learning-rate schedule: a factor of the optimizer's lr per step"),
      written_when_set(rule_list("init", &C::init,
                                 "parameter initialization rules applied to the built model (patch whitening, "
                                 "dirac, constants)")),
      written_when_set(rule_list("freeze", &C::freeze,
                                 "parameters that do not train (no gradient, update or weight decay), for the "
                                 "whole run or part of it")),
      written_when_set(object("lookahead", &C::lookahead, json(), false, "optim/lookahead.h",
                              "lookahead weight averaging; left out: off")),
      written_when_set(object("grad_scaler", &C::grad_scaler, json(), false, "optim/grad_scaler.h",
                              "fp16 dynamic loss scaling (left out: PyTorch GradScaler's defaults); precision "
                              "\"fp16\" only")),
      written_when_set(number("grad_clip", &C::grad_clip, std::nan(""), {0, true, kUnbounded, false},
                              "leave the key out for no clipping",
                              "clip the gradients to this global 2-norm before each update, as "
                              "torch.nn.utils.clip_grad_norm_ (optim/grad_clip.h)")),
      choice("eval.tta", &C::tta, TtaMode::None,
             "test-time augmentation: the views of each test image whose logits are averaged (data/tta.h)"),
      number("eval.tta_share", &C::tta_share, 1, {0, true, 1, false}, "",
             "selective TTA: below 1, one plain pass classifies every test image and only this share of them, the "
             "least confident (lowest largest softmax probability), is classified again with eval.tta's views, as "
             "the CIFAR-10 speedrun record does with 0.25 (Trainer::selective_tta)"),
      choice("eval.tta_weights", &C::tta_weights, TtaWeights::Mode,
             "how eval.tta's views are weighted: mode: the mode's own weights (data/tta.h); equal: 1 / views each, "
             "the mean of their logits"),
      integer("eval.batch_size", &C::eval_batch_size, 1000, 1, kMaxBatchSize, "images per evaluation batch"),
      text("output.dir", &C::output_dir, "runs/run", "a folder", "the run folder; --output overrides it"),
      flag("output.progress", &C::progress, true, "a progress bar while stderr is a terminal"),
      written_when_set(integer("checkpoint.every_steps", &C::checkpoint_every_steps, 0, 0, INT64_MAX,
                               "also write a checkpoint every this many steps (0: off); one is written at every "
                               "epoch's end (train/checkpoint.h)")),
      written_when_set(number("checkpoint.every_minutes", &C::checkpoint_every_minutes, 0, {0, false, 1000000, false},
                              "0: off", "also write a checkpoint every this many minutes")),
      written_when_set(integer("checkpoint.keep", &C::checkpoint_keep, 1, 1, 1000, "checkpoints kept")),
      flag("log.tensorboard", &C::tensorboard, false, "TensorBoard event files in the run folder"),
  };
  // Whole epochs print as integers, as they were written.
  for (ConfigKey& k : keys)
    if (k.path == "epochs") {
      k.default_value = 1;
      k.write = [](const TrainConfig& c) {
        return c.epochs == std::floor(c.epochs) ? json(static_cast<int64_t>(c.epochs)) : json(c.epochs);
      };
    }
  // The model holds its layer list and nothing else; the layers are checked when they are built.
  for (ConfigKey& k : keys)
    if (k.path == "model")
      k.read = [](JsonArgs& a, const std::string& key, TrainConfig& c) {
        const json& model = a.get_object(key, true);
        JsonArgs args(model, a.key_path(key));
        MINIDL_CHECK(args.has("layers"), args.key_path("layers"), ": required list of layers is missing");
        args.get_json("layers");
        args.finish();
        c.model = model;
      };
  return keys;
}

// Markdown table cells hold no '|' and no line breaks.
std::string cell(const std::string& s) {
  std::string out;
  for (char ch : s) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
  return out;
}

}  // namespace

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> keys = make_config_keys();
  return keys;
}

std::string config_reference_markdown() {
  std::string md =
      "<!-- Generated by `minidl config --doc` from train/config_keys.cpp; a test fails when it differs. -->\n"
      "# The run config\n\n"
      "A run config is one JSON object (`configs/*.json`). Every key below is optional unless its default says "
      "required; an unknown key or a wrong type is an error naming its path, and `--set key.path=value` overrides "
      "any key (README.md). A run folder's `config.json` holds the resolved config: every key with its value "
      "(an `\"auto\"` precision or memory_format as chosen for the run's device), except those marked \"written "
      "when set\", which appear only when they differ from their default (a section of such keys appears whole). Sections that another part of minidl parses (data, model, "
      "optimizer, ...) name where their own keys are documented; `config.json` holds them resolved too, every "
      "default filled in, except data keys written only when set (`data.format` when not `\"cifar10\"`, "
      "`data.test_limit` when above 0, a format's own keys for that format only), so a CIFAR-10 run's "
      "config.json reads as it always has.\n\n"
      "| Key | Type | Default | Allowed | Meaning |\n"
      "|---|---|---|---|---|\n";
  for (const ConfigKey& k : config_keys()) {
    const std::string fallback = k.required                  ? "required"
                                 : k.default_value.is_null() ? "not set"
                                                             : "`" + k.default_value.dump() + "`";
    std::string meaning = k.meaning;
    if (!k.documented_in.empty()) meaning += ". Keys: " + k.documented_in;
    if (!k.written_at_default) meaning += ". Written when set";
    md +=
        str("| `", k.path, "` | ", k.type, " | ", cell(fallback), " | ", cell(k.allowed), " | ", cell(meaning), " |\n");
  }
  return md;
}

}  // namespace minidl
