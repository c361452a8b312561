// A segmentation batch from a volume set (data/volumes.h): the batch's volumes are the data set's
// at order[cursor->position + offset ...], as an image batch's are (data/augment_kernel.h's
// BatchCursor), so a CUDA graph replays one batch kernel after each advance(). Each volume's
// float32 channels are written in the batch's storage type (float32, bfloat16 or float16, rounded
// to nearest even by core/half_types.h on both sides: the same bits) and layout (NCDHW, or NDHWC:
// channels_last_3d), its int32 labels (one per voxel) copied as they are.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "data/augment_kernel.h"

namespace minidl::kernels {

// The sizes of one volume: channels x voxels (D * H * W).
struct VolumeShape {
  int64_t channels, voxels;
};

// Where channel c of voxel v of batch sample b lies in the batch.
MINIDL_HD int64_t volume_batch_offset(const VolumeShape& s, int64_t b, int64_t c, int64_t v, bool channels_last) {
  return channels_last ? (b * s.voxels + v) * s.channels + c : (b * s.channels + c) * s.voxels + v;
}

// images: float32 (N, C, D, H, W) contiguous; labels: int32 (N, D, H, W); out: `batch` volumes of
// `dtype` in the layout; out_labels: int32 (batch, D, H, W).
void volume_batch_cpu(const float* images, const int32_t* labels, const int32_t* order, int64_t batch,
                      VolumeShape shape, const BatchCursor* cursor, int64_t offset, void* out, DType dtype,
                      bool channels_last, int32_t* out_labels);
void volume_batch_cuda(const float* images, const int32_t* labels, const int32_t* order, int64_t batch,
                       VolumeShape shape, const BatchCursor* cursor, int64_t offset, void* out, DType dtype,
                       bool channels_last, int32_t* out_labels);

}  // namespace minidl::kernels
