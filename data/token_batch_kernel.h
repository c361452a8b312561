// A language model's batch from a token set (data/token_windows.h): sample i of the data set is
// window i, seq_len + 1 consecutive tokens; the batch's inputs are each window's first seq_len
// tokens and its targets the last seq_len (each token's successor). The window order and the
// position in it come from the loader's device-resident order and cursor (data/augment_kernel.h's
// BatchCursor), as for images, so a CUDA graph replays one batch kernel after each advance().
#pragma once
#include <cstdint>

#include "data/augment_kernel.h"

namespace minidl::kernels {

// windows: int32 (N, seq_len + 1); order: the epoch's window order; the batch is the `batch`
// windows at order[cursor->position + offset ...]; inputs and targets: int32 (batch, seq_len).
void token_batch_cpu(const int32_t* windows, const int32_t* order, int64_t batch, int64_t seq_len,
                     const BatchCursor* cursor, int64_t offset, int32_t* inputs, int32_t* targets);
void token_batch_cuda(const int32_t* windows, const int32_t* order, int64_t batch, int64_t seq_len,
                      const BatchCursor* cursor, int64_t offset, int32_t* inputs, int32_t* targets);

}  // namespace minidl::kernels
