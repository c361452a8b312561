// Process-wide compute switches, set once from the config before training.
#pragma once

namespace minidl {

struct ComputeSettings {
  // Only algorithms that give the same bits every run (cuDNN's deterministic algorithms; our own
  // kernels are deterministic always). Off lets cuDNN pick its fastest algorithms.
  bool deterministic = true;
  // TF32 tensor-core math in cuDNN convolutions. On by default, as in PyTorch
  // (torch.backends.cudnn.allow_tf32 = True), so timings compare like with like. Linear layers
  // stay in full fp32, also as in PyTorch.
  bool allow_tf32 = true;
};

ComputeSettings& compute_settings();

}  // namespace minidl
