// Conv2d groups and dilation on the CPU: forward and backward against the float64 definition
// (conv_reference.h), gradients against finite differences, a grouped forward equal bit for bit to
// its groups run one by one, thread-count independence; the module, its keys, its errors (each
// naming the key, a config's before anything is written), its parameter count; [cuda]: cuDNN's
// grouped and dilated convolutions, in every dtype and layout, against the CPU path and the
// definition.
#include <filesystem>
#include <fstream>

#include "core/init.h"
#include "core/settings.h"
#include "layers/conv/conv2d.h"
#include "layers/layer_descriptor.h"
#include "layers/registry.h"
#include "tests/conv_reference.h"
#include "train/run.h"

using namespace minidl;
using namespace minidl::test;

namespace {

// {n, c, h, w, o, kh, kw, sh, sw, ph, pw, dil_h, dil_w, groups}
const Conv2dShape kGrouped = {2, 4, 7, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 2};
const Conv2dShape kDepthwise = {3, 5, 9, 8, 5, 3, 3, 2, 2, 1, 1, 1, 1, 5};
const Conv2dShape kMultiplier = {2, 3, 6, 7, 6, 3, 3, 1, 1, 1, 1, 1, 1, 3};  // 2 outputs per input channel
const Conv2dShape kDilated = {2, 3, 9, 8, 4, 3, 3, 1, 1, 2, 2, 2, 2, 1};
const Conv2dShape kDilatedUneven = {2, 4, 10, 7, 6, 3, 2, 2, 1, 1, 0, 3, 2, 2};  // and strided, grouped
const Conv2dShape kDepthwise7 = {2, 8, 9, 9, 8, 7, 7, 1, 1, 3, 3, 1, 1, 8};
// Several images per GEMM chunk with a short last chunk, and more chunks than reduction slots.
const Conv2dShape kGroupedChunks = {13, 6, 32, 32, 6, 3, 3, 1, 1, 1, 1, 1, 1, 3};
const Conv2dShape kGroupedSlots = {40, 64, 16, 16, 8, 3, 3, 1, 1, 1, 1, 2, 2, 2};

const Conv2dShape kAll[] = {kGrouped,       kDepthwise,  kMultiplier,    kDilated,
                            kDilatedUneven, kDepthwise7, kGroupedChunks, kGroupedSlots};

Tensor conv(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dShape& s) {
  return conv2d(x, w, b, Size2d(s.sh, s.sw), Size2d(s.ph, s.pw), Size2d(s.dil_h, s.dil_w), s.groups);
}

}  // namespace

TEST_CASE("grouped conv2d CPU partition covers the cases the tests rely on", "[conv2d][grouped]") {
  const auto chunks = kernels::conv2d_cpu_partition(kGroupedChunks);
  CHECK(chunks.images_per_chunk > 1);
  CHECK(kGroupedChunks.n % chunks.images_per_chunk != 0);
  const auto slots = kernels::conv2d_cpu_partition(kGroupedSlots);
  CHECK(slots.chunks > slots.slots);
  CHECK(slots.slots > 1);
}

TEST_CASE("grouped and dilated conv2d CPU forward matches a float64 direct convolution", "[conv2d][grouped]") {
  for (const Conv2dShape& s : kAll) {
    for (bool with_bias : {true, false}) {
      const auto x = random_values(s.n * s.c * s.h * s.w, 11);
      const auto w = random_values(s.o * s.group_c() * s.kh * s.kw, 12);
      const auto b = random_values(s.o, 13);
      Tensor y = conv(Tensor::from_vector(x, x_shape(s)), Tensor::from_vector(w, w_shape(s)),
                      with_bias ? Tensor::from_vector(b, {s.o}) : Tensor(), s);
      REQUIRE(y.shape() == y_shape(s));
      require_close(y.to_vector(), conv_ref(s, x, w, with_bias ? &b : nullptr), 1e-5, 1e-5,
                    shape_name(s) + (with_bias ? " bias" : " no bias"));
    }
  }
}

TEST_CASE("grouped and dilated conv2d CPU backward matches the float64 adjoint", "[conv2d][grouped]") {
  for (const Conv2dShape& s : kAll) require_backward_matches_adjoint(s);
}

TEST_CASE("grouped and dilated conv2d CPU gradients match finite differences", "[conv2d][grouped]") {
  for (const Conv2dShape& s :
       {Conv2dShape{2, 4, 6, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 2}, Conv2dShape{1, 3, 7, 7, 3, 3, 3, 2, 2, 1, 1, 1, 1, 3},
        Conv2dShape{2, 2, 7, 6, 3, 2, 3, 1, 1, 1, 2, 2, 2, 1}}) {
    INFO(shape_name(s));
    const Tensor x = random_tensor(x_shape(s), 31), w = random_tensor(w_shape(s), 32), b = random_tensor({s.o}, 33);
    gradcheck([&](const Tensor& t) { return conv(t, w, b, s); }, x.clone());
    gradcheck([&](const Tensor& t) { return conv(x, t, b, s); }, w.clone());
    gradcheck([&](const Tensor& t) { return conv(x, w, t, s); }, b.clone());
  }
}

// Each group is the convolution of its own channels: the same GEMMs as that convolution alone.
TEST_CASE("grouped conv2d CPU forward equals its groups run one by one, bit for bit", "[conv2d][grouped]") {
  for (const Conv2dShape& s : {kGrouped, kDilatedUneven, kGroupedChunks, kGroupedSlots}) {
    INFO(shape_name(s));
    const Tensor x = random_tensor(x_shape(s), 41), w = random_tensor(w_shape(s), 42), b = random_tensor({s.o}, 43);
    const std::vector<float> y = conv(x, w, b, s).to_vector();
    const std::vector<float> xv = x.to_vector(), wv = w.to_vector(), bv = b.to_vector();
    Conv2dShape one = s;
    one.c = s.group_c();
    one.o = s.group_o();
    one.groups = 1;
    const int64_t plane_in = s.h * s.w, plane_out = s.oh() * s.ow(), wg = one.o * one.c * s.kh * s.kw;
    bool same = true;
    for (int64_t g = 0; g < s.groups; ++g) {
      std::vector<float> xg;
      for (int64_t n = 0; n < s.n; ++n) {
        const auto first = xv.begin() + (n * s.c + g * one.c) * plane_in;
        xg.insert(xg.end(), first, first + one.c * plane_in);
      }
      const std::vector<float> wg_v(wv.begin() + g * wg, wv.begin() + (g + 1) * wg);
      const std::vector<float> bg(bv.begin() + g * one.o, bv.begin() + (g + 1) * one.o);
      const std::vector<float> yg = conv(Tensor::from_vector(xg, x_shape(one)), Tensor::from_vector(wg_v, w_shape(one)),
                                         Tensor::from_vector(bg, {one.o}), one)
                                        .to_vector();
      for (int64_t n = 0; n < s.n; ++n)
        for (int64_t k = 0; k < one.o * plane_out; ++k)
          same &= yg[n * one.o * plane_out + k] == y[(n * s.o + g * one.o) * plane_out + k];
    }
    CHECK(same);
  }
}

TEST_CASE("grouped conv2d CPU results do not depend on the thread count", "[conv2d][grouped]") {
  require_thread_count_independent(kGroupedSlots);
  require_thread_count_independent({20, 32, 32, 32, 32, 3, 3, 1, 1, 1, 1, 1, 1, 32});  // depthwise: 3 image chunks
}

TEST_CASE("conv2d rejects groups and dilation that do not fit, naming them", "[conv2d][grouped]") {
  const Tensor x = Tensor::zeros({2, 6, 8, 8});
  REQUIRE_THROWS_WITH(conv2d(x, Tensor::zeros({4, 2, 3, 3}), Tensor(), 1, 1, 1, 4),
                      Catch::Contains("groups 4") && Catch::Contains("divide"));
  REQUIRE_THROWS_WITH(conv2d(x, Tensor::zeros({6, 3, 3, 3}), Tensor(), 1, 1, 1, 3),
                      Catch::Contains("expects 9") && Catch::Contains("3 per group, 3 groups"));
  REQUIRE_THROWS_WITH(conv2d(x, Tensor::zeros({6, 2, 3, 3}), Tensor(), 1, 1, 0, 3), Catch::Contains("dilation"));
  REQUIRE_THROWS_WITH(conv2d(x, Tensor::zeros({6, 2, 3, 3}), Tensor(), 1, 0, 4, 3),
                      Catch::Contains("smaller than the kernel 3x3 with dilation 4 (9x9 pixels)"));
}

TEST_CASE("Conv2d groups and dilation: keys, errors naming them, module", "[conv2d][grouped]") {
  const nlohmann::json spec = {{"type", "Conv2d"}, {"in_channels", 6}, {"out_channels", 12}, {"kernel_size", 3},
                               {"padding", 2},     {"dilation", 2},    {"groups", 3}};
  auto built = build_layer(spec, "model.layers.2");
  auto* c = dynamic_cast<Conv2d*>(built.get());
  REQUIRE(c != nullptr);
  CHECK(c->weight.shape() == Shape{12, 2, 3, 3});
  CHECK(c->groups() == 3);
  CHECK(c->dilation().h == 2);
  CHECK(c->describe() == "Conv2d 6->12 k3 d2 g3");
  CHECK(c->to_json()["groups"] == 3);
  CHECK(c->to_json()["dilation"] == 2);
  CHECK(build_layer(c->to_json(), "again")->to_json() == c->to_json());
  // The defaults are not written: a layer without them prints the keys it had.
  const auto plain =
      build_layer({{"type", "Conv2d"}, {"in_channels", 3}, {"out_channels", 4}, {"kernel_size", 3}}, "m");
  CHECK_FALSE(plain->to_json().contains("groups"));
  CHECK_FALSE(plain->to_json().contains("dilation"));
  CHECK(Conv2d(8, 8, Size2d(3, 1), 2, 0, true, Size2d(1, 2), 8).describe() == "Conv2d 8->8 k3x1 s2 d1x2 g8");

  // PyTorch's initialization: fan_in = in_channels / groups * kh * kw.
  set_init_seed(3);
  Conv2d depthwise(16, 16, 3, 1, 1, true, 1, 16);
  const double bound = 1.0 / 3.0;  // 1 / sqrt(9)
  double hi = 0;
  for (float v : depthwise.weight.to_vector()) hi = std::max(hi, std::fabs(static_cast<double>(v)));
  CHECK(hi <= bound);
  CHECK(hi > 0.8 * bound);
  // The module is the op with its parameters.
  const Tensor x = random_tensor({2, 6, 9, 9}, 61);
  CHECK((*c)(x).to_vector() == conv2d(x, c->weight, c->bias, 1, 2, 2, 3).to_vector());

  auto error = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json bad = spec;
    bad[key] = value;
    try {
      build_layer(bad, "model.layers.2");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error("groups", 4), Catch::Contains("model.layers.2.groups: must divide in_channels (6) and "
                                                 "out_channels (12), got 4"));
  CHECK_THAT(error("groups", 0), Catch::Contains("model.layers.2.groups: must be in 1..in_channels (6), got 0"));
  CHECK_THAT(error("groups", 12), Catch::Contains("model.layers.2.groups: must be in 1..in_channels (6), got 12"));
  CHECK_THAT(error("dilation", 0), Catch::Contains("model.layers.2.dilation: expected integers in 1..65536, got 0"));
  CHECK_THAT(error("dilation", nlohmann::json::array({1, 0})),
             Catch::Contains("model.layers.2.dilation: expected integers in 1..65536, got 1x0"));
  // A kernel that outgrows the padded input: the keys that set its span, and the input.
  Conv2d unpadded(6, 12, 3, 1, 0, true, 2, 3);
  unpadded.assign_paths("features.2");
  CHECK_NOTHROW(unpadded(Tensor::zeros({1, 6, 5, 5})));
  REQUIRE_THROWS_WITH(unpadded(Tensor::zeros({1, 6, 4, 5})),
                      Catch::Contains("Conv2d 6->12 k3 d2 g3 at 'features.2'") &&
                          Catch::Contains("kernel_size 3 with dilation 2 spans 5x5 pixels, more than the input "
                                          "(1, 6, 4, 5) with padding 0 (4x5)"));
}

TEST_CASE("Conv2d groups: the memory check counts the grouped weight", "[conv2d][grouped][model_memory]") {
  for (const char* text : {R"({"type": "Conv2d", "in_channels": 96, "out_channels": 96, "kernel_size": 3,
                               "groups": 96, "padding": 1})",
                           R"({"type": "Conv2d", "in_channels": 8, "out_channels": 12, "kernel_size": 5,
                               "groups": 4, "dilation": 2, "bias": false})"}) {
    const nlohmann::json spec = nlohmann::json::parse(text);
    nlohmann::json keys = spec;
    keys.erase("type");
    LayerArgs args(keys, "m");
    const LayerState state = conv2d_layer().state(args);
    const auto built = build_layer(spec, "m");
    int64_t elements = 0, largest = 0;
    for (const auto& [name, t] : built->named_parameters()) {
      elements += t.numel();
      largest = std::max(largest, t.numel());
    }
    CHECK(state.elements == elements);
    CHECK(state.largest_tensor == largest);
  }
}

// cuDNN's grouped and dilated convolutions (its group count and dilation on the descriptor), and
// for the depthwise problems our own kernels take in channels-last (test_conv2d_depthwise.cpp).
TEST_CASE("grouped and dilated conv2d on CUDA matches the CPU path, float32 NCHW", "[conv2d][grouped][cuda]") {
  MINIDL_REQUIRE_CUDA();
  for (bool deterministic : {true, false}) {
    SettingsGuard g(/*tf32=*/false, deterministic);
    for (const Conv2dShape& s : kAll)
      for (bool with_bias : {true, false}) {
        const std::string what =
            str(deterministic ? "heuristic " : "searched ", shape_name(s), with_bias ? " bias" : " no bias");
        const ConvRun cpu = run_conv(s, with_bias, Device::cpu(), 71), gpu = run_conv(s, with_bias, Device::cuda(), 71);
        require_close_scaled(gpu.y, cpu.y, 1e-5, "y " + what);
        require_close_scaled(gpu.dx, cpu.dx, 1e-5, "dx " + what);
        require_close_scaled(gpu.dw, cpu.dw, 1e-5, "dw " + what);
        if (with_bias) require_close_scaled(gpu.db, cpu.db, 1e-5, "db " + what);
      }
  }
}

TEST_CASE("grouped and dilated conv2d on CUDA, every dtype and layout, matches the definition",
          "[conv2d][grouped][cuda][half]") {
  MINIDL_REQUIRE_CUDA();
  SettingsGuard g(/*tf32=*/false, /*deterministic=*/true);
  uint64_t seed = 300;
  for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast})
    for (DType t : {DType::Float32, DType::BFloat16, DType::Float16})
      for (const Conv2dShape& s : kAll) {
        const ConvRun got = require_cuda_matches(s, t, format, seed += 10);
        CHECK(run_cuda(s, t, format, seed, nullptr).dw == got.dw);  // deterministic algorithms: the same bits
#ifdef MINIDL_WITH_CUDA
        if (format == MemoryFormat::ChannelsLast)
          WARN(dtype_name(t) << " " << shape_name(s) << ": " << kernels::conv2d_nhwc_cuda_algorithms(s, t));
#endif
      }
}

// Bad input from a config: one error naming the key, before anything is written.
TEST_CASE("a config with groups or dilation that do not fit stops before the run folder is made",
          "[conv2d][grouped][hostile]") {
  MINIDL_REQUIRE_DATA();
  const TempDir work("conv_groups");
  auto error_of = [&](const nlohmann::json& conv) {
    nlohmann::json layer = {{"type", "Conv2d"}, {"in_channels", 6}, {"out_channels", 6}, {"kernel_size", 3}};
    layer.update(conv);
    const nlohmann::json config = {
        {"device", "cpu"},
        {"epochs", 1},
        {"batch_size", 8},
        {"data", {{"dir", data_dir()}, {"train_limit", 16}}},
        {"model",
         {{"layers",
           {{{"type", "Conv2d"}, {"in_channels", 3}, {"out_channels", 6}, {"kernel_size", 3}, {"padding", 1}},
            layer,
            {{"type", "GlobalAvgPool2d"}},
            {{"type", "Linear"}, {"in_features", 6}, {"out_features", 10}}}}}},
        {"optimizer", {{"type", "SGD"}, {"lr", 0.1}}}};
    const std::string path = (work.path / "config.json").string();
    std::ofstream(path) << config.dump(2);
    RunOptions o;
    o.config_path = path;
    o.output_dir = (work.path / "run").string();
    std::string message = "no error";
    try {
      Run run(o);
    } catch (const Error& e) {
      message = e.what();
    }
    CHECK_FALSE(std::filesystem::exists(o.output_dir));
    return message;
  };
  CHECK_THAT(error_of({{"groups", 4}}), Catch::Contains("groups: must divide in_channels (6) and out_channels (6), "
                                                        "got 4"));
  CHECK_THAT(error_of({{"dilation", 0}}), Catch::Contains("dilation: expected integers in 1..65536, got 0"));
  CHECK_THAT(
      error_of({{"dilation", 20}}),
      Catch::Contains("does not take the data's 3x32x32 images") &&
          Catch::Contains("kernel_size 3 with dilation 20 spans 41x41 pixels, more than the input (1, 6, 32, 32) "
                          "with padding 0 (32x32)"));
}
