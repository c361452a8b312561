// `minidl bench norm`: the fast normalization kernels (layers/norm) against the DRAM floor and
// against PyTorch's figures in docs/perf/anchors.md, on the H200 they were measured on.
//   1. measures the device copy bandwidth (1 GiB device-to-device, CUDA events);
//   2. for BatchNorm2d(C), GroupNorm(32 or 1, C) and LayerNorm([C, H, W]) on every docs/perf/anchors.md
//      shape (and LayerNorm over the last dim at the transformer shapes): checks the fast path
//      against the float64 oracle once, then times forward (training) and backward on its own,
//      CUDA events around each call as docs/perf/anchors.md times PyTorch (median of --reps after
//      --warmup calls), plus the back-to-back rate of the same calls (GPU time without the host);
//   3. prints ms, ratio to the floor (2x / 3x the tensor's bytes over the measured bandwidth) and
//      its inverse, the fraction of the copy bandwidth reached, the path each pass took (block,
//      cluster xN, 3-launch: layers/norm/norm_kernels.h), PyTorch's figure and our speed-up, the geometric means over the
//      eight large shapes and whether each target of the task is met.
// --volumes: instead, GroupNorm(8, C) and BatchNorm3d(C) with the fused ReLU at a 128^3 3-D UNet's
// shapes (32 channels at 128^3 down to 256 at 16^3), against the copy roof and --torch's figures
// (scripts/bench/torch_norm.py --volumes), with the volume targets (docs/volumes.md).
// Options: --json FILE (every number, for scripts/gpu/norm.sh), --reps N (50), --warmup N (10),
// --path auto|block|cluster|3-launch (every pass on that path where it can run it, else auto).
// Exit status 1 when a fast result disagrees with the oracle.
#pragma once
#include <string>

namespace minidl {

struct BenchNormOptions {
  std::string json;                       // every number, for scripts/gpu/norm.sh; empty: none
  int reps = 50;                          // timed calls, the median reported
  int warmup = 10;                        // untimed calls before them
  std::string path = "auto";              // auto, block, cluster, warp or 3-launch
  std::string dtype = "fp32";             // of x, y, dy, dx: the config's "precision" names
  std::string memory_format = "contiguous";  // or channels_last
  std::string torch;                      // PyTorch's figures of this mode (scripts/bench/torch_norm.py)
  bool volumes = false;                   // the 3-D UNet's shapes instead of docs/perf/anchors.md's
};

int bench_norm(const BenchNormOptions& options);

}  // namespace minidl
