#include "data/options.h"

#include <cmath>
#include <limits>

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

std::array<double, 2> read_pair(const nlohmann::json& j, const std::string& key_path) {
  MINIDL_CHECK(j.is_array() && j.size() == 2 && j[0].is_number() && j[1].is_number(), key_path,
               ": expected a list of 2 numbers [min, max], got ", json_excerpt(j));
  return {j[0].get<double>(), j[1].get<double>()};
}

// The object at `key` read through JsonArgs of its own; anything else is an error showing `example`.
JsonArgs nested(JsonArgs& args, const char* key, const char* example) {
  const nlohmann::json& j = args.get_json(key);
  MINIDL_CHECK(j.is_object(), args.key_path(key), ": expected an object like ", example, ", got ", json_excerpt(j));
  return JsonArgs(j, args.key_path(key));
}

}  // namespace

AugmentOptions AugmentOptions::from_json(const nlohmann::json& j, const std::string& path) {
  MINIDL_CHECK(j.is_object(), path, ": expected an object, got ", json_excerpt(j));
  JsonArgs args(j, path);
  AugmentOptions o;
  o.crop_padding = static_cast<int>(args.get_int("crop_padding", o.crop_padding, 0, 1023));
  o.padding_mode = args.get_string("padding_mode", o.padding_mode);
  o.flip = args.get_bool("flip", o.flip);
  o.flip_mode = args.get_string("flip_mode", o.flip_mode);
  o.cutout = static_cast<int>(args.get_int("cutout", o.cutout, 0, 4096));
  if (args.has("random_resized_crop")) {
    JsonArgs rargs = nested(args, "random_resized_crop", "{\"scale\": [0.08, 1], \"ratio\": [0.75, 1.3333]}");
    o.resized_crop = true;
    if (rargs.has("scale")) o.crop_scale = read_pair(rargs.get_json("scale"), rargs.key_path("scale"));
    if (rargs.has("ratio")) o.crop_ratio = read_pair(rargs.get_json("ratio"), rargs.key_path("ratio"));
    rargs.finish();
  }
  if (args.has("color_jitter")) {
    JsonArgs jargs = nested(args, "color_jitter", "{\"brightness\": 0.14, \"contrast\": 0.13}");
    o.brightness = jargs.get_float("brightness", o.brightness);
    o.contrast = jargs.get_float("contrast", o.contrast);
    jargs.finish();
  }
  args.finish();
  o.validate(path);
  return o;
}

void AugmentOptions::validate(const std::string& path) const {
  MINIDL_CHECK(crop_padding >= 0 && crop_padding <= 1023, path, ".crop_padding: expected 0..1023 pixels, got ",
               crop_padding);
  MINIDL_CHECK(padding_mode == "reflect" || padding_mode == "zero", path,
               ".padding_mode: expected \"reflect\" or \"zero\", got ", json_excerpt(padding_mode));
  MINIDL_CHECK(flip_mode == "random" || flip_mode == "alternating", path,
               ".flip_mode: expected \"random\" or \"alternating\", got ", json_excerpt(flip_mode));
  MINIDL_CHECK(cutout >= 0 && cutout <= 4096, path, ".cutout: expected a square side of 0..4096 pixels, got ",
               cutout);
  // A contrast of 1 or more could flip an image's sign; a brightness past 100 standard deviations
  // is no jitter.
  MINIDL_CHECK(std::isfinite(brightness) && brightness >= 0 && brightness <= 100, path,
               ".color_jitter.brightness: expected 0..100 (in standard deviations), got ", brightness);
  MINIDL_CHECK(std::isfinite(contrast) && contrast >= 0 && contrast < 1, path,
               ".color_jitter.contrast: expected 0 <= contrast < 1, got ", contrast);
  if (!resized_crop) return;
  MINIDL_CHECK(crop_padding == 0, path, ".random_resized_crop replaces the padded crop: set crop_padding to 0 (got ",
               crop_padding, ")");
  MINIDL_CHECK(crop_scale[0] > 0 && crop_scale[0] <= crop_scale[1] && crop_scale[1] <= 1, path,
               ".random_resized_crop.scale: expected 0 < min <= max <= 1, got [", crop_scale[0], ", ", crop_scale[1], "]");
  MINIDL_CHECK(crop_ratio[0] >= 1.0 / 1000 && crop_ratio[0] <= crop_ratio[1] && crop_ratio[1] <= 1000, path,
               ".random_resized_crop.ratio: expected 0.001 <= min <= max <= 1000, got [", crop_ratio[0], ", ",
               crop_ratio[1], "]");
}

void AugmentOptions::validate_for_size(const std::string& path, int64_t height, int64_t width) const {
  validate(path);
  MINIDL_CHECK(padding_mode != "reflect" || resized_crop || (crop_padding < height && crop_padding < width), path,
               ".crop_padding: reflect padding of ", crop_padding, " pixels needs images larger than that; these are ",
               height, "x", width);
  MINIDL_CHECK(cutout <= height && cutout <= width, path, ".cutout: a square of ", cutout,
               " pixels does not fit the ", height, "x", width, " images");
}

nlohmann::json AugmentOptions::to_json() const {
  nlohmann::json j = {{"crop_padding", crop_padding}, {"padding_mode", padding_mode}, {"flip", flip},
                      {"flip_mode", flip_mode}, {"cutout", cutout}};
  if (resized_crop) j["random_resized_crop"] = {{"scale", crop_scale}, {"ratio", crop_ratio}};
  // Written only when on, like random_resized_crop: a run without it keeps its config.json.
  if (brightness > 0 || contrast > 0) j["color_jitter"] = {{"brightness", brightness}, {"contrast", contrast}};
  return j;
}

DataOptions DataOptions::from_json(const nlohmann::json& j, const std::string& path) {
  MINIDL_CHECK(j.is_object(), path, ": expected an object, got ", json_excerpt(j));
  JsonArgs args(j, path);
  DataOptions o;
  o.format = args.get_string("format", o.format);
  MINIDL_CHECK(o.format == "cifar10" || o.format == "cifar100" || o.format == "image_folder", args.key_path("format"),
               ": expected \"cifar10\", \"cifar100\" or \"image_folder\", got ", json_excerpt(o.format));
  o.dir = args.get_string("dir", o.dir);
  o.train_limit = args.get_int("train_limit", o.train_limit);
  o.test_limit = args.get_int("test_limit", o.test_limit, 0, std::numeric_limits<int64_t>::max());
  // Keys of another format are errors: they would be silently ignored.
  const auto only_for = [&](const char* key, const char* format) {
    MINIDL_CHECK(!args.has(key) || o.format == format, args.key_path(key), ": only for \"format\": \"", format,
                 "\" (this is \"", o.format, "\")");
  };
  only_for("label", "cifar100");
  for (const char* key : {"image_size", "resize", "test_dir", "cache_dir", "skip_bad"}) only_for(key, "image_folder");
  o.label = args.get_string("label", o.label);
  MINIDL_CHECK(o.label == "fine" || o.label == "coarse", args.key_path("label"),
               ": expected \"fine\" or \"coarse\", got ", json_excerpt(o.label));
  if (args.has("image_size")) o.image_size = args.get_int("image_size", o.image_size, 1, 4096);
  MINIDL_CHECK(o.format != "image_folder" || o.image_size > 0, args.key_path("image_size"),
               ": an image folder needs the size every image is resized to (e.g. 32, 64, 224)");
  o.resize = args.get_string("resize", o.resize);
  MINIDL_CHECK(o.resize == "crop" || o.resize == "pad" || o.resize == "stretch", args.key_path("resize"),
               ": expected \"crop\", \"pad\" or \"stretch\", got ", json_excerpt(o.resize));
  o.test_dir = args.get_string("test_dir", o.test_dir);
  o.cache_dir = args.get_string("cache_dir", o.cache_dir);
  o.skip_bad = args.get_bool("skip_bad", o.skip_bad);
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
  nlohmann::json j = {{"dir", dir}, {"train_limit", train_limit}, {"mean", normalize.mean},
                      {"std", normalize.std}, {"augment", augment.to_json()}};
  // CIFAR-10, the default, prints no format keys: its runs' config.json stays as it was.
  if (format != "cifar10") j["format"] = format;
  // Written only when set, like the format: a run on the whole test set keeps its config.json.
  if (test_limit > 0) j["test_limit"] = test_limit;
  if (format == "cifar100") j["label"] = label;
  if (format == "image_folder") {
    j["image_size"] = image_size;
    j["resize"] = resize;
    j["test_dir"] = test_dir;
    j["cache_dir"] = cache_dir;
    j["skip_bad"] = skip_bad;
  }
  return j;
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
    p.resized_crop = augment->resized_crop ? 1 : 0;
    for (int k = 0; k < 2; ++k) {
      p.crop_scale[k] = static_cast<float>(augment->crop_scale[k]);
      p.crop_log_ratio[k] = static_cast<float>(std::log(augment->crop_ratio[k]));
    }
    p.brightness = static_cast<float>(augment->brightness);
    p.contrast = static_cast<float>(augment->contrast);
  }
  return p;
}

}  // namespace minidl
