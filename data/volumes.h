// A synthetic volumetric segmentation data set made on the fly from a seed, no download (the idea
// of ScaFFold's fractal volumes): each volume holds a few fractal objects, each of one foreground
// class, on background class 0. A class is an iterated function system (IFS): three or four
// contracting affine maps of 3-D space drawn from (seed, class) alone, so every object of a class
// is a copy of one attractor, and the classes differ by shape and texture only, not by brightness.
// An object is its class's attractor traced by the chaos game, scaled into a box of a random size
// and placed at a random position of the volume; its points are voxelized into the labels (a later
// object over an earlier one) and counted into the image. The image's one channel is the point
// density count / (count + 2) plus uniform noise in [-noise, noise]: a network must tell classes
// apart by the structure it sees.
//
// Every value is a pure function of (seed, volume index) through Philox (core/philox.h) and
// float32 arithmetic without library math, computed on the CPU: the same bits on every machine,
// whatever device then trains on it.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace minidl {

struct VolumeSetOptions {
  int64_t size = 32;    // voxels per side (D = H = W), 8..256
  int64_t classes = 4;  // including background class 0, 2..16
  int64_t objects = 3;  // per volume, 1..64
  double noise = 0.1;   // amplitude of the image's uniform noise, 0..1
  uint64_t seed = 0;    // the classes' maps and every volume's objects
};

// Errors naming the option when one is out of its range.
void check_volume_options(const VolumeSetOptions& o);

struct VolumeBatch {
  Tensor images;  // float32 (N, 1, S, S, S), host, contiguous
  Tensor labels;  // int32 (N, S, S, S), host, values 0 .. classes - 1
};

// Volumes first .. first + count - 1 of the set.
VolumeBatch synthetic_volumes(const VolumeSetOptions& o, int64_t first, int64_t count);

}  // namespace minidl
