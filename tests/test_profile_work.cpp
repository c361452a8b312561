// The work each layer reports (layers/work.h) against counts worked out by hand for small shapes,
// a whole ResNet-9 forward against its hand count, the profiler's roofline columns and memory,
// the comparison of two profiles and the device limits' cache.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/allocator.h"
#include "core/error.h"
#include "layers/registry.h"
#include "optim/lookahead.h"
#include "optim/optimizer.h"
#include "test_util.h"
#include "train/device_limits.h"
#include "profiling/profile_compare.h"
#include "profiling/profile_report.h"
#include "profiling/profiler.h"
#include "train/step_work.h"

using namespace minidl;

namespace {

// One call of the layer built from `spec` on a float32 input of `shape` that needs a gradient.
LayerWork work_of(const std::string& spec, const Shape& shape, bool input_grad = true) {
  std::shared_ptr<Module> m = build_layer(nlohmann::json::parse(spec), "layer");
  Tensor x = test::random_tensor(shape, 3);
  x.set_requires_grad(input_grad);
  Tensor y = (*m)(x);
  std::optional<LayerWork> w = m->work(x, y);
  REQUIRE(w.has_value());
  return *w;
}

void require_work(const LayerWork& w, double fwd_flops, double fwd_bytes, double bwd_flops, double bwd_bytes,
                  double saved) {
  CHECK(w.forward.flops == fwd_flops);
  CHECK(w.forward.bytes == fwd_bytes);
  CHECK(w.backward.flops == bwd_flops);
  CHECK(w.backward.bytes == bwd_bytes);
  CHECK(w.saved_bytes == saved);
}

class Opaque : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
  std::string type_name() const override { return "Opaque"; }
  nlohmann::json to_json() const override { return {{"type", "Opaque"}}; }
};

std::string temp_file(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("minidl_test_work_" + name)).string();
}

}  // namespace

TEST_CASE("work: FLOPs and bytes per layer against hand counts", "[profiler][work]") {
  // Conv2d 3->4 k3 p1 with bias on x (2,3,8,8), float32: y (2,4,8,8) = 512 outputs of 27 MACs.
  // fwd 2*512*27 + 512 bias = 28160 FLOPs; x 384*4 + w 108*4 + b 4*4 + y 512*4 = 4032 bytes.
  // bwd dx and dW 4*13824 + db 512 = 55808; dy 2048 + x 1536 + w 432 + dx 1536 + dW 432 + db 16.
  require_work(work_of(R"({"type": "Conv2d", "in_channels": 3, "out_channels": 4, "kernel_size": 3, "padding": 1})",
                       {2, 3, 8, 8}),
               28160, 4032, 55808, 6000, 1536);
  // Without a gradient for x (a first layer): no dx, no weight read for it.
  require_work(work_of(R"({"type": "Conv2d", "in_channels": 3, "out_channels": 4, "kernel_size": 3, "padding": 1})",
                       {2, 3, 8, 8}, false),
               28160, 4032, 2 * 13824 + 512, 2048 + 1536 + 432 + 16, 1536);
  // Conv2d 4->6 k3 groups 2 on x (2,4,8,8), padding = dilation (1 or 2): y (2,6,8,8) = 768 outputs
  // of 2*9 = 18 MACs, whatever the dilation. fwd 2*768*18 + 768 = 28416; x 2048 + w (6,2,3,3) 432 +
  // b 24 + y 3072. bwd 4*768*18 + 768; dy 3072 + x 2048 + w 432 + dx 2048 + dW 432 + db 24.
  for (int d : {1, 2})
    require_work(work_of(str(R"({"type": "Conv2d", "in_channels": 4, "out_channels": 6, "kernel_size": 3, )",
                             R"("groups": 2, "padding": )", d, R"(, "dilation": )", d, "}"),
                         {2, 4, 8, 8}),
                 28416, 5576, 56064, 8056, 2048);
  // Linear 8->3 on (4,8): 12 outputs of 8 MACs; fwd 192 + 12; x 128 + w 96 + b 12 + y 48.
  require_work(work_of(R"({"type": "Linear", "in_features": 8, "out_features": 3})", {4, 8}), 204, 284, 396,
               48 + 128 + 96 + 128 + 96 + 12, 128);
  // BatchNorm2d 3 (training) on (2,3,4,4): 96 elements, 5 FLOPs each; x 384 + y 384 + weight and bias
  // 24 + mean and rstd 24 + running stats read and written 48. bwd 9 each; dy 384 + x 384 + stats 24
  // + params 24 + dx 384 + dW and db 24; saved x and the stats.
  require_work(work_of(R"({"type": "BatchNorm2d", "num_features": 3})", {2, 3, 4, 4}), 480, 864, 864, 1224, 408);
  // The same with a fused ReLU: one more FLOP per element each way.
  require_work(work_of(R"({"type": "BatchNorm2d", "num_features": 3, "relu": true})", {2, 3, 4, 4}), 576, 864, 960,
               1224, 408);
  // With a fused GELU: the GELU layer's 5 more FLOPs per element forward, 9 backward.
  require_work(work_of(R"({"type": "BatchNorm2d", "num_features": 3, "gelu": true})", {2, 3, 4, 4}), 960, 864, 1728,
               1224, 408);
  // GroupNorm 1x3 (no running stats) and LayerNorm over (3,4,4): as BatchNorm2d less the running
  // stats, with 2 statistics (N * groups, or rows) instead of 3 channels: 16 bytes of mean and rstd.
  require_work(work_of(R"({"type": "GroupNorm", "num_groups": 1, "num_channels": 3})", {2, 3, 4, 4}), 480,
               384 + 384 + 24 + 16, 864, 384 + 384 + 16 + 24 + 384 + 24, 400);
  // ReLU on 96 elements: 1 FLOP each way; fwd x + y, bwd dy + saved y + dx.
  require_work(work_of(R"({"type": "ReLU"})", {2, 3, 4, 4}), 96, 768, 96, 1152, 384);
  // MaxPool2d k2 on (2,3,4,4): 24 outputs of 3 comparisons; a uint8 argmax per output saved.
  require_work(work_of(R"({"type": "MaxPool2d", "kernel_size": 2})", {2, 3, 4, 4}), 72, 384 + 96 + 24, 0,
               96 + 24 + 384, 24);
  // GlobalAvgPool2d: one add (or the final scale) per input element; GlobalMaxPool2d 15 comparisons
  // per output and an int32 argmax.
  require_work(work_of(R"({"type": "GlobalAvgPool2d"})", {2, 3, 4, 4}), 96, 408, 96, 408, 0);
  require_work(work_of(R"({"type": "GlobalMaxPool2d"})", {2, 3, 4, 4}), 90, 384 + 24 + 24, 0, 24 + 24 + 384, 24);
  // Scale: 1 FLOP each way, nothing saved.
  require_work(work_of(R"({"type": "Scale", "value": 0.5})", {2, 3, 4, 4}), 96, 768, 96, 768, 0);
  // Residual: only the add (its body reports its own); Sequential and a contiguous Flatten: nothing.
  require_work(work_of(R"({"type": "Residual", "body": [{"type": "ReLU"}]})", {2, 3, 4, 4}), 96, 1152, 0, 0, 0);
  // With a shortcut halving the resolution: the add of two (2,3,2,2) outputs into a third.
  require_work(work_of(R"({"type": "Residual", "body": [{"type": "AvgPool2d", "kernel_size": 2}],
                           "shortcut": [{"type": "MaxPool2d", "kernel_size": 2}]})",
                       {2, 3, 4, 4}),
               24, 3 * 96, 0, 0, 0);
  // SiLU 4 FLOPs forward, 8 backward, its input saved; Sigmoid 3 and 3, its output saved.
  require_work(work_of(R"({"type": "SiLU"})", {2, 3, 4, 4}), 384, 768, 768, 1152, 384);
  require_work(work_of(R"({"type": "Sigmoid"})", {2, 3, 4, 4}), 288, 768, 288, 1152, 384);
  // BatchNorm2d with a fused SiLU: the SiLU layer's counts added per element.
  require_work(work_of(R"({"type": "BatchNorm2d", "num_features": 3, "silu": true})", {2, 3, 4, 4}), 864, 864, 1632,
               1224, 408);
  // AvgPool2d k2 on (2,3,4,4): 24 outputs of 4 cells each way; AdaptiveAvgPool2d to 2x2 the same.
  require_work(work_of(R"({"type": "AvgPool2d", "kernel_size": 2})", {2, 3, 4, 4}), 96, 384 + 96, 96, 96 + 384, 0);
  require_work(work_of(R"({"type": "AdaptiveAvgPool2d", "output_size": 2})", {2, 3, 4, 4}), 96, 480, 96, 480, 0);
  // LayerScale2d 3 on 96 elements: 1 multiply forward; backward dx and the multiply-add of dgamma
  // (3 each); x 384 + gamma 12 + y 384; bwd dy + x + gamma and dgamma + dx; x saved.
  require_work(work_of(R"({"type": "LayerScale2d", "dim": 3})", {2, 3, 4, 4}), 96, 780, 288, 384 + 384 + 24 + 384, 384);
  // SqueezeExcitation 3->2 on 96 elements (its convolutions report their own): the mean and the
  // gate's multiply, 2 FLOPs per element forward, 4 backward; x read twice forward; dy and x read,
  // dx written twice backward; x saved.
  require_work(work_of(R"({"type": "SqueezeExcitation", "input_channels": 3, "squeeze_channels": 2})", {2, 3, 4, 4}),
               192, 3 * 384, 384, 4 * 384, 384);
  require_work(work_of(R"({"type": "Sequential", "layers": [{"type": "ReLU"}]})", {2, 3, 4, 4}), 0, 0, 0, 0, 0);
  require_work(work_of(R"({"type": "Flatten"})", {2, 3, 4, 4}), 0, 0, 0, 0, 0);

  // A layer that does not say: nullopt, shown as "-".
  Opaque opaque;
  Tensor x = test::random_tensor({2}, 1);
  REQUIRE_FALSE(opaque.work(x, x).has_value());

  // The step's sections: cross-entropy over (4,10) float32 logits, 7 FLOPs per logit; logits read
  // and dlogits written (160 each), labels 16, loss and count 8; bwd scales dlogits.
  Tensor logits = test::random_tensor({4, 10}, 2);
  Tensor labels = Tensor::from_vector(std::vector<int32_t>{1, 2, 3, 4}, {4});
  require_work(cross_entropy_work(logits, labels), 280, 344, 40, 320, 160);
}

// ResNet-9 (configs/resnet9.json) forward per 32x32 image, counted by hand:
//   conv MACs = H*W * Cout * Cin*9:
//     3->64 at 32x32:    1024 *  64 *   27 =  1,769,472
//     64->128 at 32x32:  1024 * 128 *  576 = 75,497,472
//     2x 128->128 16x16: 2 * 256 * 128 * 1152 = 75,497,472
//     128->256 at 16x16:  256 * 256 * 1152 = 75,497,472
//     256->512 at 8x8:     64 * 512 * 2304 = 75,497,472
//     2x 512->512 4x4:  2 * 16 * 512 * 4608 = 75,497,472
//   Linear 512->10: 5,120 MACs.  MACs 379,261,952 -> 758,523,904 FLOPs.
//   BatchNorm2d + ReLU, 6 FLOPs per element over 65,536 + 131,072 + 2*32,768 + 65,536 + 32,768
//     + 2*8,192 = 376,832 elements: 2,260,992.
//   MaxPool2d k2, 3 comparisons per output: (32,768 + 16,384 + 8,192) * 3 = 172,032.
//   Residual adds 32,768 + 8,192 = 40,960; GlobalMaxPool2d 512 * 15 = 7,680; Scale 10.
//   Total 761,005,578 FLOPs per image, 0.761 GFLOP (the convolutions 99.7% of it).
TEST_CASE("work: a whole ResNet-9 forward against the hand count", "[profiler][work]") {
  std::ifstream in(std::string(MINIDL_SOURCE_DIR) + "/configs/resnet9.json");
  REQUIRE(in.good());
  const nlohmann::json config = nlohmann::json::parse(in);
  std::shared_ptr<Module> net = build_sequential(config.at("model").at("layers"), "model.layers");
  net->assign_paths();
  Profiler p(Device::cpu());
  p.install(*net);
  p.begin_step();
  Tensor y = (*net)(test::random_tensor({2, 3, 32, 32}, 5));
  p.end_step();
  p.uninstall();
  const ProfileReport r = p.report();
  REQUIRE(r.work_complete);
  REQUIRE(r.total.fwd_work.flops == 2 * 761005578.0);
  double convs = 0;
  for (const ProfileRow& row : r.rows)
    if (row.type == "Conv2d") convs += row.fwd_work.flops;
  REQUIRE(convs == 2 * 2 * (379261952.0 - 5120));
}

TEST_CASE("work: the profiler's roofline columns, memory and counter track on the CPU", "[profiler][work]") {
  nlohmann::json layers = nlohmann::json::parse(R"([
    {"type": "Conv2d", "in_channels": 3, "out_channels": 8, "kernel_size": 3, "padding": 1, "bias": false},
    {"type": "BatchNorm2d", "num_features": 8, "relu": true},
    {"type": "GlobalAvgPool2d"},
    {"type": "Linear", "in_features": 8, "out_features": 3}
  ])");
  std::shared_ptr<Module> net = build_sequential(layers, "model.layers");
  net->assign_paths();
  auto opaque = std::make_shared<Opaque>();
  opaque->assign_paths("tail");
  Profiler p(Device::cpu());
  p.install(*net);
  opaque->set_observer(&p);  // a second root in the step, observed by the same profiler
  // A peak reached before the profiled steps survives them (the epoch's peak memory reads it).
  reset_peak_host_memory();
  { Tensor big = Tensor::empty({1 << 20}, DType::Float32, Device::cpu()); }
  const size_t peak_before = host_memory_stats().peak_bytes;
  for (int step = 0; step < 2; ++step) {
    p.begin_step();
    Tensor x = test::random_tensor({4, 3, 16, 16}, 7 + step);
    Tensor logits = (*opaque)((*net)(x));
    Tensor labels = Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 0}, {4});
    {
      StepSection s = p.section("loss");
      p.add_work(cross_entropy_work(logits, labels));
    }
    p.end_step();
  }
  p.uninstall();
  opaque->set_observer(nullptr);
  REQUIRE(host_memory_stats().peak_bytes >= peak_before);
  ProfileReport r = p.report();
  DeviceLimits limits;
  limits.device_name = "test CPU";
  limits.dtype = "float32";
  limits.peak_tflops = 0.05;
  limits.copy_gbs = 10;
  limits.source = "measured";
  r.limits = limits;

  const ProfileRow* conv = nullptr;
  const ProfileRow* tail = nullptr;
  for (const ProfileRow& row : r.rows) {
    if (row.type == "Conv2d") conv = &row;
    if (row.type == "Opaque") tail = &row;
  }
  REQUIRE(conv);
  REQUIRE(tail);
  REQUIRE(conv->work_known);
  REQUIRE(conv->fwd_work.flops == 2.0 * 4 * 8 * 256 * 27);
  REQUIRE(conv->saved_bytes == 4 * 3 * 256 * 4);
  REQUIRE_FALSE(tail->work_known);
  REQUIRE_FALSE(r.work_complete);
  // The conv's forward kept at least its output (4*8*16*16 floats) allocated.
  REQUIRE(conv->fwd_kept_bytes >= 4 * 8 * 256 * 4);
  REQUIRE(r.step_peak_bytes >= r.step_start_bytes);
  REQUIRE_FALSE(r.peak_row.empty());

  const PassRoofline roof = pass_roofline(r, *conv, false);
  REQUIRE(roof.known);
  REQUIRE(roof.tflops == Approx(conv->fwd_work.flops / (conv->fwd_host_ms * 1e-3) / 1e12));
  REQUIRE(roof.fraction_of_limit == Approx(std::max(roof.tflops / 0.05, roof.gbs / 10)));
  const std::string expected = roof.fraction_of_limit < kLatencyBoundFraction ? "latency"
                               : roof.tflops / 0.05 >= roof.gbs / 10          ? "compute"
                               : roof.gbs / 10 > 1                            ? "cache"
                                                                              : "memory";
  REQUIRE(roof.bound == expected);

  const std::string table = format_profile_table(r);
  INFO(table);
  REQUIRE(table.find("Roofline on test CPU") != std::string::npos);
  REQUIRE(table.find("% limit") != std::string::npos);
  REQUIRE(table.find("memory: ") != std::string::npos);
  // The opaque layer shows "-", never 0.
  const size_t at = table.find("tail Opaque", table.find("Roofline"));
  REQUIRE(at != std::string::npos);
  const std::string line = table.substr(at, table.find('\n', at) - at);
  REQUIRE(line.find("0.000") == std::string::npos);
  REQUIRE(line.find(" -") != std::string::npos);
  // Every line fits in 120 columns.
  size_t start = 0;
  while (start < table.size()) {
    size_t end = table.find('\n', start);
    if (end == std::string::npos) end = table.size();
    CHECK(end - start <= 120);
    start = end + 1;
  }

  const nlohmann::json j = profile_json(r);
  REQUIRE(j.at("limits").at("peak_tflops") == 0.05);
  REQUIRE(j.at("compute_dtype") == "float32");
  REQUIRE(j.at("memory").at("step_peak_bytes").get<double>() == r.step_peak_bytes);
  bool saw_null = false, saw_conv = false;
  for (const nlohmann::json& row : j.at("rows")) {
    if (row.at("type") == "Opaque") saw_null = row.at("work").is_null();
    if (row.at("type") == "Conv2d") {
      saw_conv = true;
      REQUIRE(row.at("work").at("fwd").at("flops").get<double>() == conv->fwd_work.flops);
      REQUIRE(row.at("work").at("fwd").contains("bound"));
    }
  }
  REQUIRE(saw_null);
  REQUIRE(saw_conv);
  // The allocator's counter track: one "C" sample per boundary of the last step.
  int counters = 0;
  const nlohmann::json trace = chrome_trace_json(r);
  for (const nlohmann::json& e : trace.at("traceEvents"))
    if (e.at("ph") == "C") {
      ++counters;
      REQUIRE(e.at("args").at("peak").get<double>() >= 0);
    }
  REQUIRE(counters == static_cast<int>(r.memory.size()));
  REQUIRE(counters > 4);
}

TEST_CASE("work: host allocator counters", "[profiler][work]") {
  reset_peak_host_memory();
  const size_t before = host_memory_stats().current_bytes;
  {
    Tensor t = Tensor::empty({1000}, DType::Float32, Device::cpu());
    REQUIRE(host_memory_stats().current_bytes == before + 4032);  // rounded up to 64 bytes
  }
  REQUIRE(host_memory_stats().current_bytes == before);
  REQUIRE(host_memory_stats().peak_bytes >= before + 4032);
  reset_peak_host_memory();
  REQUIRE(host_memory_stats().peak_bytes == before);
}

TEST_CASE("compare: two synthetic profiles side by side", "[profiler][compare]") {
  auto row = [](const std::string& name, const std::string& path, double fwd, double bwd, double fraction) {
    nlohmann::json r = {{"name", name},      {"kind", "module"},  {"type", "Conv2d"},   {"path", path},
                        {"depth", 1},        {"fwd_gpu_ms", fwd}, {"bwd_gpu_ms", bwd},  {"fwd_host_ms", 0.01},
                        {"bwd_host_ms", 0.01}, {"share", 0.5}};
    r["work"] = {{"fwd", {{"ms", fwd}, {"fraction_of_limit", fraction}}},
                 {"bwd", {{"ms", bwd}, {"fraction_of_limit", fraction}}}};
    return r;
  };
  nlohmann::json a = {{"device", "cuda:0"}, {"compute_dtype", "float32"}};
  a["rows"] = {row("0 Conv2d 3->64 k3", "0", 1.0, 2.0, 0.5), row("1 BatchNorm2d 64", "1", 0.5, 0.5, 0.25),
               {{"name", "loss"}, {"kind", "section"}, {"fwd_gpu_ms", 0.1}, {"bwd_gpu_ms", 0.0}}};
  a["total"] = {{"name", "total"}, {"fwd_gpu_ms", 1.6}, {"bwd_gpu_ms", 2.5}};
  a["step"] = {{"gpu_ms", 4.1}, {"wall_ms", 5.0}};
  a["memory"] = {{"step_peak_bytes", 2e9}};
  nlohmann::json b = a;
  b["compute_dtype"] = "bfloat16";
  // B: the conv renamed by its dtype but at the same path, twice as fast; the norm gone; a new row.
  b["rows"] = {row("0 Conv2d 3->64 k3 bf16", "0", 0.5, 1.0, 0.5), row("2 ReLU", "2", 0.2, 0.2, 0.1),
               {{"name", "loss"}, {"kind", "section"}, {"fwd_gpu_ms", 0.1}, {"bwd_gpu_ms", 0.0}}};
  b["total"] = {{"name", "total"}, {"fwd_gpu_ms", 0.8}, {"bwd_gpu_ms", 1.2}};
  b["step"] = {{"gpu_ms", 2.05}, {"wall_ms", 2.5}};
  b["memory"] = {{"step_peak_bytes", 1e9}};

  const std::string s = format_profile_comparison(a, b, "A/profile.json", "B/profile.json");
  INFO(s);
  auto line_of = [&](const std::string& start) {
    const size_t at = s.find("\n" + start);
    REQUIRE(at != std::string::npos);
    return s.substr(at + 1, s.find('\n', at + 1) - at - 1);
  };
  const std::string conv = line_of("  0 Conv2d 3->64 k3 ");
  CHECK(conv.find("3.000") != std::string::npos);
  CHECK(conv.find("1.500") != std::string::npos);
  CHECK(conv.find("0.50x") != std::string::npos);
  CHECK(conv.find("50.0%") != std::string::npos);
  const std::string norm = line_of("  1 BatchNorm2d 64");
  CHECK(norm.find("1.000") != std::string::npos);
  CHECK(norm.find("25.0%") != std::string::npos);
  CHECK(norm.find("x") == std::string::npos);  // no ratio: B has no such row
  CHECK(line_of("  2 ReLU").find("0.400") != std::string::npos);
  CHECK(line_of("loss").find("1.00x") != std::string::npos);
  CHECK(line_of("total").find("0.49x") != std::string::npos);
  CHECK(line_of("step GPU").find("0.50x") != std::string::npos);
  CHECK(line_of("peak MB").find("0.50x") != std::string::npos);
  CHECK(s.find("GPU ms") != std::string::npos);
  CHECK(s.find("bfloat16") != std::string::npos);

  // Not a profile: one error naming which.
  REQUIRE_THROWS_WITH(format_profile_comparison(a, nlohmann::json::object(), "A", "B/x.json"),
                      Catch::Contains("B/x.json is not a minidl profile.json"));
  REQUIRE_THROWS_WITH(profile_compare_command("/nonexistent/a.json", "b.json"), Catch::Contains("/nonexistent/a.json"));
}

TEST_CASE("device limits: measured once, cached, measured again for another key", "[profiler][limits]") {
  const std::string path = temp_file("limits/device_limits.json");
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
  int measured = 0;
  LimitsProbe probe;
  probe.device_name = "Test GPU";
  probe.driver = "driver 1";
  probe.measure = [&] {
    ++measured;
    DeviceLimits l;
    l.peak_tflops = 100 + measured;
    l.copy_gbs = 2000;
    l.gemm = "test GEMM";
    return l;
  };
  const DeviceLimits first = cached_limits(probe, "bfloat16", path);
  REQUIRE(measured == 1);
  REQUIRE(first.source == "measured");
  REQUIRE(first.peak_tflops == 101);
  REQUIRE(first.ridge_flops_per_byte() == Approx(50.5));
  REQUIRE(std::filesystem::exists(path));

  // Reused: same key, no measurement.
  const DeviceLimits second = cached_limits(probe, "bfloat16", path);
  REQUIRE(measured == 1);
  REQUIRE(second.source == "cached");
  REQUIRE(second.peak_tflops == 101);
  REQUIRE(second.gemm == "test GEMM");
  REQUIRE(second.cache_path == path);

  // Another dtype, then another driver: measured again, both kept beside the first.
  REQUIRE(cached_limits(probe, "float16", path).source == "measured");
  REQUIRE(measured == 2);
  probe.driver = "driver 2";
  REQUIRE(cached_limits(probe, "bfloat16", path).peak_tflops == 103);
  REQUIRE(measured == 3);
  probe.driver = "driver 1";
  REQUIRE(cached_limits(probe, "bfloat16", path).peak_tflops == 101);
  REQUIRE(measured == 3);

  // A layer faster than the cached GEMM roof (beyond the slack) proves the roof was measured on a
  // busy machine: measured again, and neither roof goes down if the machine is busy still.
  REQUIRE(cached_limits(probe, "bfloat16", path, 101 * kBeatenRoofSlack).source == "cached");
  REQUIRE(measured == 3);
  const DeviceLimits again = cached_limits(probe, "bfloat16", path, 200);
  REQUIRE(measured == 4);
  REQUIRE_THAT(again.source, Catch::Contains("measured again") && Catch::Contains("200"));
  REQUIRE(again.peak_tflops == 104);
  REQUIRE(cached_limits(probe, "bfloat16", path).peak_tflops == 104);
  probe.measure = [&] {
    ++measured;
    DeviceLimits l;
    l.peak_tflops = 50;
    l.copy_gbs = 3000;
    return l;
  };
  const DeviceLimits busy = cached_limits(probe, "bfloat16", path, 1000);
  REQUIRE(measured == 5);
  REQUIRE(busy.peak_tflops == 104);
  REQUIRE(busy.gemm == "test GEMM");
  REQUIRE(busy.copy_gbs == 3000);
  REQUIRE(cached_limits(probe, "bfloat16", path).copy_gbs == 3000);

  // A corrupt cache is measured again and rewritten.
  {
    std::ofstream out(path);
    out << "{not json";
  }
  REQUIRE(cached_limits(probe, "bfloat16", path).source == "measured");
  REQUIRE(measured == 6);
  REQUIRE(cached_limits(probe, "bfloat16", path).source == "cached");
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());

  // The real CPU measurement: positive rates, the key naming the CPU.
  const std::string cpu_path = temp_file("cpu_limits.json");
  std::filesystem::remove(cpu_path);
  const DeviceLimits cpu = device_limits(Device::cpu(), "float32", cpu_path);
  REQUIRE(cpu.source == "measured");
  REQUIRE(cpu.peak_tflops > 0);
  REQUIRE(cpu.copy_gbs > 0);
  REQUIRE(cpu.gemm.find("Eigen") != std::string::npos);
  REQUIRE(device_limits(Device::cpu(), "float32", cpu_path).source == "cached");
  REQUIRE_THROWS_WITH(device_limits(Device::cpu(), "bfloat16", ""), Catch::Contains("float32"));
  std::filesystem::remove(cpu_path);
  REQUIRE(limits_dtype(Device::cpu(), DType::BFloat16, true) == "float32");
  REQUIRE(limits_dtype(Device::cuda(), DType::BFloat16, true) == "bfloat16");
  REQUIRE(limits_dtype(Device::cuda(), DType::Float32, true) == "tf32");
  REQUIRE(limits_dtype(Device::cuda(), DType::Float32, false) == "float32");
}

TEST_CASE("grad clip work: the gradients read for the norm, then read and written, 3 FLOPs each", "[profiler]") {
  Tensor a = Tensor::zeros({10}, DType::Float32, Device::cpu());
  Tensor b = Tensor::zeros({3, 4}, DType::Float32, Device::cpu());
  const Tensor frozen = Tensor::zeros({7}, DType::Float32, Device::cpu());  // no gradient: not clipped
  a.set_grad(Tensor::zeros({10}, DType::Float32, Device::cpu()));
  b.set_grad(Tensor::zeros({3, 4}, DType::Float32, Device::cpu()));
  const LayerWork w = grad_clip_work({a, b, frozen});
  CHECK(w.forward.bytes == 3 * 22 * 4);
  CHECK(w.forward.flops == 3 * 22);
  CHECK(w.backward.flops == 0);
}

TEST_CASE("optimizer work: the state of the parameters with a gradient, not Lookahead's averages", "[profiler]") {
  Tensor a = Tensor::zeros({10}, DType::Float32, Device::cpu());
  Tensor frozen = Tensor::zeros({30}, DType::Float32, Device::cpu());  // no gradient this step
  a.set_requires_grad(true);
  frozen.set_requires_grad(true);
  std::vector<NamedParam> params = {{"a", a, "Conv2d"}, {"frozen", frozen, "Conv2d"}};
  const nlohmann::json sgd = nlohmann::json::parse(R"({"type": "SGD", "lr": 0.1, "momentum": 0.9})");
  Lookahead la(make_optimizer(sgd, params, "optimizer"), {{"a", a}, {"frozen", frozen}},
               LookaheadOptions::from_json(nlohmann::json::parse(R"({"every_n_steps": 5})"), "lookahead"), 4, 100);
  a.set_grad(Tensor::zeros({10}, DType::Float32, Device::cpu()));
  la.step(0.1);
  REQUIRE(la.state_tensors().size() >= 4);  // momentum and the average, of both
  const std::optional<LayerWork> w = la.work();
  REQUIRE(w);
  // a: parameter read and written, gradient read and zeroed, momentum read and written: 6 x 10 floats.
  CHECK(w->forward.bytes == 6 * 10 * 4);
  CHECK(w->forward.flops == 6 * 10);
}

TEST_CASE("optimizer work: Muon counts its Newton-Schulz products and its rest optimizer", "[profiler]") {
  Tensor filter = Tensor::zeros({2, 3, 1, 1}, DType::Float32, Device::cpu());  // a 2 x 3 matrix
  Tensor bias = Tensor::zeros({2}, DType::Float32, Device::cpu());
  filter.set_requires_grad(true);
  bias.set_requires_grad(true);
  std::vector<NamedParam> params = {{"w", filter, "Conv2d"}, {"b", bias, "Conv2d"}};
  const nlohmann::json muon = nlohmann::json::parse(
      R"({"type": "Muon", "lr": 0.1, "ns_steps": 2, "rest": {"type": "SGD", "lr": 0.1, "momentum": 0.9}})");
  std::unique_ptr<Optimizer> opt = make_optimizer(muon, params, "optimizer");
  filter.set_grad(Tensor::zeros({2, 3, 1, 1}, DType::Float32, Device::cpu()));
  bias.set_grad(Tensor::zeros({2}, DType::Float32, Device::cpu()));
  const std::optional<LayerWork> w = opt->work();
  REQUIRE(w);
  // Muon on 6 elements: momentum with Nesterov 4 + update 2, and the norm's scaling 3, per element;
  // r = 2, c = 3, per iteration 4 r^2 c + 2 r^3 + 3 r^2 + 2 r c = 48 + 16 + 12 + 12 = 88. SGD on 2: 6 each.
  CHECK(w->forward.flops == 6 * 6 + 3 * 6 + 2 * 88 + 6 * 2);
  // Muon: the filter, its gradient and momentum read and written (6 x 6 floats), and per iteration
  // 6 r c + 7 r^2 = 64 floats; SGD: 6 x 2 floats.
  CHECK(w->forward.bytes == 4 * (6 * 6 + 2 * 64 + 6 * 2));
}
