#include "data/options.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/field_kinds.h"
#include "core/json_args.h"
#include "core/json_limits.h"

namespace minidl {

namespace {

constexpr const char* kSyntheticVolumes =
    "a synthetic volume set is made from data.volume_seed, neither read from files nor normalized nor augmented";

// A list of `n` numbers into the std::array `at(value)` refers to: "mean": [0.49, 0.48, 0.45].
template <typename T, size_t n, typename At>
Field<T> numbers(const std::string& name, At at, std::array<double, n> fallback, const char* what, std::string doc) {
  Field<T> f = custom_field<T>(name, "floats", fallback, "", std::move(doc));
  f.read = [at, fallback, what](JsonArgs& a, const std::string& key, T& out) {
    std::array<double, n>& v = at(out);
    v = fallback;
    if (!a.has(key)) return;
    const nlohmann::json& j = a.get_json(key);
    MINIDL_CHECK(j.is_array() && j.size() == n, a.key_path(key), ": expected a list of ", n, " numbers ", what,
                 ", got ", json_excerpt(j));
    for (size_t c = 0; c < n; ++c) {
      MINIDL_CHECK(j[c].is_number(), a.key_path(key), "[", c, "]: expected a number, got ", json_excerpt(j[c]));
      v[c] = j[c].get<double>();
    }
  };
  f.write = [at](const T& in) { return std::optional<nlohmann::json>(at(in)); };
  return f;
}

// "random_resized_crop": {"scale": [min, max], "ratio": [min, max]}, given or not.
Field<AugmentOptions> resized_crop_field() {
  using A = AugmentOptions;
  Field<A> f = custom_field<A>("random_resized_crop", "object", nullptr, "",
                               "torchvision's RandomResizedCrop to the images' own size instead of the padded crop "
                               "(for larger images); left out: off");
  f.required = false;
  f.children = {custom_field<A>("scale", "floats", nlohmann::json::array({0.08, 1.0}), "0 < min <= max <= 1",
                                "the crop's area as a fraction of the image's [min, max]"),
                custom_field<A>("ratio", "floats", nlohmann::json::array({3.0 / 4.0, 4.0 / 3.0}),
                                "0.001 <= min <= max <= 1000", "the crop's aspect ratio [min, max]")};
  f.read = [](JsonArgs& a, const std::string& key, A& o) {
    const A d;
    o.resized_crop = a.has(key);
    o.crop_scale = d.crop_scale;
    o.crop_ratio = d.crop_ratio;
    if (!o.resized_crop) return;
    const std::string path = a.key_path(key);
    const nlohmann::json& r = a.get_json(key);
    MINIDL_CHECK(r.is_object(), path,
                 ": expected an object like {\"scale\": [0.08, 1], \"ratio\": [0.75, 1.3333]}, got ", json_excerpt(r));
    struct Pairs {
      std::array<double, 2> scale, ratio;
      static const Fields<Pairs>& fields() {
        static const Fields<Pairs> f{
            {numbers<Pairs, 2>(
                 "scale", [](auto& p) -> auto& { return p.scale; }, {0.08, 1.0}, "[min, max]", "the crop's area"),
             numbers<Pairs, 2>(
                 "ratio", [](auto& p) -> auto& { return p.ratio; }, {3.0 / 4.0, 4.0 / 3.0}, "[min, max]",
                 "the crop's aspect ratio")}};
        return f;
      }
    };
    JsonArgs args(r, path);
    const Pairs p = read_struct(Pairs::fields(), args);
    o.crop_scale = p.scale;
    o.crop_ratio = p.ratio;
  };
  f.write = [](const A& o) {
    return o.resized_crop ? std::optional<nlohmann::json>({{"scale", o.crop_scale}, {"ratio", o.crop_ratio}})
                          : std::nullopt;
  };
  return f;
}

// A key of one format only: refused for another (it would be silently ignored) and written back
// only for its own.
Field<DataOptions> only_for(DataFormat format, Field<DataOptions> f) {
  f.doc += str(" (", to_string(format), " only)");
  auto read = f.read;
  auto write = f.write;
  f.read = [format, read](JsonArgs& a, const std::string& key, DataOptions& o) {
    MINIDL_CHECK(!a.has(key) || o.format == format, a.key_path(key), ": only for \"format\": \"", to_string(format),
                 "\" (this is \"", to_string(o.format), "\")");
    read(a, key, o);
  };
  f.write = [format, write](const DataOptions& o) {
    return o.format == format ? write(o) : std::optional<nlohmann::json>();
  };
  return f;
}

// A key refused for `format` (it would be silently ignored there, for `why`) and not written
// back for it.
Field<DataOptions> not_for(DataFormat format, const char* why, Field<DataOptions> f) {
  auto read = f.read;
  auto write = f.write;
  f.read = [read, format, why](JsonArgs& a, const std::string& key, DataOptions& o) {
    MINIDL_CHECK(!a.has(key) || o.format != format, a.key_path(key), ": not for \"format\": \"", to_string(format),
                 "\" (", why, ")");
    read(a, key, o);
  };
  f.write = [write, format](const DataOptions& o) {
    return o.format == format ? std::optional<nlohmann::json>() : write(o);
  };
  return f;
}

// A key that means nothing for a token set or a volume set (normalization, augmentation).
Field<DataOptions> images_only(Field<DataOptions> f) {
  return not_for(DataFormat::Tokens, "a token set is neither normalized nor augmented",
                 not_for(DataFormat::Volumes, kSyntheticVolumes, std::move(f)));
}

// A key of the synthetic volume set (VolumeSetOptions, data/volumes.h) as a key of "data",
// volumes only.
Field<DataOptions> volume_field(const Field<VolumeSetOptions>& f) {
  Field<DataOptions> g;
  static_cast<FieldInfo&>(g) = f;
  g.read = [read = f.read](JsonArgs& a, const std::string& key, DataOptions& o) { read(a, key, o.volumes); };
  g.write = [write = f.write](const DataOptions& o) { return write(o.volumes); };
  return only_for(DataFormat::Volumes, std::move(g));
}

// data.mean or data.std: three numbers, or "auto" (`is_auto` true: the training images' own,
// computed when the run starts); left out, "auto" for an image folder (its pixels have no
// published statistics) and CIFAR's constants otherwise. Written back as given.
Field<DataOptions> stats_field(const char* name, std::array<double, 3> Normalization::*values,
                               bool Normalization::*is_auto, std::string doc) {
  using D = DataOptions;
  const Normalization n;
  Field<D> f = custom_field<D>(name, "floats", n.*values, "(R, G, B) or \"auto\"",
                               doc + "; \"auto\": the training images' own (the default for image folders)");
  Field<D> triple = numbers<D, 3>(
      name, [values](auto& d) -> auto& { return d.normalize.*values; }, n.*values, "(R, G, B)", "");
  f.read = [values, is_auto, triple](JsonArgs& a, const std::string& key, D& o) {
    o.normalize.*values = Normalization{}.*values;
    o.normalize.*is_auto = !a.has(key) && o.format == DataFormat::ImageFolder;
    if (!a.has(key)) return;
    const nlohmann::json& j = a.get_json(key);
    o.normalize.*is_auto = j == "auto";
    if (o.normalize.*is_auto) return;
    MINIDL_CHECK(!j.is_string(), a.key_path(key), ": expected \"auto\" or a list of 3 numbers (R, G, B), got ",
                 json_excerpt(j));
    triple.read(a, key, o);
  };
  f.write = [values, is_auto](const D& o) {
    return std::optional<nlohmann::json>(o.normalize.*is_auto ? nlohmann::json("auto")
                                                              : nlohmann::json(o.normalize.*values));
  };
  return f;
}

// data.val_fraction, in (0, 1) when given; written back only when set, with val_seed.
Field<DataOptions> val_fraction_field() {
  using D = DataOptions;
  Field<D> f = written_when_set(custom_field<D>(
      "val_fraction", "float", 0.0, "(0, 1)",
      "this fraction of the training images (after train_limit), stratified by class, is held out as the "
      "validation split; left out: none (an image folder's val/ may give one; a token set's is val.bin)"));
  f.read = [](JsonArgs& a, const std::string& key, D& o) {
    o.val_fraction = 0;
    if (!a.has(key)) return;
    o.val_fraction = a.get_float(key);
    MINIDL_CHECK(o.val_fraction > 0 && o.val_fraction < 1, a.key_path(key),
                 ": expected a fraction of the training images in (0, 1), e.g. 0.1 (leave the key out for no ",
                 "validation split), got ", o.val_fraction);
  };
  f.write = [](const D& o) { return nlohmann::json(o.val_fraction); };
  return f;
}

Field<DataOptions> val_seed_field() {
  using D = DataOptions;
  Field<D> f = count("val_seed", &D::val_seed, 0,
                     "which images val_fraction holds out; independent of the run's seed (with val_fraction only)");
  auto read = f.read;
  f.read = [read](JsonArgs& a, const std::string& key, D& o) {
    MINIDL_CHECK(!a.has(key) || o.val_fraction > 0, a.key_path(key),
                 ": only with data.val_fraction (it picks the held-out images)");
    read(a, key, o);
  };
  auto write = f.write;
  f.write = [write](const D& o) { return o.val_fraction > 0 ? write(o) : std::nullopt; };
  return f;
}

}  // namespace

const Fields<AugmentOptions>& AugmentOptions::fields() {
  using A = AugmentOptions;
  static const Fields<A> f{
      {integer("crop_padding", &A::crop_padding, 0, {0, 1023}, "RandomCrop's padding in pixels (0: no crop)"),
       choice("padding_mode", &A::padding_mode, PaddingMode::Reflect,
              "the padded border: the image mirrored (needs padding < H and W) or black"),
       flag("flip", &A::flip, false, "horizontal flips with p = 0.5"),
       choice("flip_mode", &A::flip_mode, FlipMode::Random,
              "a new draw each epoch, or each image flipped every other epoch (airbench)"),
       integer("cutout", &A::cutout, 0, {0, 4096}, "the side of a zeroed square at a random place (0: off)"),
       resized_crop_field(),
       // Written only when on, like random_resized_crop: a run without it keeps its config.json.
       written_when_set(number("color_jitter.brightness", &A::brightness, 0, {0, false, 100, false},
                               "the largest shift b added to the normalized values, b ~ U(-brightness, brightness)",
                               "in standard deviations")),
       written_when_set(number("color_jitter.contrast", &A::contrast, 0, {0, false, 1, true},
                               "the largest scale change, c ~ U(1 - contrast, 1 + contrast) multiplying x + b",
                               "contrast < 1: no image's sign flips"))},
      [](const A& o, const JsonArgs& args) { o.validate(args.path()); }};
  return f;
}

AugmentOptions AugmentOptions::from_json(const nlohmann::json& j, const std::string& path) {
  MINIDL_CHECK(j.is_object(), path, ": expected an object, got ", json_excerpt(j));
  JsonArgs args(j, path);
  return read_struct(fields(), args);
}

void AugmentOptions::validate(const std::string& path) const {
  MINIDL_CHECK(crop_padding >= 0 && crop_padding <= 1023, path, ".crop_padding: expected 0..1023 pixels, got ",
               crop_padding);
  MINIDL_CHECK(cutout >= 0 && cutout <= 4096, path, ".cutout: expected a square side of 0..4096 pixels, got ", cutout);
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
               ".random_resized_crop.scale: expected 0 < min <= max <= 1, got [", crop_scale[0], ", ", crop_scale[1],
               "]");
  MINIDL_CHECK(crop_ratio[0] >= 1.0 / 1000 && crop_ratio[0] <= crop_ratio[1] && crop_ratio[1] <= 1000, path,
               ".random_resized_crop.ratio: expected 0.001 <= min <= max <= 1000, got [", crop_ratio[0], ", ",
               crop_ratio[1], "]");
}

void AugmentOptions::validate_for_size(const std::string& path, int64_t height, int64_t width) const {
  validate(path);
  MINIDL_CHECK(padding_mode != PaddingMode::Reflect || resized_crop || (crop_padding < height && crop_padding < width),
               path, ".crop_padding: reflect padding of ", crop_padding,
               " pixels needs images larger than that; these are ", height, "x", width);
  MINIDL_CHECK(cutout <= height && cutout <= width, path, ".cutout: a square of ", cutout, " pixels does not fit the ",
               height, "x", width, " images");
}

const Fields<DataOptions>& DataOptions::fields() {
  using D = DataOptions;
  static const Fields<D> f{
      {written_when_set(choice("format", &D::format, DataFormat::Cifar10, "the data set's format (docs/data.md)")),
       not_for(DataFormat::Volumes, kSyntheticVolumes,
               text("dir", &D::dir, "", "a folder",
                    "the CIFAR batch files (or their folder), an image folder's root (dir/train/<class>/*), or the "
                    "folder of a token set's train.bin and val.bin (a volume set has none); \"\": $CIFAR10_DIR")),
       integer("train_limit", &D::train_limit, 0, {0},
               "train on the first train_limit images (a token set's windows, a volume set's volumes) only (0: all)"),
       written_when_set(integer("test_limit", &D::test_limit, 0, {0},
                                "evaluate on the first test_limit images (windows, volumes) only (0: all)")),
       val_fraction_field(),
       val_seed_field(),
       only_for(DataFormat::Cifar100, choice("label", &D::label, Cifar100Label::Fine,
                                             "the 100 classes (fine) or the 20 superclasses (coarse)")),
       only_for(DataFormat::ImageFolder,
                derived(
                    integer("image_size", &D::image_size, kRequired, {1, 4096}, "every image becomes S x S; required"),
                    &D::image_size, +[](const D&) -> int64_t { return 0; })),
       only_for(DataFormat::ImageFolder,
                choice("resize", &D::resize, FitMode::Crop,
                       "to S x S: the shorter side to S and a center crop, the longer side to S on black, or both "
                       "sides to S")),
       only_for(DataFormat::ImageFolder,
                text("test_dir", &D::test_dir, "", "a folder", "the test split's root; \"\": dir/test")),
       only_for(DataFormat::ImageFolder,
                text("cache_dir", &D::cache_dir, "", "a folder", "the decoded cache; \"\": <dir>/.minidl-cache")),
       only_for(DataFormat::ImageFolder,
                flag("skip_bad", &D::skip_bad, false, "skip (and count) files that do not decode instead of failing")),
       only_for(DataFormat::Tokens,
                derived(
                    integer("seq_len", &D::seq_len, kRequired, {1, 1 << 20},
                            "the tokens of a sample's input (the model's context; GPT-2: 1024); required"),
                    &D::seq_len, +[](const D&) -> int64_t { return 0; })),
       volume_field(
           integer("size", &VolumeSetOptions::size, 32, {8, 256}, "voxels per side of each volume (D = H = W)")),
       volume_field(integer("classes", &VolumeSetOptions::classes, 4, {2, 16},
                            "segmentation classes, background class 0 included")),
       volume_field(integer("objects", &VolumeSetOptions::objects, 3, {1, 64}, "fractal objects per volume")),
       volume_field(number("noise", &VolumeSetOptions::noise, 0.1, {0, false, 1, false},
                           "amplitude of the image's uniform noise")),
       volume_field(count("volume_seed", &VolumeSetOptions::seed, 0, "the classes' shapes and every volume's objects")),
       only_for(DataFormat::Volumes, integer("train_volumes", &D::train_volumes, 64, {1, 1 << 20},
                                             "the training set: volumes 0 .. train_volumes - 1")),
       only_for(DataFormat::Volumes, integer("test_volumes", &D::test_volumes, 16, {1, 1 << 20},
                                             "the test set: the test_volumes volumes after the training set's")),
       images_only(stats_field("mean", &Normalization::mean, &Normalization::auto_mean,
                               "per-channel mean subtracted, in [0, 1] units")),
       images_only(stats_field("std", &Normalization::std, &Normalization::auto_std,
                               "per-channel standard deviation divided by, each > 0")),
       images_only(
           section("augment", &D::augment, AugmentOptions::fields(), "the training augmentation; left out: none"))},
      [](const D& o, const JsonArgs& args) {
        MINIDL_CHECK(o.format != DataFormat::ImageFolder || o.image_size > 0, args.key_path("image_size"),
                     ": an image folder needs the size every image is resized to (e.g. 32, 64, 224)");
        MINIDL_CHECK(o.format != DataFormat::Tokens || o.seq_len > 0, args.key_path("seq_len"),
                     ": a token set needs the tokens of a sample's input (the model's context, e.g. 1024)");
        MINIDL_CHECK(o.format != DataFormat::Tokens || o.val_fraction == 0, args.key_path("val_fraction"),
                     ": a token set's validation split is its val.bin");
        MINIDL_CHECK(o.format != DataFormat::Volumes || o.val_fraction == 0, args.key_path("val_fraction"),
                     ": not for a volume set (hold out volumes by test_volumes)");
        if (o.format == DataFormat::Volumes) check_volume_options(o.volumes);
        for (size_t c = 0; c < 3 && !o.normalize.auto_std; ++c)
          MINIDL_CHECK(o.normalize.std[c] > 0, args.key_path("std"), "[", c, "]: expected > 0, got ",
                       o.normalize.std[c]);
      }};
  return f;
}

DataOptions DataOptions::from_json(const nlohmann::json& j, const std::string& path) {
  MINIDL_CHECK(j.is_object(), path, ": expected an object, got ", json_excerpt(j));
  JsonArgs args(j, path);
  return read_struct(fields(), args);
}

int64_t DataOptions::outputs_per_sample() const {
  switch (format) {
    case DataFormat::Tokens:
      return seq_len;
    case DataFormat::Volumes:
      return volumes.size * volumes.size * volumes.size;
    default:
      return 1;
  }
}

kernels::AugmentParams augment_params(const Normalization& normalize, const AugmentOptions* augment, uint64_t seed,
                                      int64_t epoch) {
  MINIDL_CHECK(epoch >= 0 && epoch < (int64_t{1} << 32), "data: epoch ", epoch, " out of range");
  kernels::AugmentParams p;
  p.seed = seed;
  p.epoch = epoch;
  MINIDL_CHECK(!normalize.auto_mean && !normalize.auto_std, "data.mean/std \"auto\": the statistics are computed ",
               "from the training images when a run starts (Trainer); give numbers to make batches without one");
  for (int c = 0; c < 3; ++c) {
    MINIDL_CHECK(normalize.std[c] > 0, "data.std[", c, "]: expected > 0, got ", normalize.std[c]);
    p.scale[c] = static_cast<float>(1.0 / (255.0 * normalize.std[c]));
    p.shift[c] = static_cast<float>(-normalize.mean[c] / normalize.std[c]);
  }
  if (augment) {
    augment->validate("data.augment");
    p.crop_padding = augment->crop_padding;
    p.reflect = augment->padding_mode == PaddingMode::Reflect ? 1 : 0;
    p.flip_mode = !augment->flip                                ? kernels::kFlipNone
                  : augment->flip_mode == FlipMode::Alternating ? kernels::kFlipAlternating
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
