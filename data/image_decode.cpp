#include "data/image_decode.h"

#include <fcntl.h>
#include <png.h>
#include <sys/stat.h>
#include <turbojpeg.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csetjmp>
#include <cstring>

#include "core/error.h"

namespace minidl {

namespace {

constexpr int64_t kMaxPixels = int64_t{1} << 28;

// One TurboJPEG decompressor per thread: images are decoded on every core at once. A handle that
// failed on a file is not reused: after an error its state can make the next good file read as
// 0x0 pixels, so the next call starts a new one.
struct JpegDecoder {
  tjhandle handle = tjInitDecompress();
  bool failed = false;
  void renew() {
    if (handle) tjDestroy(handle);
    handle = tjInitDecompress();
    failed = false;
  }
  ~JpegDecoder() {
    if (handle) tjDestroy(handle);
  }
};

// Pillow's image.convert("RGB") of a CMYK JPEG, byte for byte: Pillow reads the stored values
// inverted (Adobe's convention, which it assumes for every CMYK JPEG), then takes each channel as
// (255 - K) - C * (255 - K) / 255, rounded as its MULDIV255 rounds.
void cmyk_to_rgb(const uint8_t* stored, uint8_t* rgb, size_t pixels) {
  for (size_t p = 0; p < pixels; ++p, stored += 4, rgb += 3) {
    const int nk = stored[3];  // 255 - K, K = 255 - stored
    for (int c = 0; c < 3; ++c) {
      const int ink = 255 - stored[c];
      const int t = ink * nk + 128;
      rgb[c] = static_cast<uint8_t>(nk - (((t >> 8) + t) >> 8));
    }
  }
}

RgbImage decode_jpeg(const uint8_t* bytes, size_t size, const std::string& name) {
  thread_local JpegDecoder decoder;
  if (decoder.failed) decoder.renew();
  MINIDL_CHECK(decoder.handle, "'", name, "': cannot start the JPEG decoder: ", tjGetErrorStr2(nullptr));
  decoder.failed = true;  // until this file has decoded
  MINIDL_CHECK(size <= 0xffffffffu, "'", name, "': JPEG file too large");
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
  const auto n = static_cast<unsigned long>(size);
  if (tjDecompressHeader3(decoder.handle, bytes, n, &width, &height, &subsamp, &colorspace) != 0)
    fail(str("'", name, "': not a readable JPEG (", tjGetErrorStr2(decoder.handle), ")"));
  MINIDL_CHECK(width > 0 && height > 0 && static_cast<int64_t>(width) * height <= kMaxPixels, "'", name,
               "': JPEG of ", width, "x", height, " pixels (at most 2^28 are read)");
  RgbImage out;
  out.width = width;
  out.height = height;
  out.pixels.resize(static_cast<size_t>(width) * height * 3);
  // CMYK and YCCK files (print-oriented, some of ImageNet's) decode to CMYK, as Pillow reads them.
  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  std::vector<uint8_t> ink(cmyk ? static_cast<size_t>(width) * height * 4 : 0);
  // Flags 0: the accurate integer IDCT and fancy upsampling, libjpeg's defaults, which Pillow uses.
  if (tjDecompress2(decoder.handle, bytes, n, cmyk ? ink.data() : out.pixels.data(), width, 0, height,
                    cmyk ? TJPF_CMYK : TJPF_RGB, 0) != 0) {
    const std::string message = tjGetErrorStr2(decoder.handle);
    // A warning leaves a decoded image; the one that matters is data ending early (a truncated
    // file, which Pillow refuses too). Others (extra bytes before a marker) are what Pillow reads.
    const bool truncated = message.find("Premature end") != std::string::npos;
    if (tjGetErrorCode(decoder.handle) != TJERR_WARNING || truncated)
      fail(str("'", name, "': JPEG does not decode (", message, ")"));
  }
  if (cmyk) cmyk_to_rgb(ink.data(), out.pixels.data(), static_cast<size_t>(width) * height);
  decoder.failed = false;
  return out;
}

struct PngSource {
  const uint8_t* bytes;
  size_t size, offset;
  char message[256];
};

void png_read_bytes(png_structp png, png_bytep out, png_size_t n) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (n > src->size - src->offset) png_error(png, "file ends early (truncated)");
  std::memcpy(out, src->bytes + src->offset, n);
  src->offset += n;
}

void png_on_error(png_structp png, png_const_charp message) {
  auto* src = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(src->message, sizeof(src->message), "%s", message);
  png_longjmp(png, 1);
}

void png_on_warning(png_structp, png_const_charp) {}

// The libpng calls, C style: an error longjmps back to the setjmp in each function, so they hold
// nothing that needs a destructor. Returns false with src->message set on an error.
struct PngShape {
  png_uint_32 width, height;
  int channels;
};

bool png_read_header(png_structp png, png_infop info, PngShape* shape) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_info(png, info);
  const int color = png_get_color_type(png, info);
  const int depth = png_get_bit_depth(png, info);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16) png_set_strip_16(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  shape->width = png_get_image_width(png, info);
  shape->height = png_get_image_height(png, info);
  shape->channels = png_get_channels(png, info);
  return true;
}

bool png_read_rows(png_structp png, png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_image(png, rows);
  png_read_end(png, nullptr);
  return true;
}

RgbImage decode_png(const uint8_t* bytes, size_t size, const std::string& name) {
  PngSource src{bytes, size, 0, {0}};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_on_error, png_on_warning);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  MINIDL_CHECK(info, "'", name, "': cannot start the PNG decoder");
  png_set_read_fn(png, &src, png_read_bytes);
  // The channels libpng hands back after the transforms: gray, gray + alpha, RGB or RGBA.
  PngShape shape{0, 0, 0};
  std::vector<uint8_t> raw;
  std::vector<png_bytep> rows;
  bool ok = png_read_header(png, info, &shape);
  if (ok && (shape.width == 0 || shape.height == 0 ||
             static_cast<int64_t>(shape.width) * shape.height > kMaxPixels || shape.channels < 1 ||
             shape.channels > 4)) {
    std::snprintf(
        src.message, sizeof(src.message), "%ux%u pixels of %d channels%s", shape.width, shape.height, shape.channels,
        static_cast<int64_t>(shape.width) * shape.height > kMaxPixels ? ": at most 2^28 pixels are read" : "");
    ok = false;
  }
  if (ok) {
    const size_t stride = static_cast<size_t>(shape.width) * shape.channels;
    raw.resize(stride * shape.height);
    for (png_uint_32 y = 0; y < shape.height; ++y) rows.push_back(raw.data() + y * stride);
    ok = png_read_rows(png, rows.data());
  }
  png_destroy_read_struct(&png, &info, nullptr);
  MINIDL_CHECK(ok, "'", name, "': PNG does not decode (", src.message, ")");
  RgbImage out;
  out.width = static_cast<int>(shape.width);
  out.height = static_cast<int>(shape.height);
  const size_t pixels = static_cast<size_t>(shape.width) * shape.height;
  out.pixels.resize(pixels * 3);
  const int ch = shape.channels;
  for (size_t p = 0; p < pixels; ++p) {
    const uint8_t* s = raw.data() + p * ch;
    uint8_t* d = out.pixels.data() + p * 3;
    if (ch <= 2) {  // gray (and alpha): the gray value in all three
      d[0] = d[1] = d[2] = s[0];
    } else {  // RGB (and alpha, dropped)
      d[0] = s[0];
      d[1] = s[1];
      d[2] = s[2];
    }
  }
  return out;
}

// Triangle-filter taps of one output axis: output i reads source indices first[i] ..
// first[i] + count[i] - 1 with the weights at weights[i * taps ..].
struct AxisTaps {
  std::vector<int> first, count;
  std::vector<float> weights;
  int taps = 0;
};

// Output pixels 0 .. n_out - 1 cover the source interval [start, start + length) of an axis of
// n_src pixels. The filter is PIL's bilinear: tri(x) = max(0, 1 - |x|), widened by the downscale
// factor, its weights normalized to sum to 1.
AxisTaps axis_taps(int n_src, double start, double length, int n_out) {
  AxisTaps t;
  const double scale = length / n_out;
  const double support = std::max(scale, 1.0);
  t.taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.first.resize(n_out);
  t.count.resize(n_out);
  t.weights.assign(static_cast<size_t>(n_out) * t.taps, 0.f);
  for (int i = 0; i < n_out; ++i) {
    const double center = start + (i + 0.5) * scale;
    const int lo = std::max(0, static_cast<int>(std::floor(center - support + 0.5)));
    const int hi = std::min(n_src, static_cast<int>(std::floor(center + support + 0.5)));
    double total = 0;
    std::vector<double> w;
    for (int j = lo; j < hi && static_cast<int>(w.size()) < t.taps; ++j) {
      const double x = std::fabs((j - center + 0.5) / support);
      w.push_back(x < 1 ? 1 - x : 0);
      total += w.back();
    }
    if (total <= 0) {  // the interval falls between source pixels: nearest
      t.first[i] = std::clamp(static_cast<int>(center), 0, n_src - 1);
      t.count[i] = 1;
      t.weights[static_cast<size_t>(i) * t.taps] = 1.f;
      continue;
    }
    t.first[i] = lo;
    t.count[i] = static_cast<int>(w.size());
    for (size_t k = 0; k < w.size(); ++k) t.weights[i * t.taps + k] = static_cast<float>(w[k] / total);
  }
  return t;
}

// Resamples the source region to out_w x out_h and writes it at (ox, oy) of the S x S planes.
void resample(const RgbImage& im, double x0, double y0, double w, double h, int out_w, int out_h, int size, int ox,
              int oy, uint8_t* out) {
  const AxisTaps tx = axis_taps(im.width, x0, w, out_w);
  const AxisTaps ty = axis_taps(im.height, y0, h, out_h);
  // Horizontal pass over every source row the vertical pass reads.
  const int row_lo = ty.first.front();
  const int row_hi = ty.first.back() + ty.count.back();
  std::vector<float> rows(static_cast<size_t>(row_hi - row_lo) * out_w * 3);
  for (int y = row_lo; y < row_hi; ++y) {
    const uint8_t* src = im.pixels.data() + static_cast<size_t>(y) * im.width * 3;
    float* dst = rows.data() + static_cast<size_t>(y - row_lo) * out_w * 3;
    for (int x = 0; x < out_w; ++x) {
      float acc[3] = {0.f, 0.f, 0.f};
      const float* wt = tx.weights.data() + static_cast<size_t>(x) * tx.taps;
      for (int k = 0; k < tx.count[x]; ++k) {
        const uint8_t* p = src + (tx.first[x] + k) * 3;
        for (int c = 0; c < 3; ++c) acc[c] += wt[k] * static_cast<float>(p[c]);
      }
      for (int c = 0; c < 3; ++c) dst[x * 3 + c] = acc[c];
    }
  }
  const size_t plane = static_cast<size_t>(size) * size;
  for (int y = 0; y < out_h; ++y) {
    const float* wt = ty.weights.data() + static_cast<size_t>(y) * ty.taps;
    for (int x = 0; x < out_w; ++x)
      for (int c = 0; c < 3; ++c) {
        float acc = 0.f;
        for (int k = 0; k < ty.count[y]; ++k)
          acc += wt[k] * rows[(static_cast<size_t>(ty.first[y] + k - row_lo) * out_w + x) * 3 + c];
        const long v = std::lround(acc);
        out[c * plane + static_cast<size_t>(oy + y) * size + ox + x] = static_cast<uint8_t>(std::clamp(v, 0L, 255L));
      }
  }
}

}  // namespace

RgbImage decode_image(const uint8_t* bytes, size_t size, const std::string& name) {
  if (size >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) return decode_jpeg(bytes, size, name);
  static const uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (size >= 8 && std::memcmp(bytes, kPngSignature, 8) == 0) return decode_png(bytes, size, name);
  fail(str("'", name, "': neither JPEG nor PNG (", size == 0 ? "an empty file" : "unknown signature", ")"));
}

bool read_image_file(const std::string& path, std::vector<uint8_t>& bytes, std::string& error) {
  constexpr int64_t kMaxFileBytes = int64_t{1} << 30;
  error.clear();
  bytes.clear();
  // O_NONBLOCK: opening a FIFO returns at once, and fstat refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    error = str("'", path, "': cannot open (", std::strerror(errno), ")");
    return false;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    error = str("cannot read (", std::strerror(errno), ")");
  else if (S_ISDIR(st.st_mode))
    error = "a folder, not an image file";
  else if (!S_ISREG(st.st_mode))
    error = "not a regular file";
  else if (st.st_size > kMaxFileBytes)
    error = str(st.st_size, " bytes, larger than the ", kMaxFileBytes, "-byte limit");
  if (error.empty()) {
    bytes.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < bytes.size()) {
      const ssize_t r = ::read(fd, bytes.data() + got, bytes.size() - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        error = r < 0 ? str("cannot read (", std::strerror(errno), ")") : "cannot read (it shrank while read)";
        break;
      }
      got += static_cast<size_t>(r);
    }
  }
  ::close(fd);
  if (error.empty()) return true;
  error = str("'", path, "': ", error);
  return false;
}

RgbImage decode_image_file(const std::string& path) {
  std::vector<uint8_t> bytes;
  std::string error;
  MINIDL_CHECK(read_image_file(path, bytes, error), error);
  return decode_image(bytes.data(), bytes.size(), path);
}

void fit_to_square(const RgbImage& im, int size, FitMode mode, uint8_t* out) {
  const size_t plane = static_cast<size_t>(size) * size;
  if (im.width == size && im.height == size) {
    for (size_t p = 0; p < plane; ++p)
      for (int c = 0; c < 3; ++c) out[c * plane + p] = im.pixels[p * 3 + c];
    return;
  }
  const double w = im.width, h = im.height;
  if (mode == FitMode::Stretch) {
    resample(im, 0, 0, w, h, size, size, size, 0, 0, out);
  } else if (mode == FitMode::Crop) {
    const double side = std::min(w, h);
    resample(im, (w - side) / 2, (h - side) / 2, side, side, size, size, size, 0, 0, out);
  } else {
    const double scale = static_cast<double>(size) / std::max(w, h);
    const int out_w = std::clamp(static_cast<int>(std::lround(w * scale)), 1, size);
    const int out_h = std::clamp(static_cast<int>(std::lround(h * scale)), 1, size);
    std::memset(out, 0, plane * 3);
    resample(im, 0, 0, w, h, out_w, out_h, size, (size - out_w) / 2, (size - out_h) / 2, out);
  }
}

}  // namespace minidl
