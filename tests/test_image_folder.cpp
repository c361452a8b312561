// Image folders: folders of our own written here with libjpeg-turbo and libpng (good, corrupt,
// truncated, mixed sizes, grayscale, PNG with alpha): classes, labels, decoding, fitting, the
// cache (hit, invalidation, stale files), skip_bad, bad layouts; the CIFAR JPEG subset against
// the bytes prepare-cifar10.sh (PIL) wrote; CIFAR-100 binaries; the model/data class check.
#include <png.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "data/cifar10.h"
#include "data/datasets.h"
#include "data/holdout.h"
#include "data/image_decode.h"
#include "data/image_folder.h"
#include "data/loader.h"
#include "test_util.h"
#include "train/run.h"
#include "train/trainer.h"

using namespace minidl;
namespace fs = std::filesystem;

namespace {

// w x h pixels of `channels` (1 gray, 3 RGB), value (x * 7 + y * 13 + c * 50) mod 256.
std::vector<uint8_t> pattern(int w, int h, int channels) {
  std::vector<uint8_t> px(static_cast<size_t>(w * h * channels));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < channels; ++c) px[(y * w + x) * channels + c] = static_cast<uint8_t>((x * 7 + y * 13 + c * 50) % 256);
  return px;
}

std::vector<uint8_t> jpeg_bytes(const std::vector<uint8_t>& px, int w, int h, bool gray) {
  tjhandle t = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  REQUIRE(tjCompress2(t, px.data(), w, 0, h, gray ? TJPF_GRAY : TJPF_RGB, &buf, &size,
                      gray ? TJSAMP_GRAY : TJSAMP_420, 90, 0) == 0);
  std::vector<uint8_t> out(buf, buf + size);
  tjFree(buf);
  tjDestroy(t);
  return out;
}

void write_bytes(const fs::path& path, const std::vector<uint8_t>& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                               static_cast<std::streamsize>(bytes.size()));
}

// format: PNG_FORMAT_RGB, PNG_FORMAT_RGBA, PNG_FORMAT_GRAY.
void write_png(const fs::path& path, const std::vector<uint8_t>& px, int w, int h, png_uint_32 format) {
  fs::create_directories(path.parent_path());
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(w);
  image.height = static_cast<png_uint_32>(h);
  image.format = format;
  REQUIRE(png_image_write_to_file(&image, path.c_str(), 0, px.data(), 0, nullptr) != 0);
}

std::vector<uint8_t> image_of(const Dataset& d, int64_t i) {
  const int64_t n = d.images.numel() / d.size();
  const uint8_t* p = d.images.data<uint8_t>() + i * n;
  return std::vector<uint8_t>(p, p + n);
}

// Planes (CHW) of an HWC RGB buffer.
std::vector<uint8_t> planes(const std::vector<uint8_t>& hwc, int w, int h) {
  std::vector<uint8_t> out(hwc.size());
  for (int p = 0; p < w * h; ++p)
    for (int c = 0; c < 3; ++c) out[static_cast<size_t>(c * w * h + p)] = hwc[static_cast<size_t>(p * 3 + c)];
  return out;
}

DataOptions folder_options(const fs::path& root, int64_t size) {
  DataOptions o;
  o.format = DataFormat::ImageFolder;
  o.dir = root.string();
  o.image_size = size;
  return o;
}

// A small net on the 12 x 12 image folder at `root`, its head `classes` wide.
nlohmann::json tiny_folder_config(const fs::path& root, int64_t classes, double epochs) {
  return {{"device", "cpu"},
          {"batch_size", 4},
          {"epochs", epochs},
          {"data", {{"format", "image_folder"}, {"dir", root.string()}, {"image_size", 12}}},
          {"optimizer", {{"type", "SGD"}, {"lr", 0.1}}},
          {"model",
           {{"layers",
             {{{"type", "Conv2d"}, {"in_channels", 3}, {"out_channels", 4}, {"kernel_size", 3}, {"padding", 1}},
              {{"type", "GlobalAvgPool2d"}},
              {{"type", "Linear"}, {"in_features", 4}, {"out_features", classes}}}}}}};
}

// ROOT/train/{even,odd}/<i>.png for i < n, 6 pixels high and 6 + i wide (`wider`) or 6.
void write_odd_even(const fs::path& root, int n, bool wider) {
  for (int i = 0; i < n; ++i) {
    const int w = wider ? 6 + i : 6;
    write_png(root / "train" / (i % 2 ? "odd" : "even") / (std::to_string(i) + ".png"), pattern(w, 6, 3), w, 6,
              PNG_FORMAT_RGB);
  }
}

size_t cache_files(const fs::path& dir) {
  size_t n = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) n += 1;
  return n;
}

}  // namespace

TEST_CASE("image folder: sorted classes, labels, PNG, gray, alpha, JPEG as PIL decodes it", "[data][image_folder]") {
  test::TempDir tmp("imgfolder");
  const fs::path root = tmp.path;
  const std::vector<uint8_t> rgb = pattern(8, 8, 3), gray = pattern(8, 8, 1);
  std::vector<uint8_t> rgba(8 * 8 * 4);
  for (int p = 0; p < 64; ++p) {
    for (int c = 0; c < 3; ++c) rgba[p * 4 + c] = rgb[p * 3 + c];
    rgba[p * 4 + 3] = static_cast<uint8_t>(p % 2 ? 0 : 255);  // alpha 0 keeps its RGB
  }
  // Class folders "zebra" and "ant": sorted, "ant" is 0. Hidden folders and other files are not data.
  write_png(root / "train/zebra/b.png", rgb, 8, 8, PNG_FORMAT_RGB);
  write_png(root / "train/zebra/a_alpha.png", rgba, 8, 8, PNG_FORMAT_RGBA);
  write_png(root / "train/ant/gray.png", gray, 8, 8, PNG_FORMAT_GRAY);
  const std::vector<uint8_t> jpeg = jpeg_bytes(rgb, 8, 8, false);
  write_bytes(root / "train/ant/sub/photo.JPG", jpeg);
  write_bytes(root / "train/ant/notes.txt", {'h', 'i'});
  write_png(root / "train/.hidden/x.png", rgb, 8, 8, PNG_FORMAT_RGB);
  write_png(root / "test/zebra/t.png", rgb, 8, 8, PNG_FORMAT_RGB);

  const DataOptions o = folder_options(root, 8);
  ImageFolderStats st;
  const Dataset train = load_image_folder(o, Split::Train, &st, true);
  REQUIRE(train.classes == std::vector<std::string>{"ant", "zebra"});
  REQUIRE(train.images.shape() == Shape({4, 3, 8, 8}));
  // Class-sorted, then path-sorted: ant/gray.png, ant/sub/photo.JPG, zebra/a_alpha.png, zebra/b.png.
  REQUIRE(train.labels.values<int32_t>() == std::vector<int32_t>{0, 0, 1, 1});
  REQUIRE(st.ignored == 1);
  REQUIRE(!st.from_cache);
  const std::vector<uint8_t> want_rgb = planes(rgb, 8, 8);
  std::vector<uint8_t> want_gray;
  for (int c = 0; c < 3; ++c) want_gray.insert(want_gray.end(), gray.begin(), gray.end());
  REQUIRE(image_of(train, 0) == want_gray);
  // The JPEG holds exactly what TurboJPEG's default decode gives (the decoder PIL uses).
  tjhandle t = tjInitDecompress();
  std::vector<uint8_t> decoded(8 * 8 * 3);
  REQUIRE(tjDecompress2(t, jpeg.data(), static_cast<unsigned long>(jpeg.size()), decoded.data(), 8, 0, 8, TJPF_RGB, 0) == 0);
  tjDestroy(t);
  REQUIRE(image_of(train, 1) == planes(decoded, 8, 8));
  REQUIRE(image_of(train, 2) == want_rgb);  // alpha dropped, RGB as stored
  REQUIRE(image_of(train, 3) == want_rgb);
  REQUIRE(train.note.find("ignored 1 files") != std::string::npos);

  const Dataset test = load_image_folder(o, Split::Test, nullptr, true);
  REQUIRE(test.labels.values<int32_t>() == std::vector<int32_t>{1});  // zebra keeps the training index
  REQUIRE(test.classes == train.classes);

  // A test class the training set does not have is an error naming it.
  write_png(root / "test/whale/w.png", rgb, 8, 8, PNG_FORMAT_RGB);
  REQUIRE_THROWS_WITH(load_image_folder(o, Split::Test), Catch::Contains("'whale'"));
}

TEST_CASE("image folder: the cache is read back, and a changed folder is decoded again", "[data][image_folder]") {
  test::TempDir tmp("imgcache");
  const fs::path root = tmp.path / "data";
  write_odd_even(root, 5, true);
  write_png(root / "test/odd/t.png", pattern(6, 6, 3), 6, 6, PNG_FORMAT_RGB);
  DataOptions o = folder_options(root, 6);
  o.cache_dir = (tmp.path / "cache").string();
  ImageFolderStats first, second, third;
  const Dataset a = load_image_folder(o, Split::Train, &first);
  const Dataset b = load_image_folder(o, Split::Train, &second);
  REQUIRE(!first.from_cache);
  REQUIRE(second.from_cache);
  REQUIRE(second.cache_path == first.cache_path);
  REQUIRE(b.images.values<uint8_t>() == a.images.values<uint8_t>());
  REQUIRE(b.labels.values<int32_t>() == a.labels.values<int32_t>());
  REQUIRE(b.classes == a.classes);
  REQUIRE(b.note.find("read from the cache") != std::string::npos);
  REQUIRE(cache_files(o.cache_dir) == 1);

  // Rewrite one file with other pixels (another size, so the key changes whatever the clock).
  write_png(root / "train/even/0.png", pattern(7, 6, 3), 7, 6, PNG_FORMAT_RGB);
  const Dataset c = load_image_folder(o, Split::Train, &third);
  REQUIRE(!third.from_cache);
  REQUIRE(c.images.values<uint8_t>() != a.images.values<uint8_t>());
  REQUIRE(cache_files(o.cache_dir) == 1);  // the stale cache was replaced, no temp file left

  // The default order is a fixed shuffle of the class-sorted one; train_limit keeps its first images.
  const Dataset sorted = load_image_folder(o, Split::Train, nullptr, true);
  const std::vector<int32_t> order = epoch_permutation(0x1f01de5, 0, 5);
  for (int64_t k = 0; k < 5; ++k) {
    REQUIRE(image_of(c, k) == image_of(sorted, order[static_cast<size_t>(k)]));
    REQUIRE(c.labels.data<int32_t>()[k] == sorted.labels.data<int32_t>()[order[static_cast<size_t>(k)]]);
  }
  DataOptions limited = o;
  limited.train_limit = 3;
  const Dataset first3 = load_image_folder(limited, Split::Train);
  REQUIRE(first3.size() == 3);
  for (int64_t k = 0; k < 3; ++k) REQUIRE(image_of(first3, k) == image_of(c, k));

  // Another image size is another cache beside it; the default cache folder is ROOT/.minidl-cache.
  DataOptions d = folder_options(root, 4);
  load_image_folder(d, Split::Train);
  REQUIRE(cache_files(root / ".minidl-cache") == 1);
  REQUIRE(cache_files(o.cache_dir) == 1);

  // A corrupt cache file is not trusted: the folder is decoded again.
  ImageFolderStats fourth;
  for (const auto& e : fs::directory_iterator(o.cache_dir)) fs::resize_file(e.path(), fs::file_size(e.path()) - 1);
  const Dataset e = load_image_folder(o, Split::Train, &fourth);
  REQUIRE(!fourth.from_cache);
  REQUIRE(e.images.values<uint8_t>() == c.images.values<uint8_t>());
}

TEST_CASE("image folder: a file that does not decode is an error naming it, or skipped with skip_bad", "[data][image_folder]") {
  test::TempDir tmp("imgbad");
  const fs::path root = tmp.path;
  const std::vector<uint8_t> good = jpeg_bytes(pattern(16, 16, 3), 16, 16, false);
  write_bytes(root / "train/a/good.jpg", good);
  write_bytes(root / "train/a/truncated.jpg", std::vector<uint8_t>(good.begin(), good.begin() + good.size() / 2));
  write_bytes(root / "train/b/text.jpg", {'n', 'o', 't', ' ', 'a', 'n', ' ', 'i', 'm', 'a', 'g', 'e'});
  write_bytes(root / "train/b/empty.png", {});
  write_png(root / "train/b/ok.png", pattern(16, 16, 3), 16, 16, PNG_FORMAT_RGB);
  write_bytes(root / "test/a/good.jpg", good);
  DataOptions o = folder_options(root, 16);
  REQUIRE_THROWS_WITH(load_image_folder(o, Split::Train),
                      Catch::Contains("skip_bad") && (Catch::Contains("truncated.jpg") || Catch::Contains("text.jpg") ||
                                                      Catch::Contains("empty.png")));
  try {
    load_image_folder(o, Split::Train);
  } catch (const Error& e) {
    INFO(e.what());
    // Named by path, with the reason.
    const std::string m = e.what();
    REQUIRE((m.find("does not decode") != std::string::npos || m.find("neither JPEG nor PNG") != std::string::npos ||
             m.find("not a readable JPEG") != std::string::npos));
  }
  o.skip_bad = true;
  ImageFolderStats st;
  const Dataset d = load_image_folder(o, Split::Train, &st, true);
  INFO(d.note);
  REQUIRE(d.size() == 2);
  REQUIRE(st.skipped == 3);
  REQUIRE(d.note.find("skipped 3 files") != std::string::npos);
  REQUIRE(d.labels.values<int32_t>() == std::vector<int32_t>{0, 1});
  // The count survives the cache.
  ImageFolderStats again;
  const Dataset cached = load_image_folder(o, Split::Train, &again);
  REQUIRE(again.from_cache);
  REQUIRE(again.skipped == 3);

  // Truncated PNG, and a PNG whose data CRC is wrong.
  write_png(root / "png/train/a/p.png", pattern(16, 16, 3), 16, 16, PNG_FORMAT_RGB);
  std::ifstream in(root / "png/train/a/p.png", std::ios::binary);
  std::vector<uint8_t> png((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE_THROWS_WITH(decode_image(png.data(), png.size() - 20, "cut.png"), Catch::Contains("'cut.png'"));
  png[png.size() - 20] ^= 0x55;
  REQUIRE_THROWS_WITH(decode_image(png.data(), png.size(), "crc.png"), Catch::Contains("'crc.png'"));
}

TEST_CASE("image folder: mixed sizes are cropped, padded or stretched to S x S", "[data][image_folder]") {
  // A 16 x 8 image (wide), left half 200, right half 40, in every channel.
  RgbImage wide;
  wide.width = 16;
  wide.height = 8;
  wide.pixels.resize(16 * 8 * 3);
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 16; ++x)
      for (int c = 0; c < 3; ++c) wide.pixels[(y * 16 + x) * 3 + c] = x < 8 ? 200 : 40;
  std::vector<uint8_t> out(3 * 8 * 8);
  auto at = [&](int c, int y, int x) { return static_cast<int>(out[(c * 8 + y) * 8 + x]); };
  // crop: the centered 8 x 8 square (columns 4..11) at scale 1: an exact copy.
  fit_to_square(wide, 8, FitMode::Crop, out.data());
  for (int x = 0; x < 8; ++x) REQUIRE(at(1, 3, x) == (x < 4 ? 200 : 40));
  // pad: scaled to 8 x 4, rows 2..5, black above and below.
  fit_to_square(wide, 8, FitMode::Pad, out.data());
  for (int x = 0; x < 8; ++x) {
    REQUIRE(at(0, 0, x) == 0);
    REQUIRE(at(0, 1, x) == 0);
    REQUIRE(at(0, 6, x) == 0);
    REQUIRE(at(0, 7, x) == 0);
  }
  REQUIRE(at(0, 3, 0) == 200);
  REQUIRE(at(0, 3, 7) == 40);
  // stretch: 2x down horizontally; the two columns at the edge blend (antialiased).
  fit_to_square(wide, 8, FitMode::Stretch, out.data());
  REQUIRE(at(2, 4, 0) == 200);
  REQUIRE(at(2, 4, 7) == 40);
  REQUIRE(at(2, 4, 3) > 40);
  REQUIRE(at(2, 4, 3) < 200);
  REQUIRE(at(2, 4, 3) + at(2, 4, 4) == 240);  // symmetric blend around the edge
  // Alternating columns 0 / 255 halved: every interior output is their mean.
  RgbImage stripes;
  stripes.width = 16;
  stripes.height = 16;
  stripes.pixels.resize(16 * 16 * 3);
  for (size_t p = 0; p < 256; ++p)
    for (int c = 0; c < 3; ++c) stripes.pixels[p * 3 + c] = (p % 2) ? 255 : 0;
  fit_to_square(stripes, 8, FitMode::Stretch, out.data());
  for (int x = 1; x < 7; ++x) REQUIRE(std::abs(at(0, 4, x) - 128) <= 1);
  REQUIRE_THROWS_WITH(from_string<FitMode>("zoom", "data.resize"), Catch::Contains("data.resize"));
}

TEST_CASE("image folder: layouts and options that cannot work are one clear error", "[data][image_folder]") {
  test::TempDir tmp("imglayout");
  const fs::path root = tmp.path;
  REQUIRE_THROWS_WITH(load_image_folder(folder_options(root / "missing", 8), Split::Train),
                      Catch::Contains("is not a folder"));
  REQUIRE_THROWS_WITH(load_image_folder(folder_options(root, 8), Split::Train), Catch::Contains("no train/ folder"));
  fs::create_directories(root / "train/a");
  REQUIRE_THROWS_WITH(load_image_folder(folder_options(root, 8), Split::Train),
                      Catch::Contains("class 'a' has no .jpg"));
  write_png(root / "train/a/x.png", pattern(4, 4, 3), 4, 4, PNG_FORMAT_RGB);
  REQUIRE_THROWS_WITH(load_image_folder(folder_options(root, 8), Split::Test), Catch::Contains("no test/ (or val/)"));
  // val/ stands in for test/.
  write_png(root / "val/a/y.png", pattern(4, 4, 3), 4, 4, PNG_FORMAT_RGB);
  REQUIRE(load_image_folder(folder_options(root, 8), Split::Test).size() == 1);
  // Two roots: dir is the training root itself, test_dir the test root.
  DataOptions two = folder_options(root / "train", 4);
  two.test_dir = (root / "val").string();
  REQUIRE(load_image_folder(two, Split::Train).classes == std::vector<std::string>{"a"});
  REQUIRE(load_image_folder(two, Split::Test).size() == 1);

  // A link back to a folder on the walk's path would list its images again and again (and a link
  // to the split's root, other classes' images under this label): refused, naming the link.
  fs::create_directory_symlink(".", root / "train/a/again");
  REQUIRE_THROWS_WITH(load_image_folder(folder_options(root, 8), Split::Train),
                      Catch::Contains("'again' links back to a folder that contains it"));
  fs::remove(root / "train/a/again");
  fs::create_directory_symlink("..", root / "train/a/up");
  REQUIRE_THROWS_WITH(load_image_folder(folder_options(root, 8), Split::Train),
                      Catch::Contains("links back to a folder that contains it"));
  fs::remove(root / "train/a/up");
  // A link to a folder elsewhere is followed: its images belong to the class.
  write_png(root / "elsewhere/z.png", pattern(4, 4, 3), 4, 4, PNG_FORMAT_RGB);
  fs::create_directory_symlink(root / "elsewhere", root / "train/a/linked");
  REQUIRE(load_image_folder(folder_options(root, 8), Split::Train).size() == 2);
  // Class names are stored as text (classes.json, checkpoints): a folder name that is not UTF-8
  // is refused before anything is written, naming the folder with its bytes escaped.
  fs::create_directories(root / "train/caf\xe9");
  REQUIRE_THROWS_WITH(image_folder_classes(folder_options(root, 8)),
                      Catch::Contains("class folder 'caf\\xe9' has a name that is not UTF-8 text"));
  fs::remove_all(root / "train/caf\xe9");

  auto parse = [](const char* text) { return DataOptions::from_json(nlohmann::json::parse(text), "data"); };
  REQUIRE_THROWS_WITH(parse(R"({"format": "image_folder", "dir": "x"})"), Catch::Contains("data.image_size"));
  REQUIRE_THROWS_WITH(parse(R"({"format": "jpeg"})"), Catch::Contains("data.format"));
  REQUIRE_THROWS_WITH(parse(R"({"image_size": 32})"), Catch::Contains("only for \"format\": \"image_folder\""));
  REQUIRE_THROWS_WITH(parse(R"({"format": "image_folder", "image_size": 32, "resize": "zoom"})"),
                      Catch::Contains("data.resize"));
  REQUIRE_THROWS_WITH(parse(R"({"format": "cifar100", "label": "medium"})"), Catch::Contains("data.label"));
  const DataOptions full = parse(R"({"format": "image_folder", "dir": "d", "image_size": 64, "resize": "pad",
                                     "skip_bad": true, "cache_dir": "c", "test_dir": "t"})");
  REQUIRE(DataOptions::from_json(full.to_json(), "data").to_json() == full.to_json());
  // CIFAR-10's resolved config prints no format keys (its runs' config.json is unchanged).
  REQUIRE(!parse("{}").to_json().contains("format"));
}

TEST_CASE("the CIFAR-10 JPEG subset decodes to the bytes prepare-cifar10.sh (PIL) wrote", "[data][image_folder]") {
  MINIDL_REQUIRE_DATA();
  // scripts/data_jpeg.sh puts the subset beside the decoded binaries (or MINIDL_JPEG_DIR names it).
  const char* env = std::getenv("MINIDL_JPEG_DIR");
  const std::string jpeg_dir =
      env ? std::string(env) : (fs::path(test::data_dir()).parent_path() / "cifar10-jpeg-small").string();
  if (!fs::is_directory(fs::path(jpeg_dir) / "train") ||
      !fs::exists(fs::path(test::data_dir()) / "order.txt")) {
    WARN("SKIPPED: MINIDL_JPEG_DIR or order.txt missing (scripts/test.sh extracts the JPEG subset)");
    ++test::skipped_count();
    return;
  }
  // order.txt: "<split> <record> <class>/<file>" for every record of the binaries.
  std::map<std::string, int64_t> record;
  std::ifstream order(fs::path(test::data_dir()) / "order.txt");
  for (std::string split, name; order >> split;) {
    int64_t index = 0;
    order >> index >> name;
    record[split + "/" + name] = index;
  }
  DataOptions o = folder_options(jpeg_dir, 32);
  test::TempDir cache("jpegcache");
  o.cache_dir = cache.path.string();
  for (Split split : {Split::Train, Split::Test}) {
    const Dataset folder = load_image_folder(o, split, nullptr, true);
    const Dataset binary = load_cifar10(test::data_dir(), split);
    REQUIRE(folder.classes == binary.classes);
    // The folder's files in the order the loader took them (class, then name).
    std::vector<std::string> names;
    const fs::path root = fs::path(jpeg_dir) / (split == Split::Train ? "train" : "test");
    for (const std::string& c : folder.classes) {
      std::vector<std::string> files;
      for (const auto& e : fs::directory_iterator(root / c)) files.push_back(c + "/" + e.path().filename().string());
      std::sort(files.begin(), files.end());
      names.insert(names.end(), files.begin(), files.end());
    }
    REQUIRE(static_cast<int64_t>(names.size()) == folder.size());
    REQUIRE(folder.size() >= 100);
    int64_t equal = 0;
    for (int64_t i = 0; i < folder.size(); ++i) {
      const std::string key = (split == Split::Train ? "train/" : "test/") + names[static_cast<size_t>(i)];
      REQUIRE(record.count(key) == 1);
      const int64_t r = record[key];
      INFO(key << " -> record " << r);
      REQUIRE(binary.labels.data<int32_t>()[r] == folder.labels.data<int32_t>()[i]);
      REQUIRE(image_of(folder, i) == image_of(binary, r));
      ++equal;
    }
    REQUIRE(equal == folder.size());
  }
}

namespace {

// A CIFAR-100 file of `n` records: coarse label r % 20, fine label r % 100, pixels from r.
void write_cifar100(const fs::path& path, int n, int fine_offset = 0) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  for (int r = 0; r < n; ++r) {
    out.put(static_cast<char>(r % 20));
    out.put(static_cast<char>((r + fine_offset) % 100 + (fine_offset ? 100 : 0)));
    for (int k = 0; k < 3072; ++k) out.put(static_cast<char>((r * 3 + k) % 256));
  }
}

}  // namespace

TEST_CASE("CIFAR-100 binaries: fine and coarse labels, names, bad files", "[data][cifar100]") {
  test::TempDir tmp("cifar100");
  const fs::path dir = tmp.path / "cifar-100-binary";
  write_cifar100(dir / "train.bin", 250);
  write_cifar100(dir / "test.bin", 120);
  {
    std::ofstream names(dir / "coarse_label_names.txt");
    for (int i = 0; i < 20; ++i) names << "super" << i << "\n";
  }
  const Dataset fine = load_cifar100(tmp.path.string(), Split::Train, false);
  REQUIRE(fine.size() == 250);
  REQUIRE(fine.num_classes() == 100);
  REQUIRE(fine.classes[7] == "7");  // no fine_label_names.txt: numbered
  REQUIRE(fine.labels.data<int32_t>()[142] == 42);
  REQUIRE(fine.images.data<uint8_t>()[142 * 3072 + 5] == (142 * 3 + 5) % 256);
  const Dataset coarse = load_cifar100(tmp.path.string(), Split::Test, true);
  REQUIRE(coarse.size() == 120);
  REQUIRE(coarse.num_classes() == 20);
  REQUIRE(coarse.classes[3] == "super3");
  REQUIRE(coarse.labels.data<int32_t>()[45] == 5);
  DataOptions o;
  o.format = DataFormat::Cifar100;
  o.dir = dir.string();
  o.train_limit = 100;
  REQUIRE(load_dataset(o, Split::Train).size() == 100);

  write_cifar100(dir / "test.bin", 3, 1);  // fine labels 101..103
  REQUIRE_THROWS_WITH(load_cifar100(dir.string(), Split::Test, false),
                      Catch::Contains("test.bin' record 0 has label 101 (expected 0..99)"));
  std::ofstream(dir / "test.bin", std::ios::binary | std::ios::app).put('x');
  REQUIRE_THROWS_WITH(load_cifar100(dir.string(), Split::Test, false), Catch::Contains("3074-byte record"));
  REQUIRE_THROWS_WITH(load_cifar100((tmp.path / "none").string(), Split::Test, false),
                      Catch::Contains("cifar-100-binary"));
}

TEST_CASE("the model's output width must equal the data's class count", "[data][image_folder][training]") {
  test::TempDir tmp("imgclasses");
  for (const char* c : {"cat", "dog", "emu"})
    for (int i = 0; i < 4; ++i)
      write_png(tmp.path / "train" / c / (std::to_string(i) + ".png"), pattern(10 + i, 12, 3), 10 + i, 12,
                PNG_FORMAT_RGB);
  write_png(tmp.path / "test/dog/t.png", pattern(12, 12, 3), 12, 12, PNG_FORMAT_RGB);
  nlohmann::json j = tiny_folder_config(tmp.path, 10, 1);
  REQUIRE_THROWS_WITH(Trainer(parse_train_config(j), Device::cpu()),
                      Catch::Contains("3 classes") && Catch::Contains("out_features to 3"));
  // A model without its head gives a feature map: the message says so, with its shape.
  nlohmann::json headless = j;
  headless["model"]["layers"].erase(2);
  headless["model"]["layers"].erase(1);
  REQUIRE_THROWS_WITH(Trainer(parse_train_config(headless), Device::cpu()),
                      Catch::Contains("the model gives (1, 4, 12, 12) for one 3x12x12 image") &&
                          Catch::Contains("needs (N, classes) logits"));
  j["model"]["layers"][2]["out_features"] = 3;
  Trainer trainer(parse_train_config(j), Device::cpu());
  REQUIRE(trainer.classes() == std::vector<std::string>{"cat", "dog", "emu"});
  REQUIRE(trainer.train_loader().dataset_size() == 12);
  const std::vector<int64_t> confusion = trainer.evaluate(TtaMode::Flip).confusion;
  REQUIRE(confusion.size() == 9);
  int64_t dog_row = 0;
  for (int k = 0; k < 3; ++k) dog_row += confusion[3 + k];
  REQUIRE(dog_row == 1);  // the one test image is a dog
}

TEST_CASE("resume: training data that changed since the checkpoint is refused", "[image_folder][training][resume]") {
  test::TempDir tmp("resume_data");
  for (const char* c : {"cat", "dog"})
    for (int i = 0; i < 8; ++i)
      write_png(tmp.path / "train" / c / (std::to_string(i) + ".png"), pattern(12, 12, 3), 12, 12, PNG_FORMAT_RGB);
  write_png(tmp.path / "test/dog/t.png", pattern(12, 12, 3), 12, 12, PNG_FORMAT_RGB);
  nlohmann::json j = tiny_folder_config(tmp.path, 2, 2);
  j["output"] = {{"dir", (tmp.path / "run").string()}, {"progress", false}};
  std::ofstream(tmp.file("config.json")) << j.dump();
  RunOptions fresh;
  fresh.config_path = tmp.file("config.json");
  fresh.max_steps = 2;
  REQUIRE(Run(fresh).execute().exit_code == 0);
  RunOptions resume;
  resume.resume_dir = (tmp.path / "run").string();
  // 8 images added to a class: the checkpoint's position is still a step of the (longer) epoch.
  for (int i = 8; i < 16; ++i)
    write_png(tmp.path / "train/cat" / (std::to_string(i) + ".png"), pattern(12, 12, 3), 12, 12, PNG_FORMAT_RGB);
  REQUIRE_THROWS_WITH(Run(resume), Catch::Contains("the training data changed since the checkpoint was written") &&
                                       Catch::Contains("of the 24 training images now"));
  for (int i = 8; i < 16; ++i) fs::remove(tmp.path / "train/cat" / (std::to_string(i) + ".png"));
  REQUIRE(Run(resume).execute().exit_code == 0);
}

namespace {

// The only file in `dir`.
fs::path only_file(const fs::path& dir) {
  REQUIRE(cache_files(dir) == 1);
  return fs::directory_iterator(dir)->path();
}

// The image cache's layout: magic (8 bytes), then 7 int64: key, n, c, h, w, metadata bytes, the
// CRC-32 of the labels and pixels; the metadata; the labels (int32); the pixels.
struct CacheBytes {
  std::string bytes;
  int64_t n = 0, labels_at = 0, pixels_at = 0;
  explicit CacheBytes(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
    int64_t head[7];
    std::memcpy(head, bytes.data() + 8, sizeof head);
    n = head[1];
    labels_at = 8 + 56 + head[5];
    pixels_at = labels_at + 4 * n;
  }
  void set_label(int64_t i, int32_t v) { std::memcpy(&bytes[static_cast<size_t>(labels_at + 4 * i)], &v, 4); }
  // The CRC-32 recomputed, as a hand-made cache would carry it.
  void fix_crc() {
    const int64_t crc = static_cast<int64_t>(crc32_z(0L, reinterpret_cast<const Bytef*>(bytes.data() + labels_at),
                                                     bytes.size() - static_cast<size_t>(labels_at)));
    std::memcpy(&bytes[8 + 48], &crc, 8);
  }
  void write(const fs::path& path) const { std::ofstream(path, std::ios::binary) << bytes; }
};

}  // namespace

TEST_CASE("image folder: a damaged cache is decoded again, and says so", "[data][image_folder][hostile]") {
  test::TempDir tmp("imgcache_damaged");
  const fs::path root = tmp.path / "data";
  write_odd_even(root, 6, true);
  DataOptions o = folder_options(root, 6);
  o.cache_dir = (tmp.path / "cache").string();
  const Dataset good = load_image_folder(o, Split::Train);
  const fs::path cache = only_file(o.cache_dir);
  const auto reload = [&] {
    ImageFolderStats st;
    const Dataset d = load_image_folder(o, Split::Train, &st);
    REQUIRE_FALSE(st.from_cache);
    REQUIRE(d.labels.values<int32_t>() == good.labels.values<int32_t>());
    REQUIRE(d.images.values<uint8_t>() == good.images.values<uint8_t>());
    return d.note;
  };
  // Every label zeroed, then every pixel inverted: a cache of the right size and key.
  CacheBytes zeroed(cache);
  for (int64_t i = 0; i < zeroed.n; ++i) zeroed.set_label(i, 0);
  zeroed.write(cache);
  REQUIRE_THAT(reload(), Catch::StartsWith("the image cache " + cache.string() +
                                           " was damaged (its labels' and "
                                           "pixels' CRC-32 is "));
  CacheBytes inverted(cache);
  for (size_t i = static_cast<size_t>(inverted.pixels_at); i < inverted.bytes.size(); ++i)
    inverted.bytes[i] = static_cast<char>(~inverted.bytes[i]);
  inverted.write(cache);
  REQUIRE_THAT(reload(), Catch::Contains("was damaged (its labels' and pixels' CRC-32 is "));
  // A label no class has, with a CRC-32 that matches it.
  CacheBytes negative(cache);
  negative.set_label(2, -7);
  negative.fix_crc();
  negative.write(cache);
  REQUIRE_THAT(reload(), Catch::Contains("was damaged (image 2 has label -7, not one of the 2 classes)"));
  ImageFolderStats st;
  load_image_folder(o, Split::Train, &st);
  REQUIRE(st.from_cache);

  // A FIFO where the cache belongs is named, not opened (which would wait for a writer forever).
  fs::remove(cache);
  REQUIRE(::mkfifo(cache.c_str(), 0600) == 0);
  REQUIRE_THAT(test::error_in_child([&] { load_image_folder(o, Split::Train); }),
               Catch::Contains("image cache '" + cache.string() + "' is not a regular file (a FIFO"));
}

TEST_CASE("image folder: a file that cannot be read is skipped for this run only, never cached as bad",
          "[data][image_folder]") {
  test::TempDir tmp("imgcache_unreadable");
  const fs::path root = tmp.path / "data";
  write_odd_even(root, 4, false);
  DataOptions o = folder_options(root, 6);
  o.cache_dir = (tmp.path / "cache").string();
  o.skip_bad = true;
  fs::create_directories(o.cache_dir);
  fs::permissions(o.cache_dir, fs::perms::all);
  const fs::path locked = root / "train/odd/1.png";
  fs::permissions(locked, fs::perms::none);
  // Permissions bind root only through another effective user (restored after).
  const bool root_user = ::geteuid() == 0;
  if (root_user) REQUIRE(::seteuid(65534) == 0);
  ImageFolderStats first;
  Dataset d;
  try {
    d = load_image_folder(o, Split::Train, &first);
  } catch (...) {
    if (root_user) REQUIRE(::seteuid(0) == 0);
    throw;
  }
  if (root_user) REQUIRE(::seteuid(0) == 0);
  REQUIRE(first.skipped == 1);
  REQUIRE(d.size() == 3);
  REQUIRE(first.cache_path.empty());
  REQUIRE_THAT(d.note, Catch::StartsWith("image cache not written: 1 files could not be read, e.g. '" +
                                         locked.string() + "': cannot open (Permission denied)"));
  fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_write);
  ImageFolderStats second;
  REQUIRE(load_image_folder(o, Split::Train, &second).size() == 4);
  REQUIRE(second.skipped == 0);
  REQUIRE_FALSE(second.from_cache);
}

namespace {

std::vector<uint8_t> from_hex(const std::string& hex) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

}  // namespace

TEST_CASE("image decode: CMYK and YCCK JPEGs decode as Pillow's convert(\"RGB\")", "[data][image_folder]") {
  // A 4x4 CMYK JPEG that Pillow 9.4 wrote, and the bytes its Image.open(f).convert("RGB") gives.
  const std::vector<uint8_t> cmyk_jpeg = from_hex(
      "ffd8ffee000e41646f626500640000000000ffdb0043000302020302020303030304030304050805050404050a070706080c"
      "0a0c0c0b0a0b0b0d0e12100d0e110e0b0b1016101113141515150c0f171816141812141514ffc00014080004000404431100"
      "4d11005911004b1100ffc400160001010100000000000000000000000000080407ffc4002210000202020202020300000000"
      "00000000010203040506071112210031084251ffda000e0443004d0059004b00003f002c72cee1676ae45cbd9c857490c095"
      "2b578c59b3e30429521091af7293d283f649627b662cc4b14b414e3d5ede49ec193619f276e4bed365e57635c31f05821119"
      "4548516350a9d7af7ecfcda786bf11751dcab6c976de5b394275bf595d70d2d7c7432336328cad2186bc291076691892aa3b"
      "fb3efb265d1790aef1e6a34ce1e862e2197b37edd846a6be08d0dfb346258d57a0a8b053814281fa9fefcfffd9");
  const RgbImage cmyk = decode_image(cmyk_jpeg.data(), cmyk_jpeg.size(), "cmyk.jpg");
  REQUIRE(cmyk.width == 4);
  REQUIRE(cmyk.pixels == from_hex("0507036e790407080122785d26a8936e3171020a0713963784690411050e21291b3aa14a275c42060b0d"
                                  "07b644104662"));

  // YCCK (what libjpeg writes from CMYK pixels): libjpeg turns it back into the stored CMYK, then
  // Pillow's rule: the values inverted (Adobe's convention), R = (255 - K) - C (255 - K) / 255.
  std::vector<uint8_t> ink(16 * 16 * 4);
  for (size_t i = 0; i < ink.size(); ++i) ink[i] = static_cast<uint8_t>((i * 37 + i / 64 * 11) % 256);
  tjhandle t = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  REQUIRE(tjCompress2(t, ink.data(), 16, 0, 16, TJPF_CMYK, &buf, &size, TJSAMP_444, 95, 0) == 0);
  const std::vector<uint8_t> ycck_jpeg(buf, buf + size);
  tjFree(buf);
  tjDestroy(t);
  tjhandle d = tjInitDecompress();
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  REQUIRE(tjDecompressHeader3(d, ycck_jpeg.data(), size, &w, &h, &subsamp, &colorspace) == 0);
  REQUIRE(colorspace == TJCS_YCCK);
  std::vector<uint8_t> stored(16 * 16 * 4);
  REQUIRE(tjDecompress2(d, ycck_jpeg.data(), size, stored.data(), 16, 0, 16, TJPF_CMYK, 0) == 0);
  tjDestroy(d);
  std::vector<uint8_t> want;
  for (size_t p = 0; p < 16 * 16; ++p) {
    const int k = 255 - stored[p * 4 + 3], nk = 255 - k;
    for (int c = 0; c < 3; ++c) {
      const int tmp = (255 - stored[p * 4 + static_cast<size_t>(c)]) * nk + 128;
      want.push_back(static_cast<uint8_t>(nk - (((tmp >> 8) + tmp) >> 8)));
    }
  }
  REQUIRE(decode_image(ycck_jpeg.data(), ycck_jpeg.size(), "ycck.jpg").pixels == want);
}

TEST_CASE("image folder: a set larger than memory at its image_size is refused, naming both", "[data][image_folder]") {
  // Enough 1x1 images that 3 x 4096 x 4096 bytes each exceed the memory available now.
  const uint64_t available = available_host_bytes();
  const uint64_t per_image = 3ull * 4096 * 4096;
  const uint64_t n = available / per_image + 2;
  if (available == 0 || n > 3000) {
    WARN("SKIPPED: this machine's available memory (" << available << " bytes) needs too many files");
    return;
  }
  test::TempDir tmp("imgfolder_huge");
  for (uint64_t i = 0; i < n; ++i)
    write_png(tmp.path / "train" / (i % 2 ? "a" : "b") / (std::to_string(i) + ".png"), pattern(1, 1, 3), 1, 1,
              PNG_FORMAT_RGB);
  DataOptions o = folder_options(tmp.path, 4096);
  o.cache_dir = (tmp.path / "cache").string();
  REQUIRE_THAT(test::error_of([&] { load_image_folder(o, Split::Train); }),
               Catch::StartsWith("image folder '" + (tmp.path / "train").string() + "': its " + std::to_string(n) +
                                 " images at data.image_size 4096 take ") &&
                   Catch::Contains("lower data.image_size"));
}

TEST_CASE("an image folder's val/ beside train/ and test/ is the validation split and mean/std default to its own",
          "[data][image_folder][training][validation]") {
  test::TempDir tmp("imgval");
  for (const char* c : {"cat", "dog"})
    for (int i = 0; i < 4; ++i)
      write_png(tmp.path / "train" / c / (std::to_string(i) + ".png"), pattern(12, 12, 3), 12, 12, PNG_FORMAT_RGB);
  write_png(tmp.path / "test/dog/t.png", pattern(12, 12, 3), 12, 12, PNG_FORMAT_RGB);
  nlohmann::json j = tiny_folder_config(tmp.path, 2, 1);
  REQUIRE_FALSE(Trainer(parse_train_config(j), Device::cpu()).has_validation());
  write_png(tmp.path / "val/cat/v.png", pattern(12, 12, 3), 12, 12, PNG_FORMAT_RGB);
  write_png(tmp.path / "val/dog/v.png", pattern(12, 12, 3), 12, 12, PNG_FORMAT_RGB);
  Trainer trainer(parse_train_config(j), Device::cpu());
  REQUIRE(trainer.has_validation());
  REQUIRE(trainer.val_size() == 2);
  REQUIRE(trainer.test_size() == 1);
  REQUIRE(trainer.evaluate(TtaMode::None, Split::Val).images == 2);
  // The normalization is the training images' own, recorded as numbers.
  const nlohmann::json data = trainer.resolved_config()["data"];
  REQUIRE(data["mean"].is_array());
  REQUIRE(data["std"].is_array());
  const ChannelStats st =
      channel_stats(load_image_folder(DataOptions::from_json(j["data"], "data"), Split::Train).images);
  REQUIRE(data["mean"][0].get<double>() == st.mean[0]);
  bool noted = false;
  for (const std::string& note : trainer.data_notes())
    noted |= note.find("data.mean/std \"auto\"") != std::string::npos;
  REQUIRE(noted);
  j["data"]["val_fraction"] = 0.5;
  REQUIRE_THROWS_WITH(Trainer(parse_train_config(j), Device::cpu()),
                      Catch::Contains("data.val_fraction: the image folder") && Catch::Contains("has a val/ split"));
}
