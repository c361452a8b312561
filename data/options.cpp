#include "data/options.h"

#include "core/error.h"
#include "core/json_args.h"
#include "core/json_limits.h"

namespace minidl {

namespace {

std::array<double, 3> read_triple(const nlohmann::json& j, const std::string& key_path) {
  MINIDL_CHECK(j.is_array() && j.size() == 3, key_path, ": expected a list of 3 numbers (R, G, B), got ",
               json_excerpt(j));
  std::array<double, 3> v{};
  for (size_t c = 0; c < 3; ++c) {
    MINIDL_CHECK(j[c].is_number(), key_path, "[", c, "]: expected a number, got ", json_excerpt(j[c]));
    v[c] = j[c].get<double>();
  }
  return v;
}

}  // namespace

AugmentOptions AugmentOptions::from_json(const nlohmann::json& j, const std::string& path) {
  MINIDL_CHECK(j.is_object(), path, ": expected an object, got ", json_excerpt(j));
  JsonArgs args(j, path);
  AugmentOptions o;
  o.crop_padding = static_cast<int>(args.get_int("crop_padding", o.crop_padding, 0, 31));
  o.padding_mode = args.get_string("padding_mode", o.padding_mode);
  o.flip = args.get_bool("flip", o.flip);
  o.flip_mode = args.get_string("flip_mode", o.flip_mode);
  o.cutout = static_cast<int>(args.get_int("cutout", o.cutout, 0, 32));
  args.finish();
  o.validate(path);
  return o;
}

void AugmentOptions::validate(const std::string& path) const {
  MINIDL_CHECK(crop_padding >= 0 && crop_padding < 32, path, ".crop_padding: expected 0..31 pixels, got ",
               crop_padding);
  MINIDL_CHECK(padding_mode == "reflect" || padding_mode == "zero", path,
               ".padding_mode: expected \"reflect\" or \"zero\", got \"", padding_mode, "\"");
  MINIDL_CHECK(flip_mode == "random" || flip_mode == "alternating", path,
               ".flip_mode: expected \"random\" or \"alternating\", got \"", flip_mode, "\"");
  MINIDL_CHECK(cutout >= 0 && cutout <= 32, path, ".cutout: expected a square side of 0..32 pixels, got ",
               cutout);
}

nlohmann::json AugmentOptions::to_json() const {
  return {{"crop_padding", crop_padding}, {"padding_mode", padding_mode}, {"flip", flip},
          {"flip_mode", flip_mode}, {"cutout", cutout}};
}

DataOptions DataOptions::from_json(const nlohmann::json& j, const std::string& path) {
  MINIDL_CHECK(j.is_object(), path, ": expected an object, got ", json_excerpt(j));
  JsonArgs args(j, path);
  DataOptions o;
  o.dir = args.get_string("dir", o.dir);
  o.train_limit = args.get_int("train_limit", o.train_limit);
  if (args.has("mean")) o.normalize.mean = read_triple(args.get_json("mean"), args.key_path("mean"));
  if (args.has("std")) o.normalize.std = read_triple(args.get_json("std"), args.key_path("std"));
  if (args.has("augment"))
    o.augment = AugmentOptions::from_json(args.get_json("augment"), args.key_path("augment"));
  args.finish();
  MINIDL_CHECK(o.train_limit >= 0, args.key_path("train_limit"), ": expected >= 0 (0 = all), got ",
               o.train_limit);
  for (size_t c = 0; c < 3; ++c)
    MINIDL_CHECK(o.normalize.std[c] > 0, args.key_path("std"), "[", c, "]: expected > 0, got ",
                 o.normalize.std[c]);
  return o;
}

nlohmann::json DataOptions::to_json() const {
  return {{"dir", dir}, {"train_limit", train_limit}, {"mean", normalize.mean},
          {"std", normalize.std}, {"augment", augment.to_json()}};
}

kernels::AugmentParams augment_params(const Normalization& normalize, const AugmentOptions* augment,
                                      uint64_t seed, int64_t epoch) {
  MINIDL_CHECK(epoch >= 0 && epoch < (int64_t{1} << 32), "data: epoch ", epoch, " out of range");
  kernels::AugmentParams p;
  p.seed = seed;
  p.epoch = epoch;
  for (int c = 0; c < 3; ++c) {
    MINIDL_CHECK(normalize.std[c] > 0, "data.std[", c, "]: expected > 0, got ", normalize.std[c]);
    p.scale[c] = static_cast<float>(1.0 / (255.0 * normalize.std[c]));
    p.shift[c] = static_cast<float>(-normalize.mean[c] / normalize.std[c]);
  }
  if (augment) {
    augment->validate("data.augment");
    p.crop_padding = augment->crop_padding;
    p.reflect = augment->padding_mode == "reflect" ? 1 : 0;
    p.flip_mode = !augment->flip ? kernels::kFlipNone
                  : augment->flip_mode == "alternating" ? kernels::kFlipAlternating
                                                        : kernels::kFlipRandom;
    p.cutout = augment->cutout;
  }
  return p;
}

}  // namespace minidl
