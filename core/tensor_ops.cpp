#include "core/tensor_ops.h"

#include "core/autograd.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/storage_rounding.h"

namespace minidl {

namespace {

void check_float_pair(const Tensor& a, const Tensor& b, const char* what) {
  MINIDL_CHECK(a.defined() && b.defined(), what, ": undefined tensor");
  MINIDL_CHECK(is_floating(a.dtype()) && a.dtype() == b.dtype(), what,
               ": expects two float32, bfloat16 or float16 tensors of one dtype, got ", a.str(), " and ", b.str());
  MINIDL_CHECK(a.shape() == b.shape(), what, ": shapes ", shape_str(a.shape()), " and ",
               shape_str(b.shape()), " differ");
  MINIDL_CHECK(a.memory_format() == b.memory_format(), what, ": memory formats ", memory_format_name(a.memory_format()),
               " and ", memory_format_name(b.memory_format()), " differ");
  check_same_device(a, b, what);
}

// y = a*x + b*z on the tensors' device (z may be null when b == 0). The CPU takes float32 only
// (its callers widen half tensors first).
void axpby(Tensor& y, float a, const Tensor& x, float b, const Tensor* z) {
  dispatch(
      y.device(), "axpby",
      [&] {
        kernels::axpby_cpu(y.data<float>(), a, x.data<float>(), b, z ? z->data<float>() : nullptr, y.numel());
      },
      [&] {
        kernels::axpby_cuda(y.dtype(), y.raw_data(), a, x.raw_data(), b, z ? z->raw_data() : nullptr, y.numel());
      });
}

#ifdef MINIDL_WITH_CUDA
// f + h on the GPU in one pass, h widened as it is read: the bits of add(f, as_float32(h)) without
// the float32 copy of h (a transformer's residual adds, a float32 stream plus a half branch,
// move 5/9 of the bytes). h's gradient is the float32 one rounded to its type, as the cast's.
Tensor add_float_and_half_cuda(const Tensor& f, const Tensor& h) {
  Tensor y = Tensor::empty_like(f);
  kernels::add_float_and_half_cuda(y.data<float>(), f.data<float>(), h.dtype(), h.raw_data(), y.numel());
  if (autograd::needs_grad({f, h})) {
    const DType t = h.dtype();
    autograd::record(y, "add", {f, h}, [t](const Tensor& g) -> std::vector<Tensor> { return {g, g.to(t)}; });
  }
  return y;
}
#endif

}  // namespace

namespace kernels {

void fill_cpu(float* y, float v, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) y[i] = v;
}

void axpby_cpu(float* y, float a, const float* x, float b, const float* z, int64_t n) {
  if (z) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) y[i] = a * x[i] + b * z[i];
  } else {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) y[i] = a * x[i];
  }
}

}  // namespace kernels

Tensor add(const Tensor& a, const Tensor& b) {
  // Two memory formats meet: the sum takes a's (b is reordered; its gradient goes back through the
  // reordering).
  if (a.defined() && b.defined() && a.memory_format() != b.memory_format() && a.shape() == b.shape())
    return add(a, b.to(a.memory_format()));
  if (holds_half(a) || holds_half(b)) {
    // Two types meet: float32 wins (PyTorch's promotion; bfloat16 + float16 is float32 too).
    if (a.dtype() != b.dtype()) {
#ifdef MINIDL_WITH_CUDA
      const bool one_float = a.dtype() == DType::Float32 || b.dtype() == DType::Float32;
      if (one_float && a.is_cuda() && b.is_cuda() && a.shape() == b.shape() && a.memory_format() == b.memory_format())
        return add_float_and_half_cuda(a.dtype() == DType::Float32 ? a : b, a.dtype() == DType::Float32 ? b : a);
#endif
      return add(as_float32(a), as_float32(b));
    }
    // The GPU adds half tensors in their storage type (elementwise.cuh); the CPU widens them.
    if (!a.is_cuda()) return add(as_float32(a), as_float32(b)).to(a.dtype());
  }
  check_float_pair(a, b, "add");
  Tensor y = Tensor::empty_like(a);
  axpby(y, 1.f, a, 1.f, &b);
  if (autograd::needs_grad({a, b})) {
    autograd::record(y, "add", {a, b}, [](const Tensor& g) -> std::vector<Tensor> { return {g, g}; });
  }
  return y;
}

Tensor mul(const Tensor& x, float s) {
  if (holds_half(x) && !x.is_cuda()) return mul(as_float32(x), s).to(x.dtype());
  MINIDL_CHECK(x.defined() && is_floating(x.dtype()), "mul: expects a float32, bfloat16 or float16 tensor, got ",
               x.str());
  Tensor y = Tensor::empty_like(x);
  axpby(y, s, x, 0.f, nullptr);
  if (autograd::needs_grad({x})) {
    autograd::record(y, "mul", {x}, [s](const Tensor& g) -> std::vector<Tensor> { return {mul(g, s)}; });
  }
  return y;
}

void axpy_(Tensor& dst, float alpha, const Tensor& src) {
  if (dst.defined() && src.defined() && src.memory_format() != dst.memory_format() && dst.shape() == src.shape())
    return axpy_(dst, alpha, src.detach().to(dst.memory_format()));
  check_float_pair(dst, src, "axpy_");
  MINIDL_CHECK(dst.dtype() == DType::Float32, "axpy_: accumulates float32 tensors only, got ", dst.str());
  axpby(dst, alpha, src, 1.f, &dst);
}

}  // namespace minidl
