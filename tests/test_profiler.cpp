// The per-layer profiler: exclusive-time attribution (a parent's clock pauses while its child
// runs), backward nodes attributed to the module that recorded them, sections (the loss's backward
// included), rows adding up to the totals, the table/JSON/trace writers, the lifecycle errors;
// on CUDA, GPU rows adding up to the step as timed by independent events.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <thread>

#include "profiling/profile_report.h"
#include "core/autograd.h"
#include "core/error.h"
#include "profiling/profiler.h"
#include "core/tensor_ops.h"
#include "layers/loss/loss.h"
#include "layers/registry.h"
#include "test_util.h"
#ifdef MINIDL_WITH_CUDA
#include "core/cuda/profiler_events.h"
#endif

using namespace minidl;

namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// A module whose forward sleeps `before_ms`, runs its child (if any), sleeps `after_ms`; with
// `backward_ms` > 0 it records one node whose backward sleeps that long. Known times make the
// attribution checkable without depending on how fast any real layer is.
class SleepModule : public Module {
 public:
  SleepModule(int before_ms, int after_ms, int backward_ms, std::shared_ptr<Module> child = nullptr)
      : before_ms_(before_ms), after_ms_(after_ms), backward_ms_(backward_ms) {
    if (child) register_module("inner", std::move(child));
  }
  Tensor forward(const Tensor& x) override {
    sleep_ms(before_ms_);
    Tensor y = children().empty() ? x : (*children()[0].second)(x);
    sleep_ms(after_ms_);
    if (backward_ms_ == 0) return y;
    Tensor out = y.clone();
    if (autograd::needs_grad({y})) {
      int ms = backward_ms_;
      autograd::record(out, "sleepy", {y}, [ms](const Tensor& dy) -> std::vector<Tensor> {
        sleep_ms(ms);
        return {dy};
      });
    }
    return out;
  }
  std::string type_name() const override { return "Sleep"; }
  std::string describe() const override { return str("Sleep ", before_ms_, "+", after_ms_); }
  nlohmann::json to_json() const override { return {{"type", "Sleep"}}; }

 private:
  int before_ms_, after_ms_, backward_ms_;
};

const ProfileRow& row_named(const ProfileReport& r, const std::string& name) {
  auto it = std::find_if(r.rows.begin(), r.rows.end(), [&](const ProfileRow& row) { return row.name == name; });
  INFO("row '" << name << "'");
  REQUIRE(it != r.rows.end());
  return *it;
}

int rows_named(const ProfileReport& r, const std::string& name) {
  return static_cast<int>(std::count_if(r.rows.begin(), r.rows.end(),
                                        [&](const ProfileRow& row) { return row.name == name; }));
}

void require_totals_are_row_sums(const ProfileReport& r) {
  double fg = 0, fh = 0, bg = 0, bh = 0;
  for (const ProfileRow& row : r.rows) {
    fg += row.fwd_gpu_ms;
    fh += row.fwd_host_ms;
    bg += row.bwd_gpu_ms;
    bh += row.bwd_host_ms;
    REQUIRE(row.fwd_host_ms >= 0);
    REQUIRE(row.bwd_host_ms >= 0);
    REQUIRE(row.fwd_gpu_ms >= 0);
    REQUIRE(row.bwd_gpu_ms >= 0);
  }
  REQUIRE(r.total.fwd_gpu_ms == Approx(fg).margin(1e-9));
  REQUIRE(r.total.fwd_host_ms == Approx(fh).margin(1e-9));
  REQUIRE(r.total.bwd_gpu_ms == Approx(bg).margin(1e-9));
  REQUIRE(r.total.bwd_host_ms == Approx(bh).margin(1e-9));
}

// Host-track (tid 1) or GPU-track (tid 2) "X" events of a Chrome trace, by name.
std::multimap<std::string, nlohmann::json> trace_spans(const nlohmann::json& trace, int tid) {
  std::multimap<std::string, nlohmann::json> out;
  for (const nlohmann::json& e : trace.at("traceEvents"))
    if (e.at("ph") == "X" && e.at("tid") == tid) out.insert({e.at("name").get<std::string>(), e});
  return out;
}

// Every span lies inside the step span; returns the step span's duration.
double require_spans_inside_step(const std::multimap<std::string, nlohmann::json>& spans) {
  REQUIRE(spans.count("step") == 1);
  const nlohmann::json& step = spans.find("step")->second;
  double end = step.at("ts").get<double>() + step.at("dur").get<double>();
  for (const auto& [name, e] : spans) {
    INFO("span " << name);
    REQUIRE(e.at("ts").get<double>() >= 0);
    REQUIRE(e.at("dur").get<double>() >= 0);
    REQUIRE(e.at("ts").get<double>() + e.at("dur").get<double>() <= end + 0.01);  // ns rounding
  }
  return step.at("dur").get<double>();
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("minidl_test_profiler_" + name)).string();
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

// The tiny net of the brief: every kind of row a ResNet has (a container, a residual with its own
// add, parameterized layers, parameter-free layers).
std::shared_ptr<Module> tiny_net() {
  nlohmann::json layers = nlohmann::json::parse(R"([
    {"type": "Conv2d", "in_channels": 3, "out_channels": 5, "kernel_size": 3, "padding": 1, "bias": false},
    {"type": "BatchNorm2d", "num_features": 5},
    {"type": "ReLU"},
    {"type": "Residual", "body": [
      {"type": "Conv2d", "in_channels": 5, "out_channels": 5, "kernel_size": 3, "padding": 1},
      {"type": "ReLU"}]},
    {"type": "GlobalAvgPool2d"},
    {"type": "Linear", "in_features": 5, "out_features": 3}
  ])");
  std::shared_ptr<Module> net = build_sequential(layers, "model.layers");
  net->assign_paths();
  return net;
}

// One training step of `net` with the trainer's sections (data, loss, optimizer, zero_grad).
void train_step(Profiler& p, Module& net, Device device, int64_t batch, int64_t hw, uint64_t seed,
                bool measure = true) {
  p.begin_step(measure);
  Tensor x, labels;
  {
    auto s = p.section("data");
    x = test::random_tensor({batch, 3, hw, hw}, seed, -1.f, 1.f, device);
    std::vector<int32_t> l(static_cast<size_t>(batch));
    for (int64_t i = 0; i < batch; ++i) l[static_cast<size_t>(i)] = static_cast<int32_t>(i % 3);
    labels = Tensor::from_vector(l, {batch}, device);
  }
  Tensor logits = net(x);
  Tensor loss;
  {
    auto s = p.section("loss");
    loss = cross_entropy(logits, labels);
  }
  loss.backward();
  {
    auto s = p.section("optimizer");
    autograd::NoGradGuard no_grad;
    for (auto& [name, w] : net.named_parameters()) {
      Tensor g = w.grad();
      if (g.defined()) axpy_(w, -0.01f, g);
    }
  }
  {
    auto s = p.section("zero_grad");
    for (auto& [name, w] : net.named_parameters())
      if (w.grad().defined()) w.grad().zero_();
  }
  p.end_step();
}

// What the brief asks of every report of the tiny net, on any device.
void require_tiny_net_rows(const ProfileReport& r, Module& net) {
  for (auto& named : net.named_modules()) {
    // Plain variables, not a structured binding: C++17 lambdas cannot capture those (clang).
    const std::string path = named.first;
    Module* m = named.second;
    INFO("module '" << path << "' " << m->describe());
    int found = static_cast<int>(std::count_if(r.rows.begin(), r.rows.end(), [&](const ProfileRow& row) {
      return row.kind == RowKind::Module && row.module_id == m->id();
    }));
    REQUIRE(found == 1);
    const ProfileRow& row = *std::find_if(r.rows.begin(), r.rows.end(),
                                          [&](const ProfileRow& x) { return x.module_id == m->id(); });
    REQUIRE(row.name == (path.empty() ? m->describe() : path + " " + m->describe()));
    REQUIRE(row.type == m->type_name());
    REQUIRE(row.fwd_calls == 1);
    // Every layer but the root container records at least one node (the residual its add).
    if (path.empty())
      REQUIRE(row.bwd_calls == 0);
    else
      REQUIRE(row.bwd_calls >= 1);
    REQUIRE(row.depth == (path.empty() ? 0 : 1 + static_cast<int>(std::count(path.begin(), path.end(), '.'))));
  }
  for (const char* s : {"data", "loss", "optimizer", "zero_grad"}) {
    INFO("section " << s);
    REQUIRE(rows_named(r, s) == 1);
    REQUIRE(row_named(r, s).kind == RowKind::Section);
    REQUIRE(row_named(r, s).fwd_calls == 1);
  }
  REQUIRE(row_named(r, "loss").bwd_calls == 1);  // the cross-entropy node, recorded in the section
  REQUIRE(row_named(r, "data").bwd_calls == 0);
  REQUIRE(rows_named(r, "autograd") == 1);
  REQUIRE(rows_named(r, "other") == 1);
  // Order: modules, then sections, then autograd and other.
  auto first_section = std::find_if(r.rows.begin(), r.rows.end(),
                                    [](const ProfileRow& row) { return row.kind != RowKind::Module; });
  REQUIRE(std::all_of(first_section, r.rows.end(), [](const ProfileRow& row) { return row.kind != RowKind::Module; }));
  REQUIRE(r.rows.back().kind == RowKind::Other);
  require_totals_are_row_sums(r);
}

// The trace has one span per module per direction it ran in, on the given track.
void require_tiny_net_trace(const ProfileReport& r, int tid) {
  nlohmann::json trace = nlohmann::json::parse(chrome_trace_json(r).dump());
  auto spans = trace_spans(trace, tid);
  require_spans_inside_step(spans);
  for (const ProfileRow& row : r.rows) {
    if (row.kind != RowKind::Module && row.kind != RowKind::Section) continue;
    INFO("trace span for " << row.name);
    REQUIRE(static_cast<int64_t>(spans.count(row.name)) == row.fwd_calls);
    REQUIRE(static_cast<int64_t>(spans.count(row.name + " backward")) == row.bwd_calls);
  }
}

}  // namespace

TEST_CASE("profiler: exclusive time, node attribution and sections", "[profiler]") {
  // outer sleeps 3 ms around inner's 25 ms forward; inner's backward node sleeps 12 ms.
  auto inner = std::make_shared<SleepModule>(25, 0, 12);
  auto outer = std::make_shared<SleepModule>(2, 1, 0, inner);
  outer->assign_paths();
  Tensor x = test::random_tensor({4}, 1);
  x.set_requires_grad(true);

  Profiler p(Device::cpu());
  p.install(*outer);
  for (int step = 0; step < 3; ++step) {
    p.begin_step(step > 0);  // the first is warm-up
    {
      auto s = p.section("data");
      sleep_ms(4);
    }
    Tensor y = (*outer)(x);
    Tensor loss;
    {
      StepSection s(&p, "loss");  // as the trainer opens its sections
      loss = mul(y, 2.f);
    }
    autograd::backward(loss, Tensor::full({4}, 1.f));
    p.end_step();
  }
  p.uninstall();
  ProfileReport r = p.report();
  REQUIRE(r.measured_steps == 2);
  REQUIRE_FALSE(r.gpu_timed);

  const ProfileRow& o = row_named(r, "Sleep 2+1");
  const ProfileRow& i = row_named(r, "inner Sleep 25+0");
  REQUIRE(o.depth == 0);
  REQUIRE(i.depth == 1);
  // Exclusive: the outer row has its own 3 ms, not the inner's 25 (sleeps only overrun).
  REQUIRE(o.fwd_host_ms >= 3.0);
  REQUIRE(o.fwd_host_ms < 25.0);
  REQUIRE(i.fwd_host_ms >= 25.0);
  REQUIRE(i.fwd_calls == 1);
  REQUIRE(o.fwd_calls == 1);
  // The node recorded in inner's forward runs in backward and is inner's.
  REQUIRE(i.bwd_calls == 1);
  REQUIRE(i.bwd_host_ms >= 12.0);
  REQUIRE(o.bwd_calls == 0);
  REQUIRE(o.bwd_host_ms < 12.0);
  // The loss's mul node belongs to the loss section although it runs after the section closed.
  const ProfileRow& l = row_named(r, "loss");
  REQUIRE(l.kind == RowKind::Section);
  REQUIRE(l.bwd_calls == 1);
  REQUIRE(l.fwd_host_ms < 12.0);
  REQUIRE(row_named(r, "data").fwd_host_ms >= 4.0);
  REQUIRE(row_named(r, "data").fwd_host_ms < 25.0);
  REQUIRE(rows_named(r, "autograd") == 1);
  REQUIRE(rows_named(r, "other") == 1);
  require_totals_are_row_sums(r);
  // The rows plus the hooks' own time are the step (up to the wait and read-out after the last
  // boundary, which is in the wall time only).
  REQUIRE(r.total.host_ms() >= 25 + 12 + 4 + 3);
  REQUIRE(r.total.host_ms() + r.overhead_host_ms <= r.step_wall_ms + 1e-6);
  REQUIRE(autograd::current_module().id == -1);

  // Trace: inclusive spans, nested.
  nlohmann::json trace = nlohmann::json::parse(chrome_trace_json(r).dump());
  auto spans = trace_spans(trace, 1);
  REQUIRE(trace_spans(trace, 2).empty());  // no GPU track on the CPU
  double step_us = require_spans_inside_step(spans);
  REQUIRE(step_us >= 1000.0 * (25 + 12 + 4 + 3));
  REQUIRE(spans.count("Sleep 2+1") == 1);
  REQUIRE(spans.count("inner Sleep 25+0") == 1);
  REQUIRE(spans.count("inner Sleep 25+0 backward") == 1);
  REQUIRE(spans.find("inner Sleep 25+0 backward")->second.at("args").at("op") == "sleepy");
  REQUIRE(spans.count("loss backward") == 1);
  const nlohmann::json& os = spans.find("Sleep 2+1")->second;
  const nlohmann::json& is = spans.find("inner Sleep 25+0")->second;
  REQUIRE(is.at("ts").get<double>() >= os.at("ts").get<double>());
  REQUIRE(is.at("ts").get<double>() + is.at("dur").get<double>() <=
          os.at("ts").get<double>() + os.at("dur").get<double>());
  REQUIRE(os.at("dur").get<double>() >= 1000.0 * 28);
}

TEST_CASE("profiler: a node that outlives its module is not counted to the module that took its id",
          "[profiler][module]") {
  // `first` records a node and is destroyed before the backward; `second`, built meanwhile, takes
  // its id (the table reuses the ids of destroyed modules) under the next generation. Both are
  // observed beside the installed model, which outlives the profile as a model must.
  const auto model = std::make_shared<SleepModule>(0, 3, 0);
  auto first = std::make_shared<SleepModule>(0, 1, 1);
  const int id = first->id();
  Tensor x = test::random_tensor({4}, 1);
  x.set_requires_grad(true);
  Profiler p(Device::cpu());
  p.install(*model);
  first->set_observer(&p);
  p.begin_step();
  Tensor y = (*first)(x);
  first.reset();
  auto second = std::make_shared<SleepModule>(0, 2, 0);
  REQUIRE(second->id() == id);
  second->set_observer(&p);
  (*second)(x);
  autograd::backward(y, Tensor::full({4}, 1.f));
  p.end_step();
  p.uninstall();
  const ProfileReport r = p.report();
  const ProfileRow& gone = row_named(r, "Sleep 0+1");
  const ProfileRow& now = row_named(r, "Sleep 0+2");
  REQUIRE(gone.module_id == id);
  REQUIRE(now.module_id == id);
  REQUIRE(gone.fwd_calls == 1);
  REQUIRE(gone.bwd_calls == 1);
  REQUIRE(now.fwd_calls == 1);
  REQUIRE(now.bwd_calls == 0);
}

TEST_CASE("profiler: tiny net on the CPU, table, JSON and trace files", "[profiler]") {
  std::shared_ptr<Module> net = tiny_net();
  Profiler p(Device::cpu());
  p.install(*net);
  train_step(p, *net, Device::cpu(), 5, 7, 11, /*measure=*/false);
  REQUIRE(p.measured_steps() == 0);
  for (int step = 0; step < 2; ++step) train_step(p, *net, Device::cpu(), 5, 7, 12 + step);
  p.uninstall();
  ProfileReport r = p.report();
  REQUIRE(r.measured_steps == 2);
  require_tiny_net_rows(r, *net);
  require_tiny_net_trace(r, 1);

  // The table: every row once, host columns only, the unprofiled step beside the profiled one.
  std::string table = format_profile_table(r, 1.25);
  INFO(table);
  for (const ProfileRow& row : r.rows) REQUIRE(table.find(row.name) != std::string::npos);
  REQUIRE(table.find("fwd host") != std::string::npos);
  REQUIRE(table.find("fwd GPU") == std::string::npos);
  REQUIRE(table.find("\ntotal") != std::string::npos);
  REQUIRE(table.find("unprofiled step: wall 1.250 ms") != std::string::npos);
  REQUIRE(format_profile_table(r).find("unprofiled step: not measured") != std::string::npos);
  REQUIRE(table.find("graphed step") == std::string::npos);
  const std::string graphed = format_profile_table(r, 1.25, 0.5);
  REQUIRE(graphed.find("graphed step: wall 0.500 ms (one CUDA graph replay, 2.50x the unprofiled eager step)") !=
          std::string::npos);
  REQUIRE(profile_json(r, 1.25, 0.5).at("step").at("graphed_wall_ms") == 0.5);
  REQUIRE(profile_json(r, 1.25).at("step").at("graphed_wall_ms").is_null());

  // The files parse back to the same numbers.
  const std::string json_path = temp_path("profile.json"), trace_path = temp_path("trace.json");
  write_profile_json(r, json_path, 1.25);
  write_chrome_trace(r, trace_path);
  nlohmann::json j = read_json(json_path);
  REQUIRE(j.at("device") == "cpu");
  REQUIRE(j.at("measured_steps") == 2);
  REQUIRE(j.at("rows").size() == r.rows.size());
  double fwd = 0, bwd = 0, share = 0;
  for (const nlohmann::json& row : j.at("rows")) {
    REQUIRE_FALSE(row.contains("fwd_gpu_ms"));
    fwd += row.at("fwd_host_ms").get<double>();
    bwd += row.at("bwd_host_ms").get<double>();
    share += row.at("share").get<double>();
  }
  REQUIRE(j.at("total").at("fwd_host_ms").get<double>() == Approx(fwd).margin(1e-9));
  REQUIRE(j.at("total").at("bwd_host_ms").get<double>() == Approx(bwd).margin(1e-9));
  REQUIRE(share == Approx(1.0).epsilon(1e-9));
  REQUIRE(j.at("step").at("unprofiled_wall_ms").get<double>() == 1.25);
  nlohmann::json trace = read_json(trace_path);
  REQUIRE(trace.at("traceEvents").size() > r.rows.size());
  std::filesystem::remove(json_path);
  std::filesystem::remove(trace_path);
  REQUIRE_THROWS_WITH(write_chrome_trace(r, "/nonexistent-dir/trace.json"), Catch::Contains("/nonexistent-dir/trace.json"));
}

TEST_CASE("profiler: lifecycle and misuse", "[profiler]") {
  auto m = std::make_shared<SleepModule>(0, 0, 0);
  m->assign_paths();
  Profiler p(Device::cpu());
  REQUIRE_THROWS_WITH(p.begin_step(), Catch::Contains("install()"));
  REQUIRE_THROWS_WITH(p.report(), Catch::Contains("no measured steps"));
  p.install(*m);
  {
    Profiler q(Device::cpu());
    REQUIRE_THROWS_WITH(q.install(*m), Catch::Contains("observed already"));
  }
  REQUIRE(p.installed());  // q's destructor left p's hooks alone
  REQUIRE(m->observer() == &p);
  {
    auto other = std::make_shared<SleepModule>(0, 0, 0);
    REQUIRE_THROWS_WITH(p.install(*other), Catch::Contains("installed on another model"));
    REQUIRE(other->observer() == nullptr);
  }

  // Hooks and sections outside a step are ignored.
  Tensor x = test::random_tensor({2}, 3);
  (*m)(x);
  { auto s = p.section("outside"); }
  REQUIRE_THROWS_WITH(p.end_step(), Catch::Contains("no step is open"));

  p.begin_step();
  REQUIRE_THROWS_WITH(p.begin_step(), Catch::Contains("not ended"));
  {
    auto s = p.section("left open");
    REQUIRE(autograd::current_module().id != -1);
    REQUIRE_THROWS_WITH(p.end_step(), Catch::Contains("'left open' is still open"));
  }
  REQUIRE(autograd::current_module().id == -1);  // restored although the step failed inside

  p.begin_step();
  (*m)(x);
  p.cancel_step();
  REQUIRE(p.measured_steps() == 0);
  p.begin_step();
  (*m)(x);
  p.end_step();
  REQUIRE(p.measured_steps() == 1);
  ProfileReport r = p.report();
  REQUIRE(rows_named(r, "outside") == 0);
  REQUIRE(row_named(r, "Sleep 0+0").fwd_calls == 1);
  p.discard();
  REQUIRE(p.measured_steps() == 0);
  p.uninstall();
  REQUIRE(m->observer() == nullptr);

  // A section of no observer is a no-op.
  {
    StepSection s(nullptr, "nobody");
    REQUIRE(autograd::current_module().id == -1);
  }
}

#ifdef MINIDL_WITH_CUDA
TEST_CASE("profiler: tiny net on CUDA, GPU rows add up to the evented step", "[cuda][profiler]") {
  MINIDL_REQUIRE_CUDA();
  std::shared_ptr<Module> net = tiny_net();
  net->to(Device::cuda());
  Profiler p(Device::cuda());
  p.install(*net);
  // Batch and size big enough that a step is well over the events' ~1 us resolution.
  const int64_t batch = 129, hw = 31;
  for (int step = 0; step < 2; ++step) train_step(p, *net, Device::cuda(), batch, hw, 20 + step, false);

  // Independent events around the whole step, one measured step at a time, so each report is of
  // exactly the step the outer events saw.
  cuda::TimingEvents outer;
  std::vector<double> outer_ms;
  for (int step = 0; step < 3; ++step) {
    p.discard();
    outer.record(0);
    p.begin_step();
    Tensor x = test::random_tensor({batch, 3, hw, hw}, 30 + step, -1.f, 1.f, Device::cuda());
    std::vector<int32_t> l(static_cast<size_t>(batch));
    for (int64_t i = 0; i < batch; ++i) l[static_cast<size_t>(i)] = static_cast<int32_t>(i % 3);
    Tensor labels = Tensor::from_vector(l, {batch}, Device::cuda());
    Tensor logits = (*net)(x);
    Tensor loss;
    {
      auto s = p.section("loss");
      loss = cross_entropy(logits, labels);
    }
    loss.backward();
    outer.record(1);
    p.end_step();
    outer.read_ms(2, outer_ms);
    ProfileReport r = p.report();
    double rows_gpu = r.total.gpu_ms();
    INFO("step " << step << ": rows' GPU sum " << rows_gpu << " ms, profiler's step " << r.step_gpu_ms
                 << " ms, outer events " << outer_ms[1] << " ms\n" << format_profile_table(r));
    REQUIRE(r.gpu_timed);
    REQUIRE(outer_ms[1] > 0);
    REQUIRE(rows_gpu == Approx(r.step_gpu_ms).epsilon(1e-4).margin(1e-4));
    REQUIRE(std::fabs(rows_gpu - outer_ms[1]) <= 0.03 * outer_ms[1] + 0.02);
    for (auto& [path, m] : net->named_modules()) {
      if (m->type_name() != "Conv2d") continue;
      const ProfileRow& row = row_named(r, path + " " + m->describe());
      REQUIRE(row.fwd_gpu_ms > 0);
      REQUIRE(row.bwd_gpu_ms > 0);
    }
  }

  // Full steps with every section, several measured: the same row structure as on the CPU, and a
  // GPU track in the trace.
  p.discard();
  for (int step = 0; step < 3; ++step) train_step(p, *net, Device::cuda(), batch, hw, 40 + step);
  p.uninstall();
  ProfileReport r = p.report();
  INFO(format_profile_table(r));
  REQUIRE(r.measured_steps == 3);
  require_tiny_net_rows(r, *net);
  require_tiny_net_trace(r, 1);
  require_tiny_net_trace(r, 2);
  std::string table = format_profile_table(r, r.step_wall_ms);
  REQUIRE(table.find("fwd GPU") != std::string::npos);
  REQUIRE(table.find("GPU share") != std::string::npos);
  nlohmann::json j = profile_json(r);
  double share = 0;
  for (const nlohmann::json& row : j.at("rows")) {
    REQUIRE(row.contains("fwd_gpu_ms"));
    share += row.at("share").get<double>();
  }
  REQUIRE(share == Approx(1.0).epsilon(1e-9));
  WARN("profiler on CUDA, tiny net batch " << batch << ":\n" << table);
}
#endif
