// Decoding one image file's bytes to 8-bit RGB, and fitting it to an S x S square.
//
// JPEG goes through libjpeg-turbo's TurboJPEG API with its defaults (accurate integer IDCT
// "islow", fancy chroma upsampling): the decoder and settings Pillow uses, so a 32x32 CIFAR JPEG
// gives the bytes `Image.open(f).convert("RGB")` gives. PNG goes through libpng. Grayscale
// becomes 3 equal channels; an alpha channel is dropped (the RGB values are kept as stored, not
// composited on a background: what PIL's convert("RGB") does, which torchvision's ImageFolder
// loader calls); 16-bit samples keep their high byte; palettes are expanded.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace minidl {

struct RgbImage {
  int width = 0, height = 0;
  std::vector<uint8_t> pixels;  // height x width x 3, row-major (HWC)
};

// Decodes a JPEG or PNG file's bytes (the format from its signature, not its name). Errors
// (an Error naming `name`) for anything else, a corrupt or truncated file, or an image larger
// than 2^28 pixels.
RgbImage decode_image(const uint8_t* bytes, size_t size, const std::string& name);

// Reads a whole image file into `bytes`; false, with `error` naming the path and why, for a file
// that does not exist or cannot be read, a folder or other file that is not regular (a FIFO would
// block), or one larger than 1 GiB.
bool read_image_file(const std::string& path, std::vector<uint8_t>& bytes, std::string& error);

// Reads and decodes one image file, as decode_image; errors are read_image_file's.
RgbImage decode_image_file(const std::string& path);

// How an image of another shape becomes S x S:
//   crop     scale the shorter side to S (aspect kept), keep the centered S x S square
//            (torchvision Resize(S) + CenterCrop(S))
//   pad      scale the longer side to S (aspect kept), center it on a black square
//   stretch  scale each side to S (aspect changes)
enum class FitMode { Crop, Pad, Stretch };

// Writes `image` fitted to S x S as 3 planes (R, G, B: CHW) into out[3 * S * S]. An S x S image is
// copied unchanged. Otherwise each axis is resampled with a triangle (bilinear) filter whose
// support grows with the downscale factor (antialiased, as PIL's BILINEAR and torchvision's
// antialias=True), in float32, rounded to the nearest integer.
void fit_to_square(const RgbImage& image, int size, FitMode mode, uint8_t* out);

}  // namespace minidl
