#include "train/model_summary.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "core/autocast.h"
#include "core/error.h"
#include "core/init.h"
#include "data/options.h"
#include "layers/module.h"
#include "layers/registry.h"
#include "optim/named_params.h"
#include "train/param_rules.h"
#include "train/precision.h"
#include "train/trainer.h"

namespace minidl {

namespace {

// What one forward pass showed of each module it called, in call order.
struct Call {
  Shape output;
  std::optional<LayerWork> work;
};

class Recorder : public ForwardObserver {
 public:
  void enter(const Module& m) override {
    if (!calls_.count(&m)) order_.push_back(&m);
  }
  // A module called twice adds up its work; its shape is its last call's.
  void exit(const Module& m, const Tensor& input, const Tensor& output) override {
    Call& c = calls_[&m];
    c.output = output.shape();
    const std::optional<LayerWork> w = m.work(input, output);
    if (!w) return;
    if (!c.work) c.work = LayerWork{};
    c.work->forward.flops += w->forward.flops;
    c.work->backward.flops += w->backward.flops;
    c.work->saved_bytes += w->saved_bytes;
  }
  const std::vector<const Module*>& order() const { return order_; }
  const Call& call(const Module* m) const { return calls_.at(m); }

 private:
  std::vector<const Module*> order_;
  std::map<const Module*, Call> calls_;
};

// One training-mode forward of a batch of `batch` zero samples (float32 images, or a token set's
// int32 ids), recorded.
std::unique_ptr<Recorder> record_forward(Module& model, const Shape& sample, DType input, int64_t batch,
                                         DType activation, MemoryFormat format, Device device) {
  Shape shape = sample;
  shape.insert(shape.begin(), batch);
  const Tensor x = Tensor::zeros(shape, input, device);
  auto recorder = std::make_unique<Recorder>();
  struct Observing {
    Observing(Module& m, ForwardObserver* o) : model(m), previous(m.observer()) { model.set_observer(o); }
    ~Observing() { model.set_observer(previous); }
    Module& model;
    ForwardObserver* previous;
  } observing(model, recorder.get());
  const AutocastGuard autocast(activation);
  model(x.to(format));
  return recorder;
}

// A value measured at batches a and b (affine in the batch), at batch n.
double at_batch(double va, double vb, int64_t a, int64_t b, int64_t n) {
  return a == b ? va : va + (vb - va) / static_cast<double>(b - a) * static_cast<double>(n - a);
}

std::optional<double> at_batch(const std::optional<LayerWork>& wa, const std::optional<LayerWork>& wb,
                               double PassWork::*field, bool forward, int64_t a, int64_t b, int64_t n) {
  if (!wa || !wb) return std::nullopt;
  const PassWork& pa = forward ? wa->forward : wa->backward;
  const PassWork& pb = forward ? wb->forward : wb->backward;
  return at_batch(pa.*field, pb.*field, a, b, n);
}

int64_t numel_of(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  int64_t n = 0;
  for (const auto& kv : tensors) n += kv.second.numel();
  return n;
}

// "1,234,567"
std::string grouped(int64_t v) {
  std::string digits = std::to_string(v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// "1.81 G", "640.0 K": a count in SI units.
std::string si(double v, const char* unit) {
  const char* prefixes[] = {"", "K", "M", "G", "T", "P"};
  int p = 0;
  while (v >= 1000 && p < 5) {
    v /= 1000;
    ++p;
  }
  char buf[48];
  std::snprintf(buf, sizeof(buf), p == 0 ? "%.0f %s%s" : "%.2f %s%s", v, prefixes[p], unit);
  return buf;
}

std::string optional_si(const std::optional<double>& v, const char* unit) { return v ? si(*v, unit) : "-"; }

std::string pad(const std::string& s, size_t width, bool right) {
  if (s.size() >= width) return s;
  const std::string fill(width - s.size(), ' ');
  return right ? fill + s : s + fill;
}

}  // namespace

ModelSummary summarize_model(const TrainConfig& config, Device device, int64_t batch_size) {
  const int64_t n = batch_size > 0 ? batch_size : config.batch_size;
  MINIDL_CHECK(n >= 1 && n <= kMaxBatchSize, "summary: the batch size must be 1..", kMaxBatchSize, ", got ", n);
  const DataOptions data = DataOptions::from_json(config.data, "data");
  const int64_t side = data.format == DataFormat::ImageFolder ? data.image_size : 32;
  set_init_seed(config.seed);
  std::shared_ptr<Module> model = build_model(config, device);
  model->to(device);
  model->train();

  ModelSummary s;
  s.batch_size = n;
  s.device = device.str();
  s.precision = to_string(*config.precision);
  s.memory_format = to_string(*config.memory_format);
  const bool tokens = data.format == DataFormat::Tokens;
  const bool volumes = data.format == DataFormat::Volumes;
  const int64_t v = data.volumes.size;
  const Shape sample = tokens ? Shape{data.seq_len} : volumes ? Shape{1, v, v, v} : Shape{3, side, side};
  const DType input = tokens ? DType::Int32 : DType::Float32;
  s.input = sample;
  s.input.insert(s.input.begin(), n);
  const DType activation = activation_dtype(*config.precision);
  const int64_t a = std::min<int64_t>(n, 2), b = std::min<int64_t>(n, 4);
  MemoryFormat format = *config.memory_format;
  if (volumes && is_channels_last_format(format)) format = MemoryFormat::ChannelsLast3d;
  const std::unique_ptr<Recorder> ra = record_forward(*model, sample, input, a, activation, format, device);
  const std::unique_ptr<Recorder> rb = record_forward(*model, sample, input, b, activation, format, device);

  std::map<const Module*, int64_t> totals;
  for (auto& [path, m] : model->named_modules()) totals[m] = numel_of(m->named_parameters());
  for (const Module* m : rb->order()) {
    if (m == model.get()) continue;
    const Call& ca = ra->call(m);
    const Call& cb = rb->call(m);
    SummaryRow row;
    row.path = m->path();
    row.depth = static_cast<int>(std::count(row.path.begin(), row.path.end(), '.'));
    row.layer = m->describe();
    for (size_t d = 0; d < cb.output.size(); ++d)
      row.output.push_back(static_cast<int64_t>(
          at_batch(static_cast<double>(ca.output.at(d)), static_cast<double>(cb.output[d]), a, b, n)));
    row.parameters = totals[m];
    for (const auto& child : m->children()) row.parameters -= totals[child.second.get()];
    row.forward_flops = at_batch(ca.work, cb.work, &PassWork::flops, true, a, b, n);
    row.backward_flops = at_batch(ca.work, cb.work, &PassWork::flops, false, a, b, n);
    if (ca.work && cb.work) row.saved_bytes = at_batch(ca.work->saved_bytes, cb.work->saved_bytes, a, b, n);
    if (row.forward_flops) {
      s.forward_flops += *row.forward_flops;
      s.backward_flops += *row.backward_flops;
      s.saved_bytes += *row.saved_bytes;
    } else if (m->children().empty()) {
      ++s.rows_without_work;
    }
    s.rows.push_back(std::move(row));
  }
  const std::vector<NamedParam> params = named_parameters(*model);
  for (const NamedParam& p : params) {
    s.parameters += p.tensor.numel();
    s.parameter_bytes += work_bytes(p.tensor);
  }
  s.trainable = s.parameters - FreezeRules(config.freeze, params, 1).frozen_elements(0);
  return s;
}

std::string summary_text(const ModelSummary& s) {
  std::vector<std::vector<std::string>> cells = {
      {"layer", "output shape", "params", "forward FLOPs", "saved for backward"}};
  for (const SummaryRow& r : s.rows)
    cells.push_back({std::string(2 * static_cast<size_t>(r.depth), ' ') + r.path + "  " + r.layer, shape_str(r.output),
                     grouped(r.parameters), optional_si(r.forward_flops, "FLOP"), optional_si(r.saved_bytes, "B")});
  std::vector<size_t> width(cells[0].size(), 0);
  for (const auto& row : cells)
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::string out =
      str("input ", shape_str(s.input), ", ", s.precision, " ", s.memory_format, " on ", s.device, ", training mode\n");
  for (const auto& row : cells) {
    for (size_t c = 0; c < row.size(); ++c) out += (c ? "  " : "") + pad(row[c], width[c], c > 0);
    out += "\n";
  }
  out += str("parameters: ", grouped(s.parameters), " (", si(s.parameter_bytes, "B"), "), ", grouped(s.trainable),
             " trainable\n");
  out +=
      str("per step at batch ", s.batch_size, ": forward ", si(s.forward_flops, "FLOP"), ", backward ",
          si(s.backward_flops, "FLOP"), ", activations saved for backward ", si(s.saved_bytes, "B"),
          s.rows_without_work > 0 ? str(" (", s.rows_without_work, " layers do not say theirs: '-')") : std::string(),
          "\n");
  return out;
}

nlohmann::json summary_json(const ModelSummary& s) {
  auto optional = [](const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  nlohmann::json rows = nlohmann::json::array();
  for (const SummaryRow& r : s.rows)
    rows.push_back({{"path", r.path},
                    {"layer", r.layer},
                    {"output_shape", r.output},
                    {"parameters", r.parameters},
                    {"forward_flops", optional(r.forward_flops)},
                    {"backward_flops", optional(r.backward_flops)},
                    {"saved_bytes", optional(r.saved_bytes)}});
  return {{"batch_size", s.batch_size},
          {"input_shape", s.input},
          {"device", s.device},
          {"precision", s.precision},
          {"memory_format", s.memory_format},
          {"layers", rows},
          {"parameters", s.parameters},
          {"trainable_parameters", s.trainable},
          {"parameter_bytes", s.parameter_bytes},
          {"forward_flops", s.forward_flops},
          {"backward_flops", s.backward_flops},
          {"saved_bytes", s.saved_bytes}};
}

}  // namespace minidl
