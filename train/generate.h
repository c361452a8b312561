// Sampling text from a language model (`minidl generate`): nanoGPT's generate, one token per
// step. Each step runs the model on the last `context` tokens, takes the logits of the last
// position, divides them by the temperature, keeps the top k, and draws the next token from their
// softmax. The softmax is float64 on the host and the draw is the counter RNG's (core/philox.h,
// stream kStreamGenerate, index = the step), inverse-CDF over the ids in ascending order: the same
// seed gives the same tokens on the CPU and a GPU wherever their logits are equal.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "core/device.h"

namespace minidl {

class Module;
class TrainedRun;

struct GenerateOptions {
  int64_t max_new_tokens = 200;
  double temperature = 1.0;  // > 0 divides the logits; 0: greedy (the argmax, the lowest id among ties)
  int64_t top_k = 0;         // > 0: only the k largest logits (ties with the k-th kept, as nanoGPT); 0: all
  uint64_t seed = 0;
  // The model's window T (>= 1): each step sees the last `context` tokens, as nanoGPT crops to
  // block_size. A model whose PositionEmbedding holds fewer positions fails in its forward.
  int64_t context = 0;
  // > 0: only ids below it are drawn (a tokenizer's vocabulary under a model's padded V, as llm.c
  // pads 50257 to 50304); 0: every id of the logits.
  int64_t vocab_limit = 0;
  // Called with each token as it is drawn (printing as it goes).
  std::function<void(int32_t)> on_token;
};

// The `max_new_tokens` tokens that follow `prompt` (the prompt not included). The model takes
// int32 ids (1, t) on `device` and gives (1, t, V) logits (under the caller's autocast, if any);
// it runs in eval mode without autograd, and its mode is restored afterwards. Bad options
// (temperature < 0, top_k < 0, context < 1, an empty prompt, an id outside [0, V)) are one error.
std::vector<int32_t> generate_tokens(Module& model, Device device, const std::vector<int32_t>& prompt,
                                     const GenerateOptions& options);

// The token drawn at `step` from one position's logits (host, V values), by the options'
// temperature, top_k, seed and vocab_limit: the host half of a step.
int32_t sample_token(const std::vector<float>& logits, const GenerateOptions& options, uint64_t step);

// The fewest positions a PositionEmbedding of `model` holds (nanoGPT's block_size), 0 when it has
// none: the longest window the model takes.
int64_t position_limit(Module& model);

// The window `minidl generate` runs a language model's run with: `requested` when > 0 (--context),
// else the run's data.seq_len (the windows it trained on), else its PositionEmbedding's length.
// Longer than the PositionEmbedding, or none of the three, is an error saying which to give.
int64_t run_context(TrainedRun& run, int64_t requested);

}  // namespace minidl
