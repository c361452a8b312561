// Compute switches. Ops read them from the current run's context (core/run_context.h): a Trainer's
// own, made from its config, or the default one, which parity, the benchmarks and tests set
// through set_compute_settings, so who changed them is one grep away.
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

// The current context's settings, and their replacement (in that context only).
const ComputeSettings& compute_settings();
void set_compute_settings(const ComputeSettings& settings);

}  // namespace minidl
