// safetensors files: the checkpoint and interchange format (weights, buffers, optimizer state),
// readable by PyTorch's `safetensors` package, so a model trained here loads there and back.
// Layout: an 8-byte little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32"|"BF16"|"F16"|"I32"|"U8", "shape": [...], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value", ...}}
// padded with spaces so the data starts 8-byte aligned, then the tensors' bytes packed in order
// (offsets are relative to the data start), each element little-endian (BF16 and F16: the 2-byte
// bit pattern, as PyTorch writes them). Also SHA-256, which `minidl repro` uses to compare
// the final weights of two runs.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace minidl {

// A tensor of a dtype the format has and minidl holds no tensor type for (I64, F64, BOOL, ...).
struct OtherDTypeTensor {
  std::string name;
  std::string dtype;  // the format's name: "I64"
  Shape shape;
};

struct SafeTensors {
  std::vector<std::pair<std::string, Tensor>> tensors;  // CPU tensors, in file (data) order
  std::map<std::string, std::string> metadata;
  std::vector<OtherDTypeTensor> other_dtypes;  // with load_safetensors(path, true): not loaded
};

// Writes `tensors` (any device; copied to the host) in the given order, atomically
// (core/atomic_file.h): a crash leaves either the old file or the complete new one.
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// A tensor as bytes in host memory, with what the header says of it. save_safetensors_bytes
// writes these, touching no Tensor: a thread other than the one that owns the tensors and their
// allocators (train/checkpoint_writer.h) writes a file from its own buffers this way.
struct TensorBytes {
  std::string name;
  DType dtype = DType::Float32;
  Shape shape;
  const void* data = nullptr;  // `nbytes` bytes: the elements in order, little-endian
  size_t nbytes = 0;
};

// Views of contiguous host tensors, which must outlive them.
std::vector<TensorBytes> tensor_bytes(const std::vector<std::pair<std::string, Tensor>>& host_tensors);

// save_safetensors from bytes: the same file for the same tensors (save_safetensors writes
// through it).
void save_safetensors_bytes(const std::string& path, const std::vector<TensorBytes>& tensors,
                            const std::map<std::string, std::string>& metadata = {});

// Reads and validates a whole file; every error names the path and what is wrong with it. A tensor
// of a dtype minidl does not hold is an error, or with `other_dtypes` is listed in
// SafeTensors::other_dtypes and not loaded (files written by PyTorch: its BatchNorm's I64
// num_batches_tracked).
SafeTensors load_safetensors(const std::string& path, bool other_dtypes = false);

// Finds a tensor by name; errors naming `what` (e.g. the file) when absent.
const Tensor& find_tensor(const SafeTensors& st, const std::string& name, const std::string& what);

// SHA-256 (FIPS 180-4), incremental.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  std::string hex_digest();  // finishes the hash; the object is spent afterwards

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

std::string sha256_hex(const void* data, size_t n);
// Hash of the data section (the tensors' bytes, after the header) of a validated file: two runs
// that end with the same weights give the same hash whatever metadata the files carry.
std::string safetensors_payload_sha256(const std::string& path);

}  // namespace minidl
