// Our depthwise kernels (layers/conv/conv2d_depthwise_cuda.cu, conv2d_depthwise_filter_cuda.cu) on
// channels-last float32, bfloat16 and float16: which problems they serve, and [cuda] forward,
// input, weight and bias gradients against the float64 definition on the same (widened) values
// (conv_reference.h) for 3x3, 5x5 and 7x7 kernels, strides 1 and 2, paddings from none to more
// than the kernel, channel counts that fill a block of 32 or not, ragged planes; the route the
// op took; the same bits on a second run.
#include "core/init.h"
#include "layers/conv/conv2d_depthwise.h"
#include "tests/conv_reference.h"

using namespace minidl;
using namespace minidl::test;

namespace {

// {n, c, h, w, o, kh, kw, sh, sw, ph, pw, dil_h, dil_w, groups}
Conv2dShape depthwise(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t stride, int64_t pad) {
  return {n, c, h, w, c, k, k, stride, stride, pad, pad, 1, 1, c};
}

const Conv2dShape kShapes[] = {
    depthwise(3, 32, 8, 8, 3, 1, 1),     // MobileNet's 3x3, one block of channels
    depthwise(2, 40, 9, 7, 3, 2, 1),     // stride 2 on odd planes, a part-filled block
    depthwise(2, 144, 5, 6, 3, 1, 1),    // 144 channels: 4.5 blocks
    depthwise(2, 16, 6, 11, 5, 1, 2),    // 5x5
    depthwise(2, 48, 13, 11, 7, 1, 3),   // ConvNeXt's 7x7
    depthwise(2, 24, 12, 9, 7, 2, 3),    // 7x7 stride 2
    depthwise(2, 8, 7, 9, 3, 1, 0),      // no padding
    depthwise(2, 8, 4, 5, 3, 1, 3),      // padding past k - 1 (negative padding for backward-data)
    depthwise(1, 8, 3, 3, 7, 1, 3),      // a plane smaller than the kernel
    depthwise(64, 32, 16, 16, 3, 1, 1),  // enough strips for many weight-gradient slices
};

}  // namespace

TEST_CASE("conv2d depthwise kernels: which problems they serve", "[conv2d][depthwise]") {
  for (const Conv2dShape& s : kShapes) CHECK(kernels::conv2d_depthwise_applies(s));
  Conv2dShape s = depthwise(2, 32, 8, 8, 3, 1, 1);
  CHECK_FALSE(kernels::conv2d_depthwise_applies(depthwise(2, 12, 8, 8, 3, 1, 1)));  // not whole vectors
  CHECK_FALSE(kernels::conv2d_depthwise_applies(depthwise(2, 32, 8, 8, 4, 1, 1)));  // even kernel
  CHECK_FALSE(kernels::conv2d_depthwise_applies(depthwise(2, 32, 8, 8, 3, 3, 1)));  // stride 3
  Conv2dShape t = s;
  t.dil_h = t.dil_w = 2;
  CHECK_FALSE(kernels::conv2d_depthwise_applies(t));  // dilated: cuDNN
  t = s;
  t.o = 64;
  CHECK_FALSE(kernels::conv2d_depthwise_applies(t));  // two outputs per channel
  t = s;
  t.groups = 16;
  CHECK_FALSE(kernels::conv2d_depthwise_applies(t));  // grouped, not depthwise
  t = s;
  t.kw = 5;
  CHECK_FALSE(kernels::conv2d_depthwise_applies(t));  // not square
}

TEST_CASE("conv2d depthwise kernels match the float64 definition in every dtype", "[conv2d][depthwise][cuda]") {
  MINIDL_REQUIRE_CUDA();
  uint64_t seed = 100;
  for (DType t : {DType::Float32, DType::BFloat16, DType::Float16})
    for (const Conv2dShape& s : kShapes) {
      // db comes from the channels-last bias reduction (conv2d_nhwc_backward_bias_cuda).
      require_cuda_matches(s, t, MemoryFormat::ChannelsLast, seed += 10);
#ifdef MINIDL_WITH_CUDA
      CHECK(kernels::conv2d_nhwc_cuda_algorithms(s, t) ==
            "fwd depthwise direct | bwd_data depthwise direct | bwd_filter depthwise direct");
#endif
    }
}

TEST_CASE("conv2d depthwise kernels give the same bits on a second run", "[conv2d][depthwise][cuda]") {
  MINIDL_REQUIRE_CUDA();
  for (DType t : {DType::BFloat16, DType::Float32})
    for (const Conv2dShape& s : {kShapes[1], kShapes[4], kShapes[9]}) {
      INFO(dtype_name(t) << " " << shape_name(s));
      const MemoryFormat cl = MemoryFormat::ChannelsLast;
      const ConvRun a = run_cuda(s, t, cl, 7, nullptr), b = run_cuda(s, t, cl, 7, nullptr);
      CHECK(a.y == b.y);
      CHECK(a.dx == b.dx);
      CHECK(a.dw == b.dw);
      CHECK(a.db == b.db);
    }
}

// The Conv2d module with groups = channels, as a MobileNet or ConvNeXt block builds it, under
// autocast on a channels-last input: its weight gradient reaches the float32 master.
TEST_CASE("Conv2d depthwise module on CUDA in bf16 channels-last matches the CPU module", "[conv2d][depthwise][cuda]") {
  MINIDL_REQUIRE_CUDA();
  set_init_seed(9);
  Conv2d cpu(96, 96, 7, 1, 3, true, 1, 96);
  set_init_seed(9);
  Conv2d gpu(96, 96, 7, 1, 3, true, 1, 96);
  gpu.to(Device::cuda());
  const Tensor x = random_tensor({4, 96, 8, 8}, 95).to(DType::BFloat16).to(DType::Float32);
  const Tensor dy = random_tensor({4, 96, 8, 8}, 96).to(DType::BFloat16).to(DType::Float32);
  autograd::backward(cpu(x), dy);
  autograd::backward(gpu(x.to(Device::cuda()).to(DType::BFloat16).to(MemoryFormat::ChannelsLast)),
                     dy.to(Device::cuda()).to(DType::BFloat16).to(MemoryFormat::ChannelsLast));
  // The GPU computes in bf16 (weights rounded to bf16 too): a few bf16 roundings of the scale.
  require_close_scaled(gpu.weight.grad().to_vector(), cpu.weight.grad().to_vector(), 3.0 / 256, "module dw");
  require_close_scaled(gpu.bias.grad().to_vector(), cpu.bias.grad().to_vector(), 3.0 / 256, "module db");
}
