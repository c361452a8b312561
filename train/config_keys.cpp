#include "train/config_keys.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

#include "core/error.h"
#include "core/field_kinds.h"
#include "core/json_limits.h"
#include "core/type_table.h"
#include "data/options.h"
#include "optim/grad_scaler.h"
#include "optim/lookahead.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "train/param_rules.h"

namespace minidl {

using nlohmann::json;

namespace {

using C = TrainConfig;

// A number that is off when left out (the member holds 0 and config.json leaves it out).
Field<C> number_or_off(const char* path, double C::*member, Interval range, const char* note, const char* meaning) {
  const std::string allowed = range.text() + str(" (", note, ")");
  Field<C> k = written_when_set(custom_field<C>(path, "float", nullptr, allowed, meaning));
  k.required = false;
  k.read = [member, range, allowed](JsonArgs& a, const std::string& key, C& c) {
    c.*member = 0;
    if (!a.has(key)) return;
    const double v = a.get_float(key);
    if (!range.contains(v)) fail_range(a, key, "a number", allowed, str(v));
    c.*member = v;
  };
  k.write = [member](const C& c) { return c.*member == 0 ? std::nullopt : std::optional<json>(c.*member); };
  return k;
}

// A section another part of minidl reads from its own table, kept as JSON until then: `children`
// are that table's rows, for the docs. `fallback` null and not `required`: off when left out.
Field<C> object(const char* path, json C::*member, json fallback, bool required, std::vector<FieldInfo> children,
                const char* meaning) {
  Field<C> k = custom_field<C>(path, "object", fallback, "", meaning);
  k.required = required;
  k.children = std::move(children);
  k.read = [member, fallback, required](JsonArgs& a, const std::string& key, C& c) {
    c.*member = required || a.has(key) ? a.get_object(key, required) : fallback;
  };
  k.write = [member](const C& c) { return (c.*member).is_null() ? std::nullopt : std::optional<json>(c.*member); };
  return k;
}

Field<C> rule_list(const char* path, json C::*member, std::vector<FieldInfo> children, const char* meaning) {
  Field<C> k = written_when_set(custom_field<C>(path, "list", json::array(), "", meaning));
  k.children = std::move(children);
  k.read = [member](JsonArgs& a, const std::string& key, C& c) {
    c.*member = json::array();
    if (!a.has(key)) return;
    const json& list = a.get_json(key);
    MINIDL_CHECK(list.is_array(), a.key_path(key), ": expected a list of rule objects, got ", list.dump());
    c.*member = list;
  };
  k.write = [member](const C& c) { return std::optional<json>(c.*member); };
  return k;
}

// An integer in `range` that is off while left out (std::nullopt; config.json leaves it out).
Field<C> optional_integer(const char* path, std::optional<int64_t> C::*member, IntRange range, const char* meaning) {
  Field<C> k = written_when_set(custom_field<C>(path, "int", nullptr, range.text(), meaning));
  k.required = false;
  k.read = [member, range](JsonArgs& a, const std::string& key, C& c) {
    c.*member = std::nullopt;
    if (!a.has(key)) return;
    const int64_t v = a.get_int(key);
    if (!range.contains(v)) fail_range(a, key, "an integer", range.text(), std::to_string(v));
    c.*member = v;
  };
  k.write = [member](const C& c) { return c.*member ? std::optional<json>(*(c.*member)) : std::nullopt; };
  return k;
}

// init_from's keys: a file, which of its tensors, under which names (train/init_from.h); each
// written only when set, so the section is left out of a run without it.
std::vector<Field<C>> init_from_keys() {
  Field<C> path = custom_field<C>("init_from.path", "string", "", "a run folder or a .safetensors file",
                                  "start from these trained weights (a run folder's model.safetensors, or any "
                                  "safetensors file with PyTorch state-dict names), loaded by name over the "
                                  "initialized model; \"\": off");
  path.read = [](JsonArgs& a, const std::string& key, C& c) { c.init_from.path = a.get_string(key, ""); };
  path.write = [](const C& c) { return std::optional<json>(c.init_from.path); };
  Field<C> skip = custom_field<C>("init_from.skip", "list", json::array(), "patterns, as optimizer groups' match",
                                  "model tensors that keep their initialization (a new head: [\"8.*\"]): a dotted "
                                  "suffix, or a glob with * and ? over the whole name");
  skip.read = [](JsonArgs& a, const std::string& key, C& c) {
    c.init_from.skip.clear();
    if (!a.has(key)) return;
    const json& list = a.get_json(key);
    MINIDL_CHECK(list.is_array(), a.key_path(key), ": expected a list of strings, got ", json_excerpt(list));
    for (size_t i = 0; i < list.size(); ++i) {
      MINIDL_CHECK(list[i].is_string() && !list[i].get<std::string>().empty(), a.key_path(key), "[", i,
                   "]: expected a non-empty string, got ", json_excerpt(list[i]));
      c.init_from.skip.push_back(list[i].get<std::string>());
    }
  };
  skip.write = [](const C& c) { return std::optional<json>(c.init_from.skip); };
  Field<C> map = custom_field<C>("init_from.map", "object", json::object(), "{\"file prefix\": \"model prefix\"}",
                                 "renames the file's tensors first: a name equal to a key or starting with the key "
                                 "and a dot has that prefix replaced (\"module\": \"\" drops a DDP prefix)");
  map.read = [](JsonArgs& a, const std::string& key, C& c) {
    c.init_from.map.clear();
    if (!a.has(key)) return;
    const json& m = a.get_json(key);
    MINIDL_CHECK(m.is_object(), a.key_path(key), ": expected an object of names {\"from\": \"to\"}, got ",
                 json_excerpt(m));
    for (const auto& item : m.items()) {
      MINIDL_CHECK(!item.key().empty() && item.value().is_string(), a.key_path(key), ".", text_excerpt(item.key()),
                   ": expected a non-empty name mapped to a string, got ", json_excerpt(item.value()));
      c.init_from.map.emplace_back(item.key(), item.value().get<std::string>());
    }
  };
  map.write = [](const C& c) {
    json m = json::object();
    for (const auto& [from, to] : c.init_from.map) m[from] = to;
    return std::optional<json>(m);
  };
  Field<C> strict = custom_field<C>("init_from.strict", "bool", true, "",
                                    "every model tensor not skipped must be in the file and every file tensor in the "
                                    "model (PyTorch's load_state_dict strict); a shape that differs is an error "
                                    "either way");
  strict.read = [](JsonArgs& a, const std::string& key, C& c) { c.init_from.strict = a.get_bool(key, true); };
  strict.write = [](const C& c) { return std::optional<json>(c.init_from.strict); };
  std::vector<Field<C>> keys = {path, skip, map, strict};
  for (Field<C>& k : keys) k.written_at_default = false;
  return keys;
}

// The metric a section watches (checkpoint.save_best, early_stopping) and which way is better.
Field<C> monitor_key(const char* path, Metric C::*member, const char* watcher) {
  return written_when_set(choice(
      path, member, Metric::ValLoss,
      str("the epoch metric ", watcher, " watches (val_*: data.val_fraction or an image folder's val/ is needed)")));
}

Field<C> mode_key(const char* path, std::optional<MonitorMode> C::*member, const char* monitor) {
  return written_when_set(choice_or_auto(
      path, member,
      str("whether lower (min) or higher (max) ", monitor, " is better; auto: min for a loss, max for an accuracy")));
}

std::vector<Field<C>> make_config_keys() {
  std::vector<Field<C>> keys = {
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
           "on a GPU, the normalization layers run their single-read kernels where faster (docs/perf/norm.md); "
           "false sets every normalization layer's \"single_read\" to false: the three-launch kernels everywhere"),
      choice_or_auto("precision", &C::precision,
                     "activation type with PyTorch autocast's rules; statistics, loss, optimizer and master weights "
                     "stay float32; fp16 adds dynamic loss scaling; auto: bf16 on a GPU of compute capability 8.0 "
                     "or later, else fp32; config.json records the choice (docs/precision.md)"),
      choice_or_auto("memory_format", &C::memory_format,
                     "activation layout: NCHW, or NHWC from the model's input on; auto: channels_last on a GPU, "
                     "contiguous on the CPU; config.json records the choice (docs/precision.md)"),
      text("device", &C::device, "auto", "\"auto\", \"cpu\" or \"cuda\" (checked when the run starts)",
           "where the run trains (auto: a GPU when there is one); --device overrides it"),
      number("epochs", &C::epochs, 1.0, {0, true, static_cast<double>(kMaxEpochs), false},
             "passes over the training set; fractions allowed (9.9): the run takes ceil(epochs * steps per "
             "epoch) steps"),
      integer("batch_size", &C::batch_size, 128, {1, kMaxBatchSize},
              "the global batch: all ranks' micro-batches of one optimizer step"),
      written_when_set(integer(
          "accumulate_steps", &C::accumulate_steps, 1, {1, kMaxBatchSize},
          "micro-batches per optimizer step on each rank, their gradients summed in order (k on one device give "
          "the bits of k ranks; docs/distributed.md); must divide batch_size")),
      written_when_set(
          number("bucket_mb", &C::bucket_mb, 25.0, {0, false, 1 << 20, false},
                 "data parallel: the gradients are reduced in buckets of about this many MiB, each as soon as backward "
                 "has completed it (PyTorch DDP's bucket_cap_mb); 0: one reduction after backward. The bits do not "
                 "depend on it (docs/distributed.md)")),
      object("data", &C::data, json::object(), false, field_infos(DataOptions::fields()),
             "the data set (format, folder, limits; val_fraction and val_seed: a validation split held out of the "
             "training images), normalization (mean and std, or \"auto\": from the training images, the default "
             "for image folders) and training augmentation (docs/data.md)"),
      object("model", &C::model, json(), true, {},
             "the network: {\"layers\": [layer specs, PyTorch names]}; the layer types and their keys: `minidl "
             "layers`, docs/layers.json"),
      written_when_set(choice("loss.type", &C::loss_type, LossType::CrossEntropy,
                              "the training loss: cross_entropy (per image, token or voxel), dice (MONAI's "
                              "DiceLoss(softmax=True, to_onehot_y=True)) or dice_ce (their sum, MONAI's DiceCELoss); "
                              "dice and dice_ce need segmentation data (data.format \"volumes\")")),
      number("loss.label_smoothing", &C::label_smoothing, 0.0, {0, false, 1, true},
             "cross-entropy label smoothing, as torch.nn.CrossEntropyLoss(label_smoothing=...)"),
      object("optimizer", &C::optimizer, json(), true, typed_rows(optimizer_types(), "optimizer"),
             "the optimizer and its parameter groups"),
      object("schedule", &C::schedule, {{"type", "constant"}}, false, typed_rows(schedule_types(), "schedule"),
             "the learning-rate schedule: a factor of the optimizer's lr per step"),
      rule_list("init", &C::init, field_infos(InitRule::fields()),
                "parameter initialization rules applied to the built model, in order; each rule applies to every "
                "parameter it selects and must select one"),
      rule_list("freeze", &C::freeze, field_infos(FreezeRule::fields()),
                "parameters that do not train (no gradient, update or weight decay), for the whole run or from an "
                "epoch on; a later rule for a parameter replaces an earlier one"),
      written_when_set(object("lookahead", &C::lookahead, json(), false, field_infos(LookaheadOptions::fields()),
                              "lookahead weight averaging; left out: off")),
      written_when_set(object("grad_scaler", &C::grad_scaler, json(), false, field_infos(GradScalerOptions::fields()),
                              "fp16 dynamic loss scaling (left out: PyTorch GradScaler's defaults); precision "
                              "\"fp16\" only")),
      number_or_off("grad_clip", &C::grad_clip, {0, true, kUnbounded, false}, "leave the key out for no clipping",
                    "clip the gradients to this global 2-norm before each update, as "
                    "torch.nn.utils.clip_grad_norm_"),
      choice("eval.tta", &C::tta, TtaMode::None,
             "test-time augmentation: the views of each test image whose logits are averaged"),
      number("eval.tta_share", &C::tta_share, 1.0, {0, true, 1, false},
             "selective TTA: below 1, one plain pass classifies every test image and only this share of them, the "
             "least confident (lowest largest softmax probability), is classified again with eval.tta's views, as "
             "the CIFAR-10 speedrun record does with 0.25"),
      choice("eval.tta_weights", &C::tta_weights, TtaWeights::Mode,
             "how eval.tta's views are weighted: mode: the mode's own weights (1 each; airbench: 0.25 for the "
             "image and its mirror, 0.125 for each shifted view); equal: 1 / views each, the mean of their logits"),
      integer("eval.batch_size", &C::eval_batch_size, 1000, {1, kMaxBatchSize}, "images per evaluation batch"),
      written_when_set(integer("eval.every_steps", &C::eval_every_steps, 0, {0},
                               "also evaluate the held-out split (val, else test) every this many steps inside an "
                               "epoch, into evals.jsonl (0: off; a language model's validation loss every N steps); "
                               "every epoch's end is evaluated anyway")),
      written_when_set(number("eval.target_dice", &C::target_dice, 0.0, {0, false, 1, false},
                              "segmentation: the run stops after the first epoch whose mean foreground test Dice "
                              "reaches this, and reports the training seconds it took (time_to_target_s)",
                              "0: off")),
      text("output.dir", &C::output_dir, "runs/run", "a folder", "the run folder; --output overrides it"),
      flag("output.progress", &C::progress, true, "a progress bar while stderr is a terminal"),
      written_when_set(integer("checkpoint.every_steps", &C::checkpoint_every_steps, 0, {0},
                               "also write a checkpoint every this many steps (0: off); one is written at every "
                               "epoch's end")),
      written_when_set(number("checkpoint.every_minutes", &C::checkpoint_every_minutes, 0.0, {0, false, 1000000, false},
                              "also write a checkpoint every this many minutes", "0: off")),
      written_when_set(integer("checkpoint.keep", &C::checkpoint_keep, 1, {1, 1000}, "checkpoints kept")),
      written_when_set(flag("checkpoint.save_best", &C::save_best, false,
                            "keep best.safetensors: the weights of the epoch whose checkpoint.monitor was best so far, "
                            "with that epoch and value in its metadata, as Lightning's ModelCheckpoint(save_top_k=1)")),
      monitor_key("checkpoint.monitor", &C::best_monitor, "save_best"),
      mode_key("checkpoint.mode", &C::best_mode, "checkpoint.monitor"),
      optional_integer("early_stopping.patience", &C::early_stopping_patience, {0, kMaxEpochs},
                       "stop after this many epochs in a row without an improvement of early_stopping.monitor "
                       "(Lightning's EarlyStopping; 0: at the first); left out: no early stopping"),
      monitor_key("early_stopping.monitor", &C::early_stopping_monitor, "early stopping"),
      mode_key("early_stopping.mode", &C::early_stopping_mode, "early_stopping.monitor"),
      written_when_set(number("early_stopping.min_delta", &C::early_stopping_min_delta, 0.0, kAtLeastZero,
                              "the least change of early_stopping.monitor that counts as an improvement")),
      flag("log.tensorboard", &C::tensorboard, false, "TensorBoard event files in the run folder"),
  };
  const std::vector<Field<C>> init_from = init_from_keys();
  keys.insert(std::find_if(keys.begin(), keys.end(), [](const Field<C>& k) { return k.name == "freeze"; }) + 1,
              init_from.begin(), init_from.end());
  for (Field<C>& k : keys) {
    // Whole epochs print as integers, as they were written.
    if (k.name == "epochs") {
      k.default_value = 1;
      k.write = [](const C& c) {
        return std::optional<json>(c.epochs == std::floor(c.epochs) ? json(static_cast<int64_t>(c.epochs))
                                                                    : json(c.epochs));
      };
    }
    // The model holds its layer list and nothing else; the layers are checked when they are built.
    if (k.name == "model")
      k.read = [](JsonArgs& a, const std::string& key, C& c) {
        const json& model = a.get_object(key, true);
        JsonArgs args(model, a.key_path(key));
        MINIDL_CHECK(args.has("layers"), args.key_path("layers"), ": required list of layers is missing");
        args.get_json("layers");
        args.finish();
        c.model = model;
      };
  }
  return keys;
}

// Markdown table cells hold no '|' and no line breaks.
std::string cell(const std::string& s) {
  std::string out;
  for (char ch : s) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
  return out;
}

}  // namespace

const Fields<TrainConfig>& config_keys() {
  static const Fields<TrainConfig> keys{
      make_config_keys(), [](const TrainConfig& c, const JsonArgs& args) {
        MINIDL_CHECK(
            c.init_from.enabled() || (c.init_from.skip.empty() && c.init_from.map.empty() && c.init_from.strict),
            "init_from: skip, map and strict go with init_from.path (the weights to start from), which is not set");
        MINIDL_CHECK(c.batch_size % c.accumulate_steps == 0, "accumulate_steps: ", c.accumulate_steps,
                     " micro-batches do not split batch_size ", c.batch_size, " evenly");
        // The settings of a feature that is off would be silently ignored. (config.json writes
        // the checkpoint section whole, its monitor and mode at their defaults included.)
        if (args.has("early_stopping"))
          MINIDL_CHECK(c.early_stopping_patience.has_value(), "early_stopping.patience: required to stop early (how ",
                       "many epochs without improvement to wait, e.g. 5)");
        MINIDL_CHECK(c.save_best || c.best_monitor == Metric::ValLoss,
                     "checkpoint.monitor: only with checkpoint.save_best: true (it chooses the epoch "
                     "best.safetensors keeps)");
        MINIDL_CHECK(c.save_best || !c.best_mode, "checkpoint.mode: only with checkpoint.save_best: true (it chooses ",
                     "the epoch best.safetensors keeps)");
        MINIDL_CHECK(c.grad_scaler.is_null() || c.precision == Precision::Fp16,
                     "grad_scaler: loss scaling is for precision \"fp16\" only, "
                     "this config's precision is \"",
                     to_string_or_auto(c.precision), "\" (bfloat16 and float32 have float32's range and need none)");
        // Segmentation keys need segmentation data; said here, before any data is read.
        const DataFormat format = DataOptions::from_json(c.data, "data").format;
        const bool volumes = format == DataFormat::Volumes;
        MINIDL_CHECK(c.loss_type == LossType::CrossEntropy || volumes, "loss.type: \"", to_string(c.loss_type),
                     "\" needs segmentation data (data.format \"volumes\"); this is \"", to_string(format), "\"");
        MINIDL_CHECK(c.target_dice == 0 || volumes,
                     "eval.target_dice: needs segmentation data (data.format \"volumes\"); this is \"",
                     to_string(format), "\"");
      }};
  return keys;
}

namespace {

std::string default_text(const FieldInfo& k) {
  return k.required ? "required" : k.default_value.is_null() ? "not set" : "`" + k.default_value.dump() + "`";
}

std::string allowed_text(const FieldInfo& k) { return k.type == "bool" && k.range.empty() ? "true, false" : k.range; }

// One row per key and, under a section's or a list's row, one per key of its objects ("data.augment.flip",
// "init[].match"); a key of one "type" only says which.
void add_rows(const std::vector<FieldInfo>& keys, const std::string& prefix, const std::string& variant,
              std::string& md) {
  for (const FieldInfo& k : keys) {
    const std::string path = prefix + k.name, type = k.variant.empty() ? variant : k.variant;
    std::string meaning = k.doc;
    if (!k.written_at_default) meaning += ". Written when set";
    const std::string which = type.empty() ? "" : " (" + type + ")";
    md += str("| `", path, "`", which, " | ", k.type, " | ", cell(default_text(k)), " | ", cell(allowed_text(k)), " | ",
              cell(meaning), " |\n");
    add_rows(k.children, path + (k.type == "list" ? "[]." : "."), type, md);
  }
}

}  // namespace

std::string config_reference_markdown() {
  std::string md =
      "<!-- Generated by `minidl config --doc` from the config's key tables; a test fails when it differs. -->\n"
      "# The run config\n\n"
      "A run config is one JSON object (`configs/*.json`). Every key below is optional unless its default says "
      "required; an unknown key or a wrong type is an error naming its path, and `--set key.path=value` overrides "
      "any key (README.md). A run folder's `config.json` holds the resolved config: every key with its value "
      "(an `\"auto\"` precision or memory_format as chosen for the run's device), except those marked \"written "
      "when set\", which appear only when they differ from their default (a section of such keys appears whole). "
      "A section's keys are listed under it (`data.augment.flip`), a list's under `[]` (`init[].match`); where a "
      "section's \"type\" picks its kind (optimizer, schedule), a key names the type it belongs to. Sections "
      "other than `model`, `init` and `freeze` are written back resolved, every default filled in, except keys "
      "written only when set (`data.format` when not `\"cifar10\"`, `data.test_limit` when above 0, a data "
      "format's own keys for that format only), so a CIFAR-10 run's config.json reads as it always has. The "
      "layer types and their keys are in `minidl layers` and docs/layers.json.\n\n"
      "| Key | Type | Default | Allowed | Meaning |\n"
      "|---|---|---|---|---|\n";
  add_rows(field_infos(config_keys()), "", "", md);
  return md;
}

}  // namespace minidl
