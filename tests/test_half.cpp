// bfloat16 and float16: the conversions of core/half_types.h (exhaustive over all 65536 patterns
// one way, against a float64 reference with explicit round-to-nearest-even the other way, on
// ties, subnormals, the largest finite values, inf and NaN), Tensor::to(DType) and what a half
// tensor does elsewhere (values, printing, autograd; the layers are in test_low_precision.cpp), the CUDA
// conversion against the CPU bits, and safetensors files against PyTorch's (run by
// scripts/gpu/half_safetensors.sh).
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>

#include "core/autograd.h"
#include "core/cast_kernels.h"
#include "core/error.h"
#include "core/half_types.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "core/tensor_ops.h"
#include "test_util.h"

using namespace minidl;
using Catch::Matchers::Contains;

namespace {

// A binary floating-point format of 16 bits: bf16 = {8, 7}, fp16 = {5, 10}.
struct Format {
  const char* name;
  int exp_bits, man_bits;
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  uint32_t inf() const { return ((1u << exp_bits) - 1) << man_bits; }
  uint32_t quiet() const { return 1u << (man_bits - 1); }
  uint32_t sign() const { return 1u << 15; }
};
constexpr Format kBf16{"bfloat16", 8, 7};
constexpr Format kFp16{"float16", 5, 10};

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The value of a 16-bit pattern, in float64 from the format's definition.
double reference_value(const Format& f, uint32_t h) {
  const double s = (h & f.sign()) ? -1.0 : 1.0;
  const uint32_t e = (h >> f.man_bits) & ((1u << f.exp_bits) - 1), m = h & ((1u << f.man_bits) - 1);
  if (e == (1u << f.exp_bits) - 1) return m ? std::numeric_limits<double>::quiet_NaN() : s * INFINITY;
  if (e == 0) return s * std::ldexp(m, 1 - f.bias() - f.man_bits);
  return s * std::ldexp(static_cast<double>((1u << f.man_bits) | m), static_cast<int>(e) - f.bias() - f.man_bits);
}

// The pattern a non-NaN float must round to, in float64: divide by the quantum of its binade
// (exact: a power of two), round to an integer with nearbyint (ties to even in the default
// rounding mode), and encode. With the implicit bit inside r, ((e + bias - 1) << man) + r is
// the encoding for normals and subnormals alike, a carry moves into the exponent, and anything
// at or past the infinity pattern is inf.
uint32_t reference_round(const Format& f, float x) {
  const uint32_t sign = std::signbit(x) ? f.sign() : 0;
  const double d = std::fabs(static_cast<double>(x));
  if (std::isinf(d)) return sign | f.inf();
  if (d == 0) return sign;
  const int emin = 1 - f.bias();
  const int e = std::max(std::ilogb(d), emin);
  const double r = std::nearbyint(d / std::ldexp(1.0, e - f.man_bits));
  const double code = std::ldexp(static_cast<double>(e + f.bias() - 1), f.man_bits) + r;
  return sign | (code >= f.inf() ? f.inf() : static_cast<uint32_t>(code));
}

// True when x lies exactly halfway between two neighbours of the format (a rounding tie).
bool is_tie(const Format& f, float x) {
  const double d = std::fabs(static_cast<double>(x));
  if (!std::isfinite(d) || d == 0) return false;
  const int e = std::max(std::ilogb(d), 1 - f.bias());
  const double r = d / std::ldexp(1.0, e - f.man_bits);
  return r - std::floor(r) == 0.5;
}

uint32_t convert(const Format& f, float x) { return &f == &kBf16 ? to_bf16(x).bits : to_fp16(x).bits; }
float widen(const Format& f, uint32_t h) {
  return &f == &kBf16 ? to_float(bf16{static_cast<uint16_t>(h)}) : to_float(fp16{static_cast<uint16_t>(h)});
}
bool is_nan_pattern(const Format& f, uint32_t h) { return (h & 0x7fffu) > f.inf(); }

// Floats that probe every rounding decision of both formats.
std::vector<float> probe_floats() {
  std::vector<float> v;
  // Every bf16 neighbourhood: the 16 dropped bits at 0, just above 0, just below and at the tie,
  // just above it, and all ones (every sign, exponent and kept mantissa).
  for (uint32_t hi = 0; hi < 65536; ++hi)
    for (uint32_t lo : {0x0u, 0x1u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) v.push_back(float_of(hi << 16 | lo));
  // Every fp16-normal neighbourhood: 13 dropped bits around the tie, for every sign, exponent and
  // 10 kept mantissa bits of float32.
  for (uint32_t hi = 0; hi < (1u << 19); ++hi)
    for (uint32_t lo : {0x0u, 0x1u, 0xfffu, 0x1000u, 0x1001u, 0x1fffu}) v.push_back(float_of(hi << 13 | lo));
  // fp16 subnormal ties sit at other bit positions: every midpoint between consecutive
  // non-negative fp16 values (exact in float32) and its float32 neighbours, both signs.
  for (uint32_t h = 0; h < 0x7c00u; ++h) {
    const float mid = static_cast<float>((reference_value(kFp16, h) + reference_value(kFp16, h + 1)) / 2);
    for (float m : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, INFINITY)}) {
      v.push_back(m);
      v.push_back(-m);
    }
  }
  // Random patterns.
  for (uint64_t i = 0; i < (1u << 20); ++i) v.push_back(float_of(philox(9, kStreamTest, i).v[0]));
  // The named edges (most are in the sets above already; here so that they are certain).
  for (float s : {1.f, -1.f})
    for (float x : {0.f, INFINITY, FLT_MAX, FLT_MIN, FLT_TRUE_MIN, 65504.f, std::nextafter(65520.f, 0.f), 65520.f,
                    std::nextafter(65520.f, INFINITY), 65536.f, std::ldexp(1.f, -14), std::ldexp(1.f, -24),
                    std::ldexp(1.f, -25), std::nextafter(std::ldexp(1.f, -25), 0.f),
                    std::nextafter(std::ldexp(1.f, -25), 1.f), float_of(0x7f7f7fffu), float_of(0x7f7f8000u)})
      v.push_back(s * x);
  return v;
}

std::vector<uint16_t> all_patterns() {
  std::vector<uint16_t> h(65536);
  for (uint32_t i = 0; i < 65536; ++i) h[i] = static_cast<uint16_t>(i);
  return h;
}

template <class H>
std::vector<H> as_half(const std::vector<uint16_t>& bits) {
  std::vector<H> v(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) v[i].bits = bits[i];
  return v;
}

template <class H>
std::vector<uint16_t> bits_of_halves(const std::vector<H>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = v[i].bits;
  return b;
}

std::vector<uint16_t> half_bits(const Tensor& t) {
  return t.dtype() == DType::BFloat16 ? bits_of_halves(t.values<bf16>()) : bits_of_halves(t.values<fp16>());
}

std::vector<uint32_t> float_bits_of(const Tensor& t) {
  const std::vector<float> f = t.values<float>();
  std::vector<uint32_t> b(f.size());
  for (size_t i = 0; i < f.size(); ++i) b[i] = bits_of(f[i]);
  return b;
}

Tensor all_patterns_tensor(DType dtype, Device device = Device::cpu()) {
  return dtype == DType::BFloat16 ? Tensor::from_vector(as_half<bf16>(all_patterns()), {65536}, device)
                                  : Tensor::from_vector(as_half<fp16>(all_patterns()), {65536}, device);
}

}  // namespace

TEST_CASE("half -> float is exact on all 65536 patterns of both formats", "[half]") {
  for (const Format* f : {&kBf16, &kFp16}) {
    INFO(f->name);
    for (uint32_t h = 0; h < 65536; ++h) {
      INFO("pattern 0x" << std::hex << h);
      const float x = widen(*f, h);
      const double want = reference_value(*f, h);
      if (is_nan_pattern(*f, h)) {
        // A NaN keeps its sign and its whole payload, moved to the top of float32's mantissa.
        const uint32_t payload = h & ((1u << f->man_bits) - 1);
        REQUIRE(bits_of(x) == ((h & 0x8000u) << 16 | 0x7f800000u | payload << (23 - f->man_bits)));
      } else {
        REQUIRE(static_cast<double>(x) == want);
        REQUIRE(std::signbit(x) == bool(h & 0x8000u));  // -0 stays -0
      }
    }
  }
}

TEST_CASE("half -> float -> half is the identity on all 65536 patterns (signalling NaNs come back quiet)",
          "[half]") {
  for (const Format* f : {&kBf16, &kFp16}) {
    INFO(f->name);
    int nans = 0;
    for (uint32_t h = 0; h < 65536; ++h) {
      INFO("pattern 0x" << std::hex << h);
      const uint32_t back = convert(*f, widen(*f, h));
      if (is_nan_pattern(*f, h)) {
        ++nans;
        REQUIRE(back == (h | f->quiet()));
      } else {
        REQUIRE(back == h);
      }
    }
    // 2 signs x (2^man - 1) non-zero mantissas under the all-ones exponent.
    REQUIRE(nans == 2 * ((1 << f->man_bits) - 1));
  }
}

TEST_CASE("float -> half rounds to nearest even like a float64 reference", "[half]") {
  const std::vector<float> probes = probe_floats();
  for (const Format* f : {&kBf16, &kFp16}) {
    INFO(f->name);
    int64_t ties = 0;
    for (float x : probes) {
      if (std::isnan(x)) continue;
      const uint32_t got = convert(*f, x), want = reference_round(*f, x);
      if (got != want) {
        INFO("float " << x << " (0x" << std::hex << bits_of(x) << "): got 0x" << got << ", want 0x" << want);
        REQUIRE(got == want);
      }
      ties += is_tie(*f, x);  // counted, to be sure the probes reach them
    }
    CHECK(ties > 10000);
  }
  // The edges by name.
  CHECK(to_fp16(65504.f).bits == 0x7bff);
  CHECK(to_fp16(std::nextafter(65520.f, 0.f)).bits == 0x7bff);  // just below the midpoint
  CHECK(to_fp16(65520.f).bits == 0x7c00);                        // the tie goes to even: inf
  CHECK(to_fp16(-1e30f).bits == 0xfc00);
  CHECK(to_fp16(std::ldexp(1.f, -24)).bits == 0x0001);           // smallest subnormal
  CHECK(to_fp16(std::ldexp(1.f, -25)).bits == 0x0000);           // tie with 0: even
  CHECK(to_fp16(std::ldexp(3.f, -25)).bits == 0x0002);           // tie between 1 and 2 units: even
  CHECK(to_fp16(std::nextafter(std::ldexp(1.f, -25), 1.f)).bits == 0x0001);
  CHECK(to_fp16(-0.f).bits == 0x8000);
  CHECK(to_bf16(FLT_MAX).bits == 0x7f80);                        // past bf16's largest finite value
  CHECK(to_bf16(float_of(0x7f7f7fffu)).bits == 0x7f7f);          // largest that stays finite
  CHECK(to_bf16(float_of(0x7f7f8000u)).bits == 0x7f80);          // tie, odd below: up to inf
  CHECK(to_bf16(1.f + std::ldexp(1.f, -8)).bits == 0x3f80);      // tie, even below: down
  CHECK(to_bf16(FLT_TRUE_MIN).bits == 0x0000);
  CHECK(to_bf16(-INFINITY).bits == 0xff80);
}

TEST_CASE("float -> half keeps NaN a NaN: sign, quiet bit, top payload bits", "[half]") {
  for (uint32_t payload : {0x1u, 0x2000u, 0x400000u, 0x7fffffu, 0x12345u, 0x3fffffu}) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const float x = float_of(sign | 0x7f800000u | payload);
      INFO("NaN 0x" << std::hex << bits_of(x));
      for (const Format* f : {&kBf16, &kFp16}) {
        const uint32_t h = convert(*f, x);
        REQUIRE(is_nan_pattern(*f, h));
        REQUIRE(bool(h & 0x8000u) == bool(sign));
        REQUIRE((h & f->quiet()) != 0);
        const uint32_t kept = (payload >> (23 - f->man_bits)) | f->quiet();
        REQUIRE((h & ((1u << f->man_bits) - 1)) == kept);
      }
    }
  }
}

TEST_CASE("Tensor::to(dtype) converts between float32, bfloat16 and float16", "[half]") {
  const std::vector<float> x = {1.f, -2.5f, 1.f + std::ldexp(1.f, -9), 70000.f, std::ldexp(1.f, -30), -0.f, NAN};
  const Tensor t = Tensor::from_vector(x, {7});
  REQUIRE(t.to(DType::Float32).same(t));  // already that dtype: the same tensor
  for (DType d : {DType::BFloat16, DType::Float16}) {
    INFO(dtype_name(d));
    const Tensor h = t.to(d);
    CHECK(h.dtype() == d);
    CHECK(h.shape() == Shape{7});
    CHECK(h.nbytes() == 14);
    CHECK(h.str() == minidl::str("Tensor[", dtype_name(d), ", cpu, (7)]"));
    const std::vector<uint16_t> bits = half_bits(h);
    for (size_t i = 0; i < x.size(); ++i)
      CHECK(bits[i] == (d == DType::BFloat16 ? to_bf16(x[i]).bits : to_fp16(x[i]).bits));
    // to_vector() gives the float values of the stored halves.
    const std::vector<float> back = h.to_vector();
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = d == DType::BFloat16 ? to_float(to_bf16(x[i])) : to_float(to_fp16(x[i]));
      CHECK(bits_of(back[i]) == bits_of(want));
    }
    CHECK(float_bits_of(h.to(DType::Float32)) == float_bits_of(Tensor::from_vector(back, {7})));
    CHECK(h.reshape({7, 1}).clone().to_vector().size() == 7);
  }
  // bf16 <-> fp16 rounds once, through the exact float32 value.
  const Tensor hb = all_patterns_tensor(DType::BFloat16), hf = all_patterns_tensor(DType::Float16);
  const std::vector<uint16_t> b2f = half_bits(hb.to(DType::Float16)), f2b = half_bits(hf.to(DType::BFloat16));
  for (uint32_t i = 0; i < 65536; ++i) {
    INFO("pattern 0x" << std::hex << i);
    const float vb = to_float(bf16{static_cast<uint16_t>(i)}), vf = to_float(fp16{static_cast<uint16_t>(i)});
    if (!std::isnan(vb)) REQUIRE(b2f[i] == reference_round(kFp16, vb));
    if (!std::isnan(vf)) REQUIRE(f2b[i] == reference_round(kBf16, vf));
  }
  CHECK(Tensor::zeros({3}, DType::Float16).to_vector() == std::vector<float>(3, 0.f));
  CHECK(t.to(DType::BFloat16).reshape({7, 1}).dim() == 2);
  CHECK_THROWS_WITH(Tensor::zeros({2}, DType::Int32).to(DType::BFloat16),
                    Contains("to(bfloat16) of Tensor[int32") && Contains("between int32 and float32"));
  CHECK_THROWS_WITH(t.to(DType::UInt8), Contains("to(uint8)"));
  CHECK_THROWS_WITH(Tensor::zeros({2}, DType::UInt8).to_vector(), Contains("floating tensor"));
  CHECK_THROWS_WITH(t.to(DType::BFloat16).data<float>(), Contains("bfloat16 read as float32"));
  CHECK_THROWS_WITH(t.values<bf16>(), Contains("values<bfloat16>"));
}

TEST_CASE("Tensor::to(dtype) converts int32 to float32 and back, on the CPU and the GPU", "[half]") {
  const int32_t big = (1 << 24) + 1;  // rounds to 2^24 in float32 (nearest even)
  const Tensor i = Tensor::from_vector(std::vector<int32_t>{0, -7, 1 << 24, big, 2147483520}, {5});
  const std::vector<float> fx = {2.7f, -2.7f, 0.5f, -0.f, 16777216.f};
  const Tensor f = Tensor::from_vector(fx, {5});
  std::vector<Device> devices{Device::cpu()};
  if (cuda_available()) devices.push_back(Device::cuda());
  for (const Device d : devices) {
    INFO(d.str());
    const Tensor as_float = i.to(d).to(DType::Float32);
    CHECK(as_float.dtype() == DType::Float32);
    CHECK(as_float.cpu().to_vector() == std::vector<float>{0.f, -7.f, 16777216.f, 16777216.f, 2147483520.f});
    // Truncation toward zero, as C++ and PyTorch convert.
    CHECK(f.to(d).to(DType::Int32).cpu().values<int32_t>() == std::vector<int32_t>{2, -2, 0, 0, 1 << 24});
  }
  CHECK_THROWS_WITH(i.to(DType::Float16), Contains("to(float16) of Tensor[int32"));
  CHECK_THROWS_WITH(f.to(DType::BFloat16).to(DType::Int32), Contains("to(int32) of Tensor[bfloat16"));
}

TEST_CASE("gradients flow through to(dtype), rounded as the forward pass rounds", "[half][autograd]") {
  Tensor x = Tensor::from_vector(std::vector<float>{1.f, 2.f, 3.f}, {3});
  x.set_requires_grad(true);
  const Tensor y = mul(x.to(DType::BFloat16).to(DType::Float32), 2.f);
  REQUIRE(y.requires_grad());
  // dy/dx = 2 * g, and the gradient crosses the bf16 tensor as bf16: 2 + 2^-8 rounds to 2.
  const float g = 1.f + std::ldexp(1.f, -9);
  autograd::backward(y, Tensor::from_vector(std::vector<float>{g, g, 0.5f}, {3}));
  REQUIRE(x.grad().dtype() == DType::Float32);
  REQUIRE(x.grad().to_vector() == std::vector<float>{2.f, 2.f, 1.f});
  REQUIRE_THROWS_WITH(Tensor::zeros({2}, DType::Float16).set_requires_grad(true),
                      Contains("only float32 tensors can require grad") && Contains("float16"));
}

TEST_CASE("fill_ refuses a half tensor, naming its dtype", "[half]") {
  for (DType d : {DType::BFloat16, DType::Float16})
    CHECK_THROWS_WITH(Tensor::zeros({2}, d).fill_(1.f), Contains(dtype_name(d)));
}

TEST_CASE("CUDA to(dtype) gives the CPU's bits", "[half][cuda]") {
  MINIDL_REQUIRE_CUDA();
  const Device gpu = Device::cuda();
  // Widening: all 65536 patterns of both formats.
  for (DType d : {DType::BFloat16, DType::Float16}) {
    INFO(dtype_name(d));
    const Tensor h = all_patterns_tensor(d);
    const Tensor on_gpu = h.to(gpu).to(DType::Float32);
    REQUIRE(on_gpu.is_cuda());
    REQUIRE(float_bits_of(on_gpu.cpu()) == float_bits_of(h.to(DType::Float32)));
    // And across: bf16 <-> fp16.
    const DType other = d == DType::BFloat16 ? DType::Float16 : DType::BFloat16;
    REQUIRE(half_bits(h.to(gpu).to(other).cpu()) == half_bits(h.to(other)));
  }
  // Narrowing: every probe, NaNs included.
  std::vector<float> probes = probe_floats();
  for (uint32_t payload : {0x1u, 0x400000u, 0x12345u}) probes.push_back(float_of(0xff800000u | payload));
  const Tensor x = Tensor::from_vector(probes, {static_cast<int64_t>(probes.size())});
  for (DType d : {DType::BFloat16, DType::Float16}) {
    INFO(dtype_name(d));
    const std::vector<uint16_t> cpu = half_bits(x.to(d)), gpu_bits = half_bits(x.to(gpu).to(d).cpu());
    REQUIRE(cpu.size() == gpu_bits.size());
    for (size_t i = 0; i < cpu.size(); ++i) {
      if (cpu[i] != gpu_bits[i]) {
        INFO("element " << i << ": float 0x" << std::hex << bits_of(probes[i]) << ", CPU 0x" << cpu[i] << ", CUDA 0x"
                        << gpu_bits[i]);
        REQUIRE(cpu[i] == gpu_bits[i]);
      }
    }
  }
}

TEST_CASE("bf16 and fp16 safetensors agree with PyTorch's bits both ways (MINIDL_TORCH_HALVES)", "[half][torch]") {
  // scripts/gpu/half_safetensors.sh: PyTorch writes DIR/torch_halves.safetensors (float32
  // "source" and its own .to(bfloat16) / .to(float16)); this test checks that minidl reads those
  // bytes as the same values and rounds the source to the same bits, and writes
  // DIR/minidl_halves.safetensors, which the script then loads in PyTorch.
  const char* dir = std::getenv("MINIDL_TORCH_HALVES");
  if (!dir || !*dir) {
    WARN("SKIPPED: MINIDL_TORCH_HALVES is not set (scripts/gpu/half_safetensors.sh sets it)");
    ++test::skipped_count();
    return;
  }
  const std::string torch_file = std::string(dir) + "/torch_halves.safetensors";
  const SafeTensors st = load_safetensors(torch_file);
  const Tensor source = find_tensor(st, "source", torch_file);
  REQUIRE(source.dtype() == DType::Float32);
  for (const auto& [name, dtype] : {std::pair{"bf16", DType::BFloat16}, std::pair{"f16", DType::Float16}}) {
    INFO(name);
    const Tensor theirs = find_tensor(st, name, torch_file);
    REQUIRE(theirs.dtype() == dtype);
    const std::vector<uint16_t> want = half_bits(theirs), got = half_bits(source.to(dtype));
    const std::vector<float> src = source.values<float>();
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] != want[i]) {
        INFO("element " << i << ": float 0x" << std::hex << bits_of(src[i]) << ", PyTorch 0x" << want[i]
                        << ", minidl 0x" << got[i]);
        REQUIRE(got[i] == want[i]);
      }
    }
  }
  save_safetensors(std::string(dir) + "/minidl_halves.safetensors",
                   {{"source", source}, {"bf16", source.to(DType::BFloat16)}, {"f16", source.to(DType::Float16)}});
}

TEST_CASE("float32 + half on CUDA: one pass with the bits and gradients of widening first", "[half][cuda]") {
  MINIDL_REQUIRE_CUDA();
  for (DType t : {DType::BFloat16, DType::Float16})
    for (MemoryFormat f : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      auto run = [&](bool widen_first) {
        Tensor a = test::random_tensor({3, 5, 7, 9}, 71, -3.f, 3.f, Device::cuda()).to(f);
        Tensor b = test::random_tensor({3, 5, 7, 9}, 72, -3.f, 3.f, Device::cuda()).to(t).to(DType::Float32).to(f);
        a.set_requires_grad(true);
        b.set_requires_grad(true);
        const Tensor h = b.to(t);
        // half + float32 (either order) takes the one-pass kernel; widened by hand it does not.
        const Tensor y = widen_first ? add(h.to(DType::Float32), a) : add(h, a);
        REQUIRE(y.dtype() == DType::Float32);
        REQUIRE(y.memory_format() == f);
        autograd::backward(y, test::random_tensor({3, 5, 7, 9}, 73, -1.f, 1.f, Device::cuda()).to(f));
        return std::vector<std::vector<float>>{y.to_vector(), a.grad().to_vector(), b.grad().to_vector()};
      };
      CHECK(run(false) == run(true));
    }
}
