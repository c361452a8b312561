// What the apply and grad_sums passes read besides x (and dy): the saved mean and rstd and the
// affine parameters, indexed the BatchNorm way (everything per column: the channel) or the
// GroupNorm/LayerNorm way (statistics per row segment, affine per column). The passes derive
// from these and add only their element(), each with the fused activation A as a template
// argument (norm_math.h: with_activation).
#pragma once
#include "layers/norm/norm_tiles.cuh"

namespace minidl::norm {

// Column c of the tiles is channel c / plane % channels: the modulo maps the virtual columns of a
// folded layout (tiles::channel_fold) to their channel and is the identity otherwise. The channel's
// statistics are its own (BatchNorm: group_channels 1, groups_per_sample 0) or, for GroupNorm on
// channels-last memory, those of group f / group_channels of the unit's sample.
struct ChannelParams {
  const float *mean, *rstd, *weight, *bias;
  int32_t plane, channels, group_channels, groups_per_sample;
  struct Col {
    float mean, scale, shift;
  };
  struct Row {};
  __device__ int channel(int c) const { return c / plane % channels; }
  __device__ int64_t statistic(int f, const tiles::Unit& u) const {
    return u.sample * groups_per_sample + f / group_channels;
  }
  __device__ Col column(int c, const tiles::Unit& u) const {
    const int f = channel(c);
    const int64_t i = statistic(f, u);
    return {mean[i], feature_scale(weight, f, rstd[i]), feature_shift(bias, f)};
  }
  __device__ Row row(int64_t, const tiles::Unit&) const { return {}; }
};

// Without a weight w is 1, and 1 * rstd is rstd exactly, as feature_scale gives on the CPU.
struct SegmentParams {
  const float *mean, *rstd, *weight, *bias;
  int32_t plane, segment;
  int64_t segments_per_row;
  struct Col {
    float w, shift;
  };
  struct Row {
    float mean, rstd;
  };
  __device__ Col column(int c, const tiles::Unit&) const {
    const int f = c / plane;
    return {weight ? weight[f] : 1.f, feature_shift(bias, f)};
  }
  __device__ Row row(int64_t r, const tiles::Unit& u) const {
    const int64_t g = r * segments_per_row + u.col0 / segment;
    return {mean[g], rstd[g]};
  }
};

// Of a Channel layout, or of a ChannelGroup one (whose tiles see one channel per column).
inline ChannelParams channel_params(const NormLayout& l, const float* mean, const float* rstd, const float* weight,
                                    const float* bias) {
  const bool groups = l.kind == NormKind::ChannelGroup;
  return {mean,
          rstd,
          weight,
          bias,
          static_cast<int32_t>(groups ? 1 : l.plane),
          static_cast<int32_t>(l.features),
          static_cast<int32_t>(groups ? l.segment : 1),
          static_cast<int32_t>(groups ? l.segments_per_row() : 0)};
}

inline SegmentParams segment_params(const NormLayout& l, const float* mean, const float* rstd, const float* weight,
                                    const float* bias) {
  return {mean,   rstd, weight, bias, static_cast<int32_t>(l.plane), static_cast<int32_t>(l.segment),
          l.segments_per_row()};
}

}  // namespace minidl::norm
