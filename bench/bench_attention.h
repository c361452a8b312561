// `minidl bench attention`: self-attention forward + backward on the GPU at a ViT's shapes
// (default: batch 512, 64 tokens, width 384, 6 heads, bfloat16), the kernels alone
// (attention_forward_cuda + attention_backward_cuda on preallocated tensors) and the op with
// its autograd node, per call: the median of spans of 20 back-to-back calls, with a stall kernel
// queued first so the figures are the GPU's time, not the host's launch rate.
// Options: --batch N --tokens T --width D --heads H --dtype bf16|fp16|fp32 --dropout P
// --repeat N (default 9) --csv FILE (one row per measurement, for scripts/gpu/attention.sh).
#pragma once
#include <string>
#include <vector>

namespace minidl {

int bench_attention_main(const std::vector<std::string>& args);

}  // namespace minidl
