#include "train/evaluate_run.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/error.h"
#include "core/json_limits.h"
#include "data/datasets.h"
#include "data/holdout.h"
#include "data/loader.h"
#include "layers/loss/loss.h"
#include "layers/module.h"
#include "train/trained_run.h"
#include "train/trainer.h"

namespace minidl {

namespace {

// The class a row of logits predicts: the first maximum, as the run's evaluation takes it.
int64_t argmax(const float* row, int64_t k) { return std::max_element(row, row + k) - row; }

// Whether `label` is among the k classes with the highest logits (ties: the lower index first).
bool in_top(const float* row, int64_t classes, int64_t label, int64_t k) {
  int64_t ahead = 0;
  for (int64_t c = 0; c < classes; ++c) ahead += row[c] > row[label] || (row[c] == row[label] && c < label) ? 1 : 0;
  return ahead < k;
}

std::string percent(const nlohmann::json& v) {
  if (v.is_null()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f%%", v.get<double>());
  return buf;
}

std::string padded(const std::string& s, size_t width, bool left = false) {
  if (s.size() >= width) return s;
  return left ? s + std::string(width - s.size(), ' ') : std::string(width - s.size(), ' ') + s;
}

}  // namespace

Dataset evaluation_data(const TrainedRun& run, const std::string& data_dir, Split split, int64_t limit,
                        std::string* dir) {
  MINIDL_CHECK(limit >= 0, "eval: --limit must be >= 0, got ", limit);
  DataOptions data = run.data();
  if (!data_dir.empty()) data.dir = data_dir;
  if (split == Split::Val) {
    MINIDL_CHECK(limit == 0, "eval --split val: --limit does not apply (the validation split is the run's own)");
    MINIDL_CHECK(data.val_fraction > 0 || data.format == DataFormat::ImageFolder, "eval --split val: the run has no validation ",
                 "split (its data.val_fraction is 0)");
    data.dir = data_dir_for(data);
    if (dir) *dir = data.dir;
    // The images the run held out of its training set: the same hold-out of the same images.
    if (data.val_fraction > 0) return hold_out(load_dataset(data, Split::Train), data.val_fraction, data.val_seed).val;
    return load_dataset(data, Split::Val);
  }
  // The images the run trained on: its training set less the hold-out, when it held one out.
  const bool trained_part = split == Split::Train && data.val_fraction > 0;
  MINIDL_CHECK(!trained_part || limit == 0, "eval --split train: --limit does not apply (the run trained on its ",
               "training set less the validation hold-out, data.val_fraction ", data.val_fraction, ")");
  if (limit > 0) (split == Split::Test ? data.test_limit : data.train_limit) = limit;
  data.dir = data_dir_for(data);
  if (dir) *dir = data.dir;
  if (trained_part) return hold_out(load_dataset(data, Split::Train), data.val_fraction, data.val_seed).train;
  return load_dataset(data, split);
}

nlohmann::json evaluate_run(TrainedRun& run, const Dataset& data, TtaMode tta) {
  const int64_t k = run.num_classes(), n = data.size();
  MINIDL_CHECK(n > 0, "eval: the data has no images");
  if (!data.classes.empty())
    MINIDL_CHECK(data.classes == run.classes(), "eval: the data's ", data.classes.size(), " classes (",
                 text_excerpt(nlohmann::json(data.classes).dump(), 200), ") are not the run's ", k, " (",
                 text_excerpt(nlohmann::json(run.classes()).dump(), 200), ")");
  std::vector<float> plain;
  double loss = 0;
  const std::vector<float> logits = run.all_logits(data, tta, &plain, &loss);
  const std::vector<int32_t> labels = data.labels.values<int32_t>();
  const int64_t top_k = std::min<int64_t>(5, k);
  int64_t correct = 0, correct_tta = 0, in_top_k = 0;
  std::vector<int64_t> confusion(static_cast<size_t>(k * k), 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t label = labels[static_cast<size_t>(i)];
    MINIDL_CHECK(label >= 0 && label < k, "eval: image ", i, " has label ", label, ", outside the run's ", k,
                 " classes");
    const float* row = logits.data() + i * k;
    const int64_t predicted = argmax(row, k);
    correct += argmax(plain.data() + i * k, k) == label ? 1 : 0;
    correct_tta += predicted == label ? 1 : 0;
    in_top_k += in_top(row, k, label, top_k) ? 1 : 0;
    confusion[static_cast<size_t>(label * k + predicted)] += 1;
  }
  nlohmann::json precision = nlohmann::json::array(), recall = nlohmann::json::array(),
                 support = nlohmann::json::array(), rows = nlohmann::json::array();
  for (int64_t c = 0; c < k; ++c) {
    int64_t truth = 0, predicted = 0;
    for (int64_t j = 0; j < k; ++j) {
      truth += confusion[static_cast<size_t>(c * k + j)];
      predicted += confusion[static_cast<size_t>(j * k + c)];
    }
    const auto hits = static_cast<double>(confusion[static_cast<size_t>(c * k + c)]);
    precision.push_back(predicted > 0 ? nlohmann::json(100.0 * hits / static_cast<double>(predicted)) : nullptr);
    recall.push_back(truth > 0 ? nlohmann::json(100.0 * hits / static_cast<double>(truth)) : nullptr);
    support.push_back(truth);
    rows.push_back(std::vector<int64_t>(confusion.begin() + c * k, confusion.begin() + (c + 1) * k));
  }
  const auto total = static_cast<double>(n);
  nlohmann::json m = {
      {"images", n},    {"accuracy", 100.0 * static_cast<double>(correct) / total},       {"loss", loss},
      {"top_k", top_k}, {"top5_accuracy", 100.0 * static_cast<double>(in_top_k) / total}, {"tta", to_string(tta)}};
  if (tta != TtaMode::None) m["accuracy_tta"] = 100.0 * static_cast<double>(correct_tta) / total;
  m["classes"] = run.classes();
  m["precision"] = precision;
  m["recall"] = recall;
  m["support"] = support;
  m["confusion"] = rows;
  return m;
}

nlohmann::json evaluate_language_model(TrainedRun& run, const Dataset& windows) {
  MINIDL_CHECK(run.language_model() && windows.is_tokens(), "eval: a language model's run evaluates token windows");
  const int64_t n = windows.size(), t = windows.seq_len;
  MINIDL_CHECK(n > 0, "eval: the data has no windows");
  // The run's evaluation, batch by batch: the float32 logits' mean token loss weighted by the
  // batch's windows, summed in batch order, and the tokens predicted right.
  Loader loader(windows, LoaderOptions::evaluation(run.data(), run.config().eval_batch_size), run.device());
  autograd::NoGradGuard no_grad;
  run.model().eval();
  const AutocastGuard autocast(run.activation_dtype());
  const float smoothing = static_cast<float>(run.config().label_smoothing);
  double loss_sum = 0;
  int64_t correct = 0;
  loader.start_epoch(0);
  Batch b;
  while (loader.next(b)) {
    const Tensor logits = run.model()(b.images).to(DType::Float32);
    loss_sum += static_cast<double>(cross_entropy(logits, b.labels, smoothing).item()) *
                static_cast<double>(b.images.size(0));
    correct += count_correct(logits, b.labels);
  }
  const double loss = loss_sum / static_cast<double>(n);
  return {{"windows", n},
          {"seq_len", t},
          {"tokens", n * t},
          {"loss", loss},
          {"perplexity", std::exp(loss)},
          {"accuracy", 100.0 * static_cast<double>(correct) / static_cast<double>(n * t)}};
}

std::string evaluation_text(const nlohmann::json& m) {
  if (m.contains("perplexity")) {
    char line[160];
    std::snprintf(line, sizeof(line), "loss %.4f   perplexity %.2f   tokens right %.2f%%   (%lld windows of %lld)\n",
                  m["loss"].get<double>(), m["perplexity"].get<double>(), m["accuracy"].get<double>(),
                  static_cast<long long>(m["windows"].get<int64_t>()), static_cast<long long>(m["seq_len"].get<int64_t>()));
    return line;
  }
  const bool tta = m.contains("accuracy_tta");
  char loss[32];
  std::snprintf(loss, sizeof(loss), "%.4f", m["loss"].get<double>());
  std::string out =
      str("accuracy ", percent(m["accuracy"]), "   loss ", loss, "   top-", m["top_k"].get<int64_t>(), " ",
          percent(m["top5_accuracy"]),
          tta ? str("   with ", m["tta"].get<std::string>(), " TTA ", percent(m["accuracy_tta"])) : std::string(),
          "   (", m["images"].get<int64_t>(), " images)\n");
  const size_t k = m["classes"].size();
  std::vector<size_t> shown(k);
  for (size_t c = 0; c < k; ++c) shown[c] = c;
  std::string note;
  if (k > 20) {
    // The 5 worst and 5 best classes by recall; classes without images are left out.
    std::vector<size_t> scored;
    for (size_t c = 0; c < k; ++c)
      if (!m["recall"][c].is_null()) scored.push_back(c);
    std::stable_sort(scored.begin(), scored.end(),
                     [&](size_t a, size_t b) { return m["recall"][a].get<double>() < m["recall"][b].get<double>(); });
    const size_t worst = std::min<size_t>(5, scored.size());
    const size_t best_from = std::max(worst, scored.size() - worst);
    shown.assign(scored.begin(), scored.begin() + static_cast<int64_t>(worst));
    shown.insert(shown.end(), scored.begin() + static_cast<int64_t>(best_from), scored.end());
    note = str(" (the 5 lowest and 5 highest recalls of ", k, " classes; eval.json has them all)");
  }
  std::vector<std::string> names;
  size_t width = 5;
  for (size_t c = 0; c < k; ++c) {
    names.push_back(text_excerpt(m["classes"][c].get<std::string>(), 40));
    width = std::max(width, names.back().size());
  }
  out += str(padded("class", width, true), "  precision     recall  support", note, tta ? " (with TTA)" : "", "\n");
  for (size_t c : shown)
    out +=
        str(padded(names[c], width, true), "  ", padded(percent(m["precision"][c]), 9), "  ",
            padded(percent(m["recall"][c]), 9), "  ", padded(std::to_string(m["support"][c].get<int64_t>()), 7), "\n");
  if (k > 20) return out;
  out += "confusion matrix (rows: true class, columns: predicted, in the order above)\n";
  for (size_t c = 0; c < k; ++c) {
    out += padded(names[c], width, true);
    for (const auto& count : m["confusion"][c]) out += " " + padded(std::to_string(count.get<int64_t>()), 6);
    out += "\n";
  }
  return out;
}

}  // namespace minidl
