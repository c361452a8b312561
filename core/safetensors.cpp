// safetensors reader/writer and SHA-256. The reader trusts nothing in the file: it checks the
// header against the file size before allocating, and requires the tensors to tile the data
// section exactly (no overlap, no hole, nothing after the last one), as the format's reference
// implementation does, so a truncated or hand-edited checkpoint fails with a message instead of
// loading garbage. The host is assumed little-endian (x86-64, AArch64), like the format.
#include "core/safetensors.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json_limits.h"
#include "core/regular_file.h"

namespace minidl {
namespace {

using ordered_json = nlohmann::ordered_json;

// A header larger than this is certainly not a checkpoint of ours (the format's reference reader
// uses the same bound); checking it first avoids allocating whatever a corrupt length says.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

const char* safetensors_dtype(DType t) {
  switch (t) {
    case DType::Float32: return "F32";
    case DType::Int32: return "I32";
    case DType::UInt8: return "U8";
    case DType::BFloat16: return "BF16";
    case DType::Float16: return "F16";
  }
  return "?";
}

bool parse_dtype(const std::string& s, DType* out) {
  if (s == "F32") *out = DType::Float32;
  else if (s == "I32") *out = DType::Int32;
  else if (s == "U8") *out = DType::UInt8;
  else if (s == "BF16") *out = DType::BFloat16;
  else if (s == "F16") *out = DType::Float16;
  else return false;
  return true;
}

// The element size of a dtype of the format that minidl holds no tensor type for (PyTorch writes
// BatchNorm's num_batches_tracked as I64); 0 for a name the format does not have.
size_t other_dtype_size(const std::string& s) {
  static const std::map<std::string, size_t> sizes = {{"BOOL", 1}, {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
                                                      {"I16", 2},  {"U16", 2}, {"U32", 4},     {"I64", 8},
                                                      {"U64", 8},  {"F64", 8}};
  const auto it = sizes.find(s);
  return it == sizes.end() ? 0 : it->second;
}

std::string errno_text() { return std::strerror(errno); }

struct Entry {
  std::string name;
  DType dtype = DType::Float32;
  std::string other_dtype;  // a dtype minidl does not hold (with other_dtypes): dtype is unused
  Shape shape;
  uint64_t begin, end;
};

struct Header {
  std::vector<Entry> entries;  // sorted by data offset: the order the bytes are in
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;     // file offset of the data section
  uint64_t data_size = 0;
};

uint64_t json_u64(const ordered_json& v, const std::string& what, const std::string& path) {
  MINIDL_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0),
               "safetensors file '", path, "': ", what, " must be a non-negative integer, got ",
               json_excerpt(v));
  return v.get<uint64_t>();
}

Entry parse_entry(const std::string& name, const ordered_json& v, uint64_t data_size, const std::string& path,
                  bool other_dtypes) {
  const std::string where = "safetensors file '" + path + "': tensor '" + text_excerpt(name) + "'";
  MINIDL_CHECK(v.is_object(), where, " must be an object, got ", json_excerpt(v));
  MINIDL_CHECK(v.contains("dtype") && v["dtype"].is_string(), where, " has no string \"dtype\"");
  MINIDL_CHECK(v.contains("shape") && v["shape"].is_array(), where, " has no \"shape\" list");
  MINIDL_CHECK(v.contains("data_offsets") && v["data_offsets"].is_array() &&
                   v["data_offsets"].size() == 2,
               where, " has no \"data_offsets\" pair [begin, end]");
  Entry e;
  e.name = name;
  const std::string dt = v["dtype"].get<std::string>();
  size_t element_size = 0;
  if (parse_dtype(dt, &e.dtype)) {
    element_size = dtype_size(e.dtype);
  } else {
    element_size = other_dtypes ? other_dtype_size(dt) : 0;
    MINIDL_CHECK(element_size > 0, where, " has unknown or unsupported dtype '", text_excerpt(dt),
                 "' (minidl reads F32, BF16, F16, I32 and U8)");
    e.other_dtype = dt;
  }
  // Byte count with an overflow guard: any product past the data size is already an error.
  uint64_t numel = 1;
  for (const auto& d : v["shape"]) {
    const uint64_t n = json_u64(d, "tensor '" + text_excerpt(name) + "' shape entry", path);
    MINIDL_CHECK(n <= static_cast<uint64_t>(INT64_MAX), where, " has shape entry ", n, " beyond 64-bit sizes");
    e.shape.push_back(static_cast<int64_t>(n));
    if (n != 0 && numel > (data_size + 1) / n) numel = data_size + 1;
    else numel *= n;
  }
  // Strides multiply the trailing entries even when another one is 0: all must fit in int64.
  int64_t stride = 1;
  for (size_t i = e.shape.size(); i-- > 0;)
    MINIDL_CHECK(!__builtin_mul_overflow(stride, e.shape[i], &stride), where, " has shape ",
                 shape_str(e.shape), " whose size overflows 64 bits");
  e.begin = json_u64(v["data_offsets"][0], "tensor '" + text_excerpt(name) + "' data_offsets[0]", path);
  e.end = json_u64(v["data_offsets"][1], "tensor '" + text_excerpt(name) + "' data_offsets[1]", path);
  MINIDL_CHECK(e.begin <= e.end, where, " has data_offsets [", e.begin, ", ", e.end,
               "] with begin after end");
  MINIDL_CHECK(e.end <= data_size, where, " has data_offsets [", e.begin, ", ", e.end,
               "] beyond the data section (", data_size, " bytes)");
  const uint64_t want = numel * element_size;
  MINIDL_CHECK(e.end - e.begin == want, where, " has data_offsets [", e.begin, ", ", e.end,
               "] holding ", e.end - e.begin, " bytes, but shape ", shape_str(e.shape), " of ", dt,
               " needs ", want, " bytes");
  return e;
}

// Reads and validates the header of an open file of `file_size` bytes.
Header read_header(FILE* f, uint64_t file_size, const std::string& path, bool other_dtypes = false) {
  MINIDL_CHECK(file_size >= 8, "safetensors file '", path, "' is ", file_size,
               " bytes long, shorter than the 8-byte header length");
  uint8_t len_bytes[8];
  MINIDL_CHECK(std::fread(len_bytes, 1, 8, f) == 8, "safetensors file '", path,
               "': cannot read the header length: ", errno_text());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  MINIDL_CHECK(n <= file_size - 8, "safetensors file '", path, "': header length ", n,
               " goes beyond the end of the file (", file_size, " bytes)");
  MINIDL_CHECK(n <= kMaxHeaderBytes, "safetensors file '", path, "': header length ", n,
               " is larger than the ", kMaxHeaderBytes, "-byte limit");
  std::string text(n, '\0');
  MINIDL_CHECK(std::fread(text.data(), 1, n, f) == n, "safetensors file '", path,
               "': cannot read the ", n, "-byte header: ", errno_text());
  check_json_text_depth(text, str("safetensors file '", path, "': header"));
  ordered_json j = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  MINIDL_CHECK(!j.is_discarded() && j.is_object(), "safetensors file '", path,
               "': header is not a JSON object (", n, " bytes starting '", text_excerpt(text, 40),
               "')");
  check_duplicate_keys(text, str("safetensors file '", path, "': header"));

  Header h;
  h.data_start = 8 + n;
  h.data_size = file_size - h.data_start;
  for (const auto& item : j.items()) {
    if (item.key() == "__metadata__") {
      MINIDL_CHECK(item.value().is_object(), "safetensors file '", path,
                   "': __metadata__ must be an object of strings");
      for (const auto& m : item.value().items()) {
        MINIDL_CHECK(m.value().is_string(), "safetensors file '", path, "': __metadata__ key '",
                     text_excerpt(m.key()), "' must map to a string, got ", json_excerpt(m.value()));
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    h.entries.push_back(parse_entry(item.key(), item.value(), h.data_size, path, other_dtypes));
  }
  // (begin, end) order puts an empty tensor before the one that starts where it sits.
  std::stable_sort(h.entries.begin(), h.entries.end(),
                   [](const Entry& a, const Entry& b) {
                     return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
                   });
  // The tensors must tile [0, data_size) exactly.
  uint64_t at = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : h.entries) {
    MINIDL_CHECK(e.begin >= at, "safetensors file '", path, "': tensor '", text_excerpt(e.name),
                 "' (bytes ", e.begin, "..", e.end, ") overlaps tensor '",
                 prev ? text_excerpt(prev->name) : "", "' (bytes ", prev ? prev->begin : 0, "..", at, ")");
    MINIDL_CHECK(e.begin == at, "safetensors file '", path, "': data bytes ", at, "..", e.begin,
                 " belong to no tensor (hole before tensor '", text_excerpt(e.name), "')");
    at = e.end;
    prev = &e;
  }
  MINIDL_CHECK(at == h.data_size, "safetensors file '", path, "': ", h.data_size - at,
               " bytes of trailing garbage after the last tensor (data section is ", h.data_size,
               " bytes, tensors cover ", at, ")");
  return h;
}

File open_for_read(const std::string& path, uint64_t* size) {
  File f = open_regular_file(path, "safetensors file");
  MINIDL_CHECK(std::fseek(f.get(), 0, SEEK_END) == 0, "cannot seek in '", path, "': ", errno_text());
  const long end = std::ftell(f.get());
  MINIDL_CHECK(end >= 0, "cannot read the size of '", path, "': ", errno_text());
  std::rewind(f.get());
  *size = static_cast<uint64_t>(end);
  return f;
}

std::string serialize_header(const std::vector<TensorBytes>& tensors,
                             const std::map<std::string, std::string>& metadata,
                             const std::string& path) {
  ordered_json j = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json m = ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    j["__metadata__"] = m;
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const TensorBytes& t : tensors) {
    MINIDL_CHECK(t.name != "__metadata__", "save_safetensors '", path,
                 "': '__metadata__' is reserved and cannot name a tensor");
    MINIDL_CHECK(seen.insert(t.name).second, "save_safetensors '", path, "': tensor name '", t.name,
                 "' appears twice");
    MINIDL_CHECK(t.nbytes == static_cast<size_t>(shape_numel(t.shape)) * dtype_size(t.dtype), "save_safetensors '",
                 path, "': tensor '", t.name, "' has ", t.nbytes, " bytes for shape ", shape_str(t.shape));
    ordered_json e;
    e["dtype"] = safetensors_dtype(t.dtype);
    e["shape"] = t.shape;
    e["data_offsets"] = {offset, offset + t.nbytes};
    offset += t.nbytes;
    j[t.name] = e;
  }
  std::string text = j.dump();
  // Pad with spaces (valid JSON whitespace) so the data section starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

}  // namespace

std::vector<TensorBytes> tensor_bytes(const std::vector<std::pair<std::string, Tensor>>& host_tensors) {
  std::vector<TensorBytes> out;
  out.reserve(host_tensors.size());
  for (const auto& [name, t] : host_tensors) {
    MINIDL_CHECK(t.defined(), "tensor '", text_excerpt(name), "' is undefined");
    MINIDL_CHECK(!t.is_cuda(), "tensor '", text_excerpt(name), "' is not a host tensor");
    MINIDL_CHECK(t.is_contiguous(), "tensor '", text_excerpt(name), "' is not contiguous");
    out.push_back({name, t.dtype(), t.shape(), t.raw_data(), t.nbytes()});
  }
  return out;
}

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, Tensor>> host;
  host.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    MINIDL_CHECK(t.defined(), "save_safetensors '", path, "': tensor '", name, "' is undefined");
    MINIDL_CHECK(t.is_contiguous(), "save_safetensors '", path, "': tensor '", name, "' is not contiguous");
    host.emplace_back(name, t.cpu());
  }
  save_safetensors_bytes(path, tensor_bytes(host), metadata);
}

void save_safetensors_bytes(const std::string& path, const std::vector<TensorBytes>& tensors,
                            const std::map<std::string, std::string>& metadata) {
  const std::string header = serialize_header(tensors, metadata, path);
  AtomicFile f(path, "safetensors file");
  uint8_t len_bytes[8];
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<uint8_t>(n >> (8 * i));
  f.write(len_bytes, 8);
  f.write(header.data(), header.size());
  for (const TensorBytes& t : tensors) f.write(t.data, t.nbytes);
  f.commit();
}

SafeTensors load_safetensors(const std::string& path, bool other_dtypes) {
  uint64_t size = 0;
  File f = open_for_read(path, &size);
  const Header h = read_header(f.get(), size, path, other_dtypes);
  SafeTensors out;
  out.metadata = h.metadata;
  // Entries are sorted and tile the data, so the bytes are read front to back, seeking only past
  // the tensors of other dtypes.
  for (const Entry& e : h.entries) {
    if (!e.other_dtype.empty()) {
      MINIDL_CHECK(std::fseek(f.get(), static_cast<long>(e.end - e.begin), SEEK_CUR) == 0, "cannot seek in '", path,
                   "': ", errno_text());
      out.other_dtypes.push_back({e.name, e.other_dtype, e.shape});
      continue;
    }
    Tensor t = Tensor::empty(e.shape, e.dtype);
    const size_t n = static_cast<size_t>(e.end - e.begin);
    MINIDL_CHECK(n == 0 || std::fread(t.raw_data(), 1, n, f.get()) == n, "safetensors file '",
                 path, "': cannot read the data of tensor '", e.name, "': ", errno_text());
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

const Tensor& find_tensor(const SafeTensors& st, const std::string& name, const std::string& what) {
  for (const auto& [n, t] : st.tensors)
    if (n == name) return t;
  fail(str(what, " has no tensor '", name, "'"));
}

std::string safetensors_payload_sha256(const std::string& path) {
  uint64_t size = 0;
  File f = open_for_read(path, &size);
  const Header h = read_header(f.get(), size, path);
  Sha256 sha;
  std::vector<uint8_t> chunk(1 << 20);
  uint64_t left = h.data_size;
  while (left > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, chunk.size()));
    MINIDL_CHECK(std::fread(chunk.data(), 1, n, f.get()) == n, "safetensors file '", path,
                 "': cannot read the data section: ", errno_text());
    sha.update(chunk.data(), n);
    left -= n;
  }
  return sha.hex_digest();
}

// ---- SHA-256 (FIPS 180-4, section 6.2) ----

namespace {
constexpr uint32_t kSha256K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
}  // namespace

Sha256::Sha256()
    : h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
         0x5be0cd19} {}

void Sha256::block(const uint8_t* p) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i)
    w[i] = (uint32_t(p[4 * i]) << 24) | (uint32_t(p[4 * i + 1]) << 16) |
           (uint32_t(p[4 * i + 2]) << 8) | uint32_t(p[4 * i + 3]);
  for (int i = 16; i < 64; ++i) {
    const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
  for (int i = 0; i < 64; ++i) {
    const uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) +
                        kSha256K[i] + w[i];
    const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
  }
  h_[0] += a; h_[1] += b; h_[2] += c; h_[3] += d; h_[4] += e; h_[5] += f; h_[6] += g; h_[7] += h;
}

void Sha256::update(const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  total_bytes_ += n;
  if (buffered_ > 0) {
    const size_t take = std::min(n, 64 - buffered_);
    std::memcpy(buf_ + buffered_, p, take);
    buffered_ += take;
    p += take;
    n -= take;
    if (buffered_ < 64) return;
    block(buf_);
    buffered_ = 0;
  }
  for (; n >= 64; p += 64, n -= 64) block(p);
  std::memcpy(buf_, p, n);
  buffered_ = n;
}

std::string Sha256::hex_digest() {
  // Padding: 0x80, zeros to 56 mod 64, then the message length in bits, big-endian.
  const uint64_t bits = total_bytes_ * 8;
  const uint8_t one = 0x80, zero = 0;
  update(&one, 1);
  while (buffered_ != 56) update(&zero, 1);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  update(len, 8);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (uint32_t v : h_)
    for (int s = 28; s >= 0; s -= 4) out += hex[(v >> s) & 0xf];
  return out;
}

std::string sha256_hex(const void* data, size_t n) {
  Sha256 sha;
  sha.update(data, n);
  return sha.hex_digest();
}

}  // namespace minidl
