// safetensors: round trips (CPU and CUDA tensors), a file laid out the way the Python package
// writes it, every kind of corruption the reader must name, SHA-256 on the FIPS 180 vectors, and
// the atomic write (no temp file left, an existing file untouched when the write fails). Also
// `minidl parity`, the safetensors-in, safetensors-out command of the PyTorch parity check, on a
// Linear layer and a one-step model against float64 references.
#include "core/safetensors.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "bench/parity.h"
#include "core/error.h"
#include "test_util.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace minidl {
namespace {

struct TempDir : test::TempDir {
  TempDir() : test::TempDir("safetensors") {}
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(n >> (8 * i));
  return s;
}

// A file with the given header text and `data_bytes` bytes of data.
std::string file_bytes(const std::string& header, size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\x01');
}

std::string tensor_bytes(const Tensor& t) {
  const Tensor h = t.cpu();
  return std::string(static_cast<const char*>(h.raw_data()), h.nbytes());
}

void require_same(const std::vector<std::pair<std::string, Tensor>>& want,
                  const std::vector<std::pair<std::string, Tensor>>& got) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("tensor " << i << " '" << want[i].first << "'");
    CHECK(got[i].first == want[i].first);
    CHECK(got[i].second.dtype() == want[i].second.dtype());
    CHECK(got[i].second.shape() == want[i].second.shape());
    CHECK(got[i].second.device().is_cpu());
    CHECK(tensor_bytes(got[i].second) == tensor_bytes(want[i].second));
  }
}

void require_load_error(const std::string& path, const std::string& keyword) {
  INFO("file " << path << ", expecting an error containing '" << keyword << "'");
  try {
    load_safetensors(path);
    FAIL("load_safetensors accepted the file");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Contains(path) && Contains(keyword));
  }
}

std::vector<std::pair<std::string, Tensor>> sample_tensors() {
  return {{"layer.weight", test::random_tensor({3, 5}, 1)},
          {"a.labels", Tensor::from_vector(std::vector<int32_t>{7, -2, 0, 2147483647}, {4})},
          {"image", Tensor::from_vector(std::vector<uint8_t>{0, 1, 127, 128, 254, 255}, {2, 3})},
          {"scalar", Tensor::from_vector(std::vector<float>{-0.f}, {})},
          {"empty", Tensor::empty({0, 4})},
          {"z.bias", test::random_tensor({7}, 2)},
          {"half.bf16", test::random_tensor({2, 3}, 4).to(DType::BFloat16)},
          {"half.fp16", test::random_tensor({3, 2}, 5).to(DType::Float16)}};
}

}  // namespace

TEST_CASE("safetensors round trip keeps order, dtypes, shapes, bits and metadata", "[safetensors]") {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  const auto tensors = sample_tensors();
  const std::map<std::string, std::string> meta{{"format", "pt"}, {"step", "12"}};
  save_safetensors(path, tensors, meta);

  const SafeTensors st = load_safetensors(path);
  require_same(tensors, st.tensors);  // file order, not alphabetical
  CHECK(st.metadata == meta);
  CHECK(find_tensor(st, "image", path).values<uint8_t>()[5] == 255);
  CHECK_THROWS_WITH(find_tensor(st, "nope", path), Contains("nope") && Contains(path));

  // Layout: the data section starts 8-byte aligned, the header is JSON padded with spaces.
  const std::string bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  CHECK(n % 8 == 0);
  CHECK(bytes[8] == '{');
  size_t data = 0;
  for (const auto& t : tensors) data += t.second.nbytes();
  CHECK(bytes.size() == 8 + n + data);

  // Saving over an existing file replaces it.
  save_safetensors(path, {{"only", test::random_tensor({2}, 3)}});
  CHECK(load_safetensors(path).tensors.size() == 1);
}

TEST_CASE("safetensors reads a file laid out like the Python package's", "[safetensors]") {
  // Header keys in another order than the data (the Python writer sorts), __metadata__ first,
  // offsets as written there; the reader returns tensors in data order.
  TempDir dir;
  const std::string path = dir.file("py.safetensors");
  const float w[2] = {1.5f, -2.25f};
  const int32_t l[3] = {3, 1, 4};
  std::string data(reinterpret_cast<const char*>(l), 12);
  data += std::string(reinterpret_cast<const char*>(w), 8);
  std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,1],"data_offsets":[12,20]},)"
      R"("labels":{"dtype":"I32","shape":[3],"data_offsets":[0,12]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  write_bytes(path, le64(header.size()) + header + data);

  const SafeTensors st = load_safetensors(path);
  REQUIRE(st.tensors.size() == 2);
  CHECK(st.tensors[0].first == "labels");
  CHECK(st.tensors[0].second.values<int32_t>() == std::vector<int32_t>{3, 1, 4});
  CHECK(st.tensors[1].first == "w");
  CHECK(st.tensors[1].second.shape() == Shape{2, 1});
  CHECK(st.tensors[1].second.to_vector() == std::vector<float>{1.5f, -2.25f});
  CHECK(st.metadata.at("format") == "pt");
}

TEST_CASE("safetensors writes and reads BF16 and F16 as PyTorch does: 2-byte little-endian bit patterns",
          "[safetensors][half]") {
  // 1, -2, 0.5 and the largest finite value of each format, whose bit patterns are fixed by the
  // formats: bf16 is float32's top half, fp16 is IEEE binary16.
  TempDir dir;
  const std::string path = dir.file("halves.safetensors");
  const Tensor b = Tensor::from_vector(std::vector<float>{1.f, -2.f, 0.5f, 3.3895314e38f}, {4}).to(DType::BFloat16);
  const Tensor h = Tensor::from_vector(std::vector<float>{1.f, -2.f, 0.5f, 65504.f}, {2, 2}).to(DType::Float16);
  save_safetensors(path, {{"b", b}, {"h", h}});
  std::string header = R"({"b":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]},)"
                       R"("h":{"dtype":"F16","shape":[2,2],"data_offsets":[8,16]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  const char data[] = "\x80\x3f\x00\xc0\x00\x3f\x7f\x7f"   // bf16 3f80 c000 3f00 7f7f
                      "\x00\x3c\x00\xc0\x00\x38\xff\x7b";  // fp16 3c00 c000 3800 7bff
  CHECK(read_bytes(path) == le64(header.size()) + header + std::string(data, 16));

  // A file as the Python package writes it (keys sorted, __metadata__ first) loads with the
  // dtypes and values it holds.
  const std::string py = dir.file("py_halves.safetensors");
  std::string py_header = R"({"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]},)"
                          R"("h":{"dtype":"F16","shape":[2,2],"data_offsets":[8,16]}})";
  py_header.append((8 - py_header.size() % 8) % 8, ' ');
  write_bytes(py, le64(py_header.size()) + py_header + std::string(data, 16));
  const SafeTensors st = load_safetensors(py);
  REQUIRE(st.tensors.size() == 2);
  CHECK(st.tensors[0].second.dtype() == DType::BFloat16);
  CHECK(st.tensors[0].second.to_vector() == std::vector<float>{1.f, -2.f, 0.5f, 3.3895314e38f});
  CHECK(st.tensors[1].second.dtype() == DType::Float16);
  CHECK(st.tensors[1].second.shape() == Shape{2, 2});
  CHECK(st.tensors[1].second.to_vector() == std::vector<float>{1.f, -2.f, 0.5f, 65504.f});

  // A half tensor whose byte count does not match its shape is named like any other.
  write_bytes(py, file_bytes(R"({"a":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})", 8));
  require_load_error(py, "needs 6 bytes");
}

TEST_CASE("safetensors reader names the file and the problem for every corruption", "[safetensors]") {
  TempDir dir;
  const std::string f32x4 = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";

  require_load_error(dir.file("missing.safetensors"), "No such file");

  std::string p = dir.file("short.safetensors");
  write_bytes(p, "abcde");
  require_load_error(p, "shorter than the 8-byte header length");

  p = dir.file("long_header.safetensors");
  write_bytes(p, le64(1000) + "{}");
  require_load_error(p, "goes beyond the end of the file");

  p = dir.file("not_json.safetensors");
  write_bytes(p, file_bytes("{\"a\": [1, 2", 0));
  require_load_error(p, "not a JSON object");

  p = dir.file("array_header.safetensors");
  write_bytes(p, file_bytes("[1, 2, 3]", 0));
  require_load_error(p, "not a JSON object");

  p = dir.file("dtype.safetensors");
  write_bytes(p, file_bytes(R"({"a":{"dtype":"F64","shape":[4],"data_offsets":[0,32]}})", 32));
  require_load_error(p, "unsupported dtype 'F64'");

  p = dir.file("out_of_range.safetensors");
  write_bytes(p, file_bytes(f32x4, 12));
  require_load_error(p, "beyond the data section");

  p = dir.file("size_mismatch.safetensors");
  write_bytes(p, file_bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", 16));
  require_load_error(p, "needs 12 bytes");

  p = dir.file("overlap.safetensors");
  write_bytes(p, file_bytes(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                            R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                            24));
  require_load_error(p, "overlaps tensor 'a'");

  p = dir.file("hole.safetensors");
  write_bytes(p, file_bytes(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                            R"("b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}})",
                            12));
  require_load_error(p, "belong to no tensor");

  p = dir.file("trailing.safetensors");
  write_bytes(p, file_bytes(f32x4, 20));
  require_load_error(p, "4 bytes of trailing garbage");

  p = dir.file("bad_offsets.safetensors");
  write_bytes(p, file_bytes(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[-1,16]}})", 16));
  require_load_error(p, "non-negative integer");

  p = dir.file("bad_metadata.safetensors");
  write_bytes(p, file_bytes(R"({"__metadata__":{"step":3}})", 0));
  require_load_error(p, "must map to a string");

  // The payload hash validates the same way before hashing.
  CHECK_THROWS_WITH(safetensors_payload_sha256(dir.file("trailing.safetensors")),
                    Contains("trailing garbage"));

  // And the checks do not reject a well-formed file of the same shape.
  p = dir.file("good.safetensors");
  write_bytes(p, file_bytes(f32x4, 16));
  CHECK(load_safetensors(p).tensors.at(0).second.numel() == 4);
}

TEST_CASE("SHA-256 matches the FIPS 180 test vectors", "[safetensors]") {
  auto sha = [](const std::string& s) { return sha256_hex(s.data(), s.size()); };
  CHECK(sha("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnop"
            "qrlmnopqrsmnopqrstnopqrstu") ==
        "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  const std::string million(1000000, 'a');
  CHECK(sha(million) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");

  // Fed in uneven pieces (across block boundaries) the digest is the same.
  Sha256 inc;
  size_t at = 0, piece = 1;
  while (at < million.size()) {
    const size_t n = std::min(piece, million.size() - at);
    inc.update(million.data() + at, n);
    at += n;
    piece = piece * 3 % 191 + 1;
  }
  CHECK(inc.hex_digest() == sha(million));
}

TEST_CASE("safetensors payload hash covers the tensor bytes only", "[safetensors]") {
  TempDir dir;
  const auto tensors = sample_tensors();
  save_safetensors(dir.file("a.safetensors"), tensors, {{"run", "1"}});
  save_safetensors(dir.file("b.safetensors"), tensors, {{"run", "2"}, {"host", "x"}});
  const std::string ha = safetensors_payload_sha256(dir.file("a.safetensors"));
  CHECK(ha == safetensors_payload_sha256(dir.file("b.safetensors")));

  std::string payload;
  for (const auto& t : tensors) payload += tensor_bytes(t.second);
  CHECK(ha == sha256_hex(payload.data(), payload.size()));

  auto changed = tensors;
  changed[0].second = changed[0].second.clone();
  std::vector<float> v = changed[0].second.to_vector();
  v[4] = std::nextafter(v[4], 2.f);  // one ulp in one weight
  changed[0].second = Tensor::from_vector(v, changed[0].second.shape());
  save_safetensors(dir.file("c.safetensors"), changed);
  CHECK(ha != safetensors_payload_sha256(dir.file("c.safetensors")));
}

TEST_CASE("safetensors write is atomic: no temp file left, old file intact on failure",
          "[safetensors]") {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  save_safetensors(path, sample_tensors());
  const std::string original = read_bytes(path);
  for (const auto& e : fs::directory_iterator(dir.path))
    CHECK(e.path().filename() == "ckpt.safetensors");

  const std::vector<std::pair<std::string, Tensor>> other{{"x", test::random_tensor({9}, 4)}};

  SECTION("the temporary cannot be created") {
    fs::create_directory(tmp);  // occupies the temp name, so creating the file fails
    CHECK_THROWS_WITH(save_safetensors(path, other), Contains(path) && Contains("cannot create"));
    CHECK(read_bytes(path) == original);
    CHECK(fs::is_directory(tmp));  // a path we did not create is left alone
  }

  SECTION("the rename fails after the data was written") {
    const std::string target = dir.file("is_a_dir");
    fs::create_directories(fs::path(target) / "child");
    CHECK_THROWS_WITH(save_safetensors(target, other), Contains(target) && Contains("renaming"));
    CHECK(fs::is_directory(fs::path(target) / "child"));
    CHECK(!fs::exists(target + ".tmp." + std::to_string(::getpid())));
    CHECK(read_bytes(path) == original);
  }

  SECTION("the directory is not writable") {
    if (::geteuid() == 0) {
      WARN("running as root, which ignores permission bits: unwritable-directory case not run");
    } else {
      fs::permissions(dir.path, fs::perms::owner_read | fs::perms::owner_exec);
      CHECK_THROWS_WITH(save_safetensors(path, other), Contains(path));
      fs::permissions(dir.path, fs::perms::owner_all);
      CHECK(read_bytes(path) == original);
      CHECK(!fs::exists(tmp));
    }
  }

  SECTION("invalid tensors are refused before anything is written") {
    CHECK_THROWS_WITH(save_safetensors(path, {{"a", Tensor()}}), Contains("'a' is undefined"));
    CHECK_THROWS_WITH(save_safetensors(path, {{"a", other[0].second}, {"a", other[0].second}}),
                      Contains("appears twice"));
    CHECK_THROWS_WITH(save_safetensors(path, {{"__metadata__", other[0].second}}),
                      Contains("reserved"));
    CHECK(read_bytes(path) == original);
    CHECK(!fs::exists(tmp));
  }
}

TEST_CASE("safetensors saves CUDA tensors and loads them back bit-identical", "[safetensors][cuda]") {
  MINIDL_REQUIRE_CUDA();
  TempDir dir;
  const std::string path = dir.file("cuda.safetensors");
  const auto host = sample_tensors();
  std::vector<std::pair<std::string, Tensor>> dev;
  for (const auto& [name, t] : host) dev.emplace_back(name, t.to(Device::cuda()));
  save_safetensors(path, dev);
  const SafeTensors st = load_safetensors(path);
  require_same(host, st.tensors);
  // Back onto the GPU and out again: still the same bits.
  const Tensor w = st.tensors[0].second.to(Device::cuda());
  CHECK(w.is_cuda());
  CHECK(tensor_bytes(w) == tensor_bytes(host[0].second));
}

TEST_CASE("minidl parity runs one layer from safetensors and writes output and gradients",
          "[safetensors][parity]") {
  TempDir dir;
  const int64_t N = 5, IN = 4, OUT = 3;
  const Tensor w = test::random_tensor({OUT, IN}, 11), b = test::random_tensor({OUT}, 12);
  const Tensor x = test::random_tensor({N, IN}, 13), dy = test::random_tensor({N, OUT}, 14);
  const std::string in = dir.file("in.safetensors"), out = dir.file("out.safetensors");
  save_safetensors(in, {{"input", x}, {"grad_output", dy}, {"weight", w}, {"bias", b}});
  const std::string spec = R"({"type": "Linear", "in_features": 4, "out_features": 3})";
  REQUIRE(parity_main({"--spec", spec, "--in", in, "--out", out, "--device", "cpu", "--no-tf32"}) == 0);

  const SafeTensors st = load_safetensors(out);
  const std::vector<float> W = w.to_vector(), B = b.to_vector(), X = x.to_vector(), DY = dy.to_vector();
  std::vector<double> y(N * OUT), dx(N * IN, 0.0), dw(OUT * IN, 0.0), db(OUT, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OUT; ++o) {
      double acc = B[o];
      for (int64_t i = 0; i < IN; ++i) {
        acc += double(X[n * IN + i]) * W[o * IN + i];
        dx[n * IN + i] += double(DY[n * OUT + o]) * W[o * IN + i];
        dw[o * IN + i] += double(DY[n * OUT + o]) * X[n * IN + i];
      }
      y[n * OUT + o] = acc;
      db[o] += DY[n * OUT + o];
    }
  test::require_close(find_tensor(st, "output", out).to_vector(), y, 1e-5, 1e-6, "output");
  test::require_close(find_tensor(st, "grad_input", out).to_vector(), dx, 1e-5, 1e-6, "grad_input");
  test::require_close(find_tensor(st, "grad.weight", out).to_vector(), dw, 1e-5, 1e-6, "grad.weight");
  test::require_close(find_tensor(st, "grad.bias", out).to_vector(), db, 1e-5, 1e-6, "grad.bias");
  CHECK(st.metadata.at("allow_tf32") == "false");

  // A misspelt weight is an error, not a silently random-initialized layer.
  save_safetensors(in, {{"input", x}, {"grad_output", dy}, {"wieght", w}, {"bias", b}});
  CHECK_THROWS_WITH(parity_main({"--spec", spec, "--in", in, "--out", out}),
                    Contains("'wieght'") && Contains(in));
  save_safetensors(in, {{"input", x}, {"weight", w}, {"bias", b}});
  CHECK_THROWS_WITH(parity_main({"--spec", spec, "--in", in, "--out", out}), Contains("grad_output"));
  CHECK_THROWS_WITH(parity_main({"--in", in, "--out", out}), Contains("--spec"));
  CHECK_THROWS_WITH(parity_main({"--spec", spec, "--in", in, "--out", out, "--bogus"}), Contains("--bogus"));
}

TEST_CASE("minidl parity runs a layer in bf16 channels_last and writes float32 NCHW results",
          "[safetensors][parity][precision]") {
  TempDir dir;
  const Tensor w = test::random_tensor({4, 3, 3, 3}, 31, -0.5f, 0.5f), b = test::random_tensor({4}, 32);
  const Tensor x = test::random_tensor({2, 3, 5, 6}, 33), dy = test::random_tensor({2, 4, 5, 6}, 34);
  const std::string in = dir.file("in.safetensors"), out = dir.file("out.safetensors");
  const std::string fp32_out = dir.file("fp32.safetensors");
  save_safetensors(in, {{"input", x}, {"grad_output", dy}, {"weight", w}, {"bias", b}});
  const std::string spec = R"({"type": "Conv2d", "in_channels": 3, "out_channels": 4, "kernel_size": 3, "padding": 1})";
  REQUIRE(parity_main({"--spec", spec, "--in", in, "--out", fp32_out}) == 0);
  REQUIRE(parity_main({"--spec", spec, "--in", in, "--out", out, "--precision", "bf16", "--memory-format",
                       "channels_last"}) == 0);
  const SafeTensors half = load_safetensors(out), full = load_safetensors(fp32_out);
  CHECK(half.metadata.at("precision") == "bf16");
  CHECK(half.metadata.at("memory_format") == "channels_last");
  // Under autocast the convolution runs on the input and weight rounded to bf16 (8 significant
  // bits) and rounds its results once: within a few bf16 units of the float32 layer, not equal.
  for (const char* name : {"output", "grad_input", "grad.weight", "grad.bias"}) {
    const Tensor h = find_tensor(half, name, out), f = find_tensor(full, name, fp32_out);
    REQUIRE(h.dtype() == DType::Float32);
    REQUIRE(h.is_contiguous());
    const std::vector<float> hv = h.to_vector(), fv = f.to_vector();
    test::require_close(hv, std::vector<double>(fv.begin(), fv.end()), 4 * std::ldexp(1.0, -8), 2e-2, name);
    CHECK(hv != fv);
  }
  CHECK_THROWS_WITH(parity_main({"--spec", spec, "--in", in, "--out", out, "--memory-format", "nhwc"}),
                    Contains("memory_format"));
}

TEST_CASE("minidl parity does one training step of a config's model", "[safetensors][parity]") {
  // Flatten -> Linear(12, 3, no bias), cross-entropy with smoothing, plain SGD: every output has
  // a short float64 reference.
  TempDir dir;
  const int64_t N = 4, F = 12, K = 3;
  const double lr = 0.5, eps = 0.1;
  const std::string config = dir.file("config.json");
  write_bytes(config, R"({"model": {"layers": [{"type": "Flatten"},
                        {"type": "Linear", "in_features": 12, "out_features": 3, "bias": false}]},
                        "loss": {"label_smoothing": 0.1},
                        "optimizer": {"type": "SGD", "lr": 0.5}})");
  const Tensor w = test::random_tensor({K, F}, 21), x = test::random_tensor({N, 3, 2, 2}, 22);
  const std::vector<int32_t> labels{2, 0, 1, 2};
  const std::string in = dir.file("in.safetensors"), out = dir.file("out.safetensors");
  save_safetensors(in, {{"input", x}, {"labels", Tensor::from_vector(labels, {N})}, {"1.weight", w}});
  REQUIRE(parity_main({"--config", config, "--in", in, "--out", out}) == 0);
  const SafeTensors st = load_safetensors(out);

  const std::vector<float> W = w.to_vector(), X = x.to_vector();
  double loss = 0;
  std::vector<double> grad(K * F, 0.0), after(K * F);
  for (int64_t n = 0; n < N; ++n) {
    std::vector<double> z(K, 0.0);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t f = 0; f < F; ++f) z[k] += double(W[k * F + f]) * X[n * F + f];
    const double mx = std::max({z[0], z[1], z[2]});
    double se = 0;
    for (double v : z) se += std::exp(v - mx);
    for (int64_t k = 0; k < K; ++k) {
      const double logp = z[k] - mx - std::log(se);
      const double q = (k == labels[n] ? 1 - eps : 0) + eps / K;
      loss -= q * logp / N;
      for (int64_t f = 0; f < F; ++f) grad[k * F + f] += (std::exp(logp) - q) / N * X[n * F + f];
    }
  }
  for (int64_t i = 0; i < K * F; ++i) after[i] = W[i] - lr * grad[i];
  test::require_close(find_tensor(st, "loss", out).to_vector(), std::vector<double>{loss}, 1e-5, 1e-7, "loss");
  test::require_close(find_tensor(st, "grad.1.weight", out).to_vector(), grad, 1e-4, 1e-6, "grad");
  test::require_close(find_tensor(st, "param.1.weight", out).to_vector(), after, 1e-5, 1e-6, "param after");
  CHECK(find_tensor(st, "output", out).shape() == Shape{N, K});
  CHECK_THROWS_WITH(parity_main({"--config", config, "--in", in, "--out", out, "--eval"}),
                    Contains("--spec only"));
}

}  // namespace minidl
