// AvgPool2d and AdaptiveAvgPool2d: forward against a float64 reference written here from PyTorch's
// definitions (every mode: padding with and without count_include_pad, ceil_mode, strides that
// overlap and skip, rectangular windows; adaptive windows that overlap, split evenly and grow the
// input), backward against finite differences and against the reference's transpose, channels-last
// and half inputs on the CPU, the factories and their errors, and CUDA against the CPU.
#include <cmath>
#include <vector>

#include "core/autograd.h"
#include "core/error.h"
#include "cuda_vs_cpu.h"
#include "layers/pool/avg_pool.h"
#include "layers/registry.h"
#include "test_util.h"

using namespace minidl;

namespace {

nlohmann::json J(const char* text) { return nlohmann::json::parse(text); }

// The windows of one axis as PyTorch defines them: [begin, end) inside the input and the divisor
// length (the window clipped to the padded input), or the adaptive window.
struct Win {
  int64_t b, e, span;
};

std::vector<Win> windows(int64_t n, int64_t k, int64_t s, int64_t p, bool ceil_mode) {
  const double span = static_cast<double>(n + 2 * p - k) / static_cast<double>(s);
  int64_t out = static_cast<int64_t>(ceil_mode ? std::ceil(span) : std::floor(span)) + 1;
  if (ceil_mode && (out - 1) * s >= n + p) --out;
  std::vector<Win> w;
  for (int64_t o = 0; o < out; ++o) {
    const int64_t lo = o * s - p, hi = std::min(lo + k, n + p);
    w.push_back({std::max<int64_t>(lo, 0), std::min(hi, n), hi - lo});
  }
  return w;
}

std::vector<Win> adaptive_windows(int64_t n, int64_t m) {
  std::vector<Win> w;
  for (int64_t o = 0; o < m; ++o) {
    const int64_t b = static_cast<int64_t>(std::floor(static_cast<double>(o * n) / m));
    const int64_t e = static_cast<int64_t>(std::ceil(static_cast<double>((o + 1) * n) / m));
    w.push_back({b, e, e - b});
  }
  return w;
}

// y (float64) of x (N, C, H, W) over the windows; include: divide by the spans, else by the cells.
std::vector<double> pool_ref(const Tensor& x, const std::vector<Win>& rows, const std::vector<Win>& cols,
                             bool include) {
  const std::vector<float> v = x.to_vector();
  const int64_t planes = x.size(0) * x.size(1), H = x.size(2), W = x.size(3);
  std::vector<double> y;
  for (int64_t p = 0; p < planes; ++p)
    for (const Win& r : rows)
      for (const Win& c : cols) {
        double sum = 0;
        for (int64_t i = r.b; i < r.e; ++i)
          for (int64_t j = c.b; j < c.e; ++j) sum += v[(p * H + i) * W + j];
        y.push_back(sum / static_cast<double>(include ? r.span * c.span : (r.e - r.b) * (c.e - c.b)));
      }
  return y;
}

struct Mode {
  const char* spec;
  Shape input;
};

// Every AvgPool2d mode, each on an input whose windows exercise it.
const Mode kModes[] = {
    {R"({"type": "AvgPool2d", "kernel_size": 2})", {2, 3, 6, 8}},
    {R"({"type": "AvgPool2d", "kernel_size": 3, "stride": 2, "padding": 1})", {2, 3, 7, 9}},
    {R"({"type": "AvgPool2d", "kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": false})", {2, 3, 7, 9}},
    {R"({"type": "AvgPool2d", "kernel_size": 3, "stride": 2, "ceil_mode": true})", {2, 3, 8, 6}},
    {R"({"type": "AvgPool2d", "kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": true,
        "count_include_pad": false})",
     {1, 2, 8, 10}},
    {R"({"type": "AvgPool2d", "kernel_size": [2, 3], "stride": [1, 3], "padding": [1, 0]})", {2, 2, 5, 11}},
    {R"({"type": "AvgPool2d", "kernel_size": 2, "stride": 3})", {1, 3, 8, 7}},
};

}  // namespace

TEST_CASE("avg_pool2d matches the float64 reference in every mode", "[pool]") {
  for (const Mode& m : kModes) {
    const nlohmann::json spec = J(m.spec);
    INFO(spec.dump());
    auto layer = build_layer(spec, "m");
    const auto& g = dynamic_cast<const AvgPool2d&>(*layer).geometry();
    const Tensor x = test::random_tensor(m.input, 1, -2.f, 2.f);
    const Tensor y = (*layer)(x);
    const auto rows = windows(m.input[2], g.kernel_h, g.stride_h, g.pad_h, g.ceil_mode);
    const auto cols = windows(m.input[3], g.kernel_w, g.stride_w, g.pad_w, g.ceil_mode);
    REQUIRE(y.shape() ==
            Shape{m.input[0], m.input[1], static_cast<int64_t>(rows.size()), static_cast<int64_t>(cols.size())});
    test::require_close(y.to_vector(), pool_ref(x, rows, cols, g.count_include_pad), 1e-6, 1e-7, "y");
    test::gradcheck([&](const Tensor& v) { return (*layer)(v); }, test::random_tensor(m.input, 2), 1e-2, 1e-3, 1e-4);
  }
}

TEST_CASE("adaptive_avg_pool2d matches the float64 reference: overlapping, even and growing windows", "[pool]") {
  for (const auto& [in, out] : std::vector<std::pair<Shape, std::pair<int64_t, int64_t>>>{
           {{2, 3, 7, 5}, {3, 2}}, {{2, 3, 8, 8}, {4, 4}}, {{1, 2, 3, 2}, {5, 4}}, {{2, 4, 5, 6}, {1, 1}}}) {
    INFO(shape_str(in) << " -> " << out.first << "x" << out.second);
    const Tensor x = test::random_tensor(in, 3, -2.f, 2.f);
    const Tensor y = adaptive_avg_pool2d(x, out.first, out.second);
    REQUIRE(y.shape() == Shape{in[0], in[1], out.first, out.second});
    test::require_close(y.to_vector(),
                        pool_ref(x, adaptive_windows(in[2], out.first), adaptive_windows(in[3], out.second), true),
                        1e-6, 1e-7, "y");
    const int64_t oh = out.first, ow = out.second;  // a lambda cannot capture a structured binding in C++17
    test::gradcheck([&](const Tensor& v) { return adaptive_avg_pool2d(v, oh, ow); },
                    test::random_tensor(in, 4), 1e-2, 1e-3, 1e-4);
  }
}

TEST_CASE("avg pools: channels-last and half inputs give the contiguous float32 bits", "[pool]") {
  const Tensor x = test::random_tensor({2, 5, 9, 7}, 5);
  for (const char* text : {R"({"type": "AvgPool2d", "kernel_size": 3, "stride": 2, "padding": 1})",
                           R"({"type": "AdaptiveAvgPool2d", "output_size": [2, 3]})"}) {
    INFO(text);
    auto layer = build_layer(J(text), "m");
    const Tensor y = (*layer)(x);
    const Tensor ycl = (*layer)(x.to(MemoryFormat::ChannelsLast));
    REQUIRE(ycl.is_channels_last());
    REQUIRE(ycl.contiguous().to_vector() == y.to_vector());
    const Tensor yh = (*layer)(x.to(DType::BFloat16));
    REQUIRE(yh.dtype() == DType::BFloat16);
    REQUIRE(yh.to(DType::Float32).to_vector() ==
            (*layer)(x.to(DType::BFloat16).to(DType::Float32)).to(DType::BFloat16).to(DType::Float32).to_vector());
  }
}

TEST_CASE("AvgPool2d and AdaptiveAvgPool2d specs: defaults, round trip, errors naming the key", "[pool][config]") {
  auto p = build_layer(J(R"({"type": "AvgPool2d", "kernel_size": [3, 2]})"), "m");
  REQUIRE(p->to_json() == J(R"({"type": "AvgPool2d", "kernel_size": [3, 2], "stride": [3, 2], "padding": 0,
                                "ceil_mode": false, "count_include_pad": true})"));
  REQUIRE(build_layer(p->to_json(), "m")->to_json() == p->to_json());
  auto a = build_layer(J(R"({"type": "AdaptiveAvgPool2d", "output_size": 1})"), "m");
  REQUIRE(a->to_json() == J(R"({"type": "AdaptiveAvgPool2d", "output_size": 1})"));
  const auto err = [](const char* text) { return test::error_of([&] { build_layer(J(text), "model.layers[3]"); }); };
  CHECK_THAT(err(R"({"type": "AvgPool2d"})"), Catch::Contains("model.layers[3].kernel_size: required key is missing"));
  CHECK_THAT(err(R"({"type": "AvgPool2d", "kernel_size": 0})"), Catch::Contains("model.layers[3].kernel_size"));
  CHECK_THAT(err(R"({"type": "AvgPool2d", "kernel_size": 2, "stride": 0})"), Catch::Contains("model.layers[3].stride"));
  CHECK_THAT(err(R"({"type": "AvgPool2d", "kernel_size": 3, "padding": 2})"),
             Catch::Contains("model.layers[3].padding: must be at most half the kernel size"));
  CHECK_THAT(err(R"({"type": "AvgPool2d", "kernel_size": 2, "divisor_override": 3})"),
             Catch::Contains("model.layers[3].divisor_override"));
  CHECK_THAT(err(R"({"type": "AdaptiveAvgPool2d", "output_size": [2, 0]})"),
             Catch::Contains("model.layers[3].output_size: expected integers in 1..65536, got 2x0"));
  CHECK_THAT(err(R"({"type": "AdaptiveAvgPool2d"})"), Catch::Contains("model.layers[3].output_size: required"));
  // A kernel larger than the padded input: an error naming the layer's sizes, nothing computed.
  CHECK_THAT(test::error_of([&] {
               (*build_layer(J(R"({"type": "AvgPool2d", "kernel_size": 5, "padding": 1})"), "model.layers[3]"))(
                   Tensor::zeros({1, 2, 2, 6}));
             }),
             Catch::Contains("smaller than kernel_size (5, 5) with padding (1, 1)"));
  CHECK_THAT(test::error_of([] {
               adaptive_avg_pool2d(Tensor::zeros({2, 3}), 1, 1);
             }),
             Catch::Contains("expects a 4-d"));
}

TEST_CASE("avg pools on CUDA match the CPU in every dtype and layout", "[pool][cuda]") {
  MINIDL_REQUIRE_CUDA();
  for (const Mode& m : kModes) test::require_cuda_matches_cpu(J(m.spec), m.input, 21);
  test::require_cuda_matches_cpu(J(R"({"type": "AvgPool2d", "kernel_size": 3, "stride": 1, "padding": 1})"),
                                 {8, 96, 16, 16}, 22);
  test::require_cuda_matches_cpu(J(R"({"type": "AdaptiveAvgPool2d", "output_size": [3, 2]})"), {3, 40, 7, 5}, 23);
  test::require_cuda_matches_cpu(J(R"({"type": "AdaptiveAvgPool2d", "output_size": 1})"), {4, 130, 4, 4}, 24);
}
