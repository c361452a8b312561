// `minidl bench attention`: self-attention forward + backward on the GPU at a ViT's shapes
// (default: batch 512, 64 tokens, width 384, 6 heads, bfloat16), the kernels alone
// (attention_forward_cuda + attention_backward_cuda on preallocated tensors) and the op with
// its autograd node, per call: the median of spans of 20 back-to-back calls, with a stall kernel
// queued first so the figures are the GPU's time, not the host's launch rate.
// Options: --batch N --tokens T --width D --heads H --dtype bf16|fp16|fp32 --dropout P --causal
// --repeat N (default 9) --csv FILE (one row per measurement, for scripts/gpu/attention.sh and
// scripts/gpu/gpt2.sh). GPT-2's shape: --batch 16 --tokens 1024 --width 768 --heads 12 --causal.
#pragma once
#include <cstdint>
#include <string>

namespace minidl {

struct BenchAttentionOptions {
  int64_t batch = 512, tokens = 64, width = 384, heads = 6;  // width a multiple of heads
  std::string dtype = "bf16";                                 // bf16, fp16 or fp32
  double dropout = 0;                                         // in [0, 1]
  bool causal = false;                                        // a language model's mask
  int repeat = 9;                                             // spans timed, the median reported
  std::string csv;                                            // empty: no CSV
};

int bench_attention(const BenchAttentionOptions& options);

}  // namespace minidl
