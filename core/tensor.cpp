#include "core/tensor.h"

#include <cstring>
#include <sstream>

#include "core/allocator.h"
#include "core/autograd.h"
#include "core/checked_math.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/tensor_ops.h"

namespace minidl {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ")";
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  // A zero anywhere makes the count 0, whatever the other entries multiply to.
  for (int64_t d : s)
    if (d == 0) return 0;
  int64_t n = 1;
  for (int64_t d : s) n = checked_mul(n, d, "tensor element count");
  return n;
}

namespace {

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> st(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    st[i] = s;
    s = checked_mul(s, shape[i], "tensor strides");
  }
  return st;
}

// (H*W*C, 1, W*C, C) for a logical (N, C, H, W) shape, (D*H*W*C, 1, H*W*C, W*C, C) for
// (N, C, D, H, W): the channel innermost, then the spatial dimensions from the last.
std::vector<int64_t> channels_last_strides(const Shape& s) {
  std::vector<int64_t> st(s.size());
  int64_t inner = s[1];
  st[1] = 1;
  for (size_t i = s.size(); i-- > 2;) {
    st[i] = inner;
    inner = checked_mul(inner, s[i], "tensor strides");
  }
  st[0] = inner;
  return st;
}

// The rank a format needs (0: any).
size_t format_rank(MemoryFormat f) {
  return f == MemoryFormat::ChannelsLast ? 4 : f == MemoryFormat::ChannelsLast3d ? 5 : 0;
}

template <class T>
Tensor from_values(const std::vector<T>& values, const Shape& shape, Device device) {
  MINIDL_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "from_vector: ",
               values.size(), " values for shape ", shape_str(shape));
  Tensor t = Tensor::empty(shape, DTypeOf<T>::value, device);
  copy_bytes(t.raw_data(), device, values.data(), Device::cpu(), values.size() * sizeof(T));
  return t;
}

}  // namespace

const char* memory_format_name(MemoryFormat f) {
  return f == MemoryFormat::ChannelsLast     ? "channels_last"
         : f == MemoryFormat::ChannelsLast3d ? "channels_last_3d"
                                             : "contiguous";
}

MemoryFormat channels_last_for(int64_t dim) {
  return dim == 4 ? MemoryFormat::ChannelsLast : dim == 5 ? MemoryFormat::ChannelsLast3d : MemoryFormat::Contiguous;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, MemoryFormat format) {
  for (int64_t d : shape) MINIDL_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
  MINIDL_CHECK(format == MemoryFormat::Contiguous || shape.size() == format_rank(format), memory_format_name(format),
               " needs a ", format == MemoryFormat::ChannelsLast ? "4-d (N, C, H, W)" : "5-d (N, C, D, H, W)",
               " shape, got ", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  const int64_t bytes = checked_mul(shape_numel(shape), static_cast<int64_t>(dtype_size(dtype)), "tensor bytes");
  impl->storage = allocate(static_cast<size_t>(bytes), device);
  impl->shape = shape;
  impl->strides = format == MemoryFormat::Contiguous ? contiguous_strides(shape) : channels_last_strides(shape);
  impl->dtype = dtype;
  impl->device = device;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero_();
  return t;
}

Tensor Tensor::zeros_like(const Tensor& t) {
  Tensor z = empty_like(t);
  z.zero_();
  return z;
}

Tensor Tensor::full(const Shape& shape, float value, Device device) {
  Tensor t = empty(shape, DType::Float32, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& v, const Shape& s, Device d) { return from_values(v, s, d); }
Tensor Tensor::from_vector(const std::vector<int32_t>& v, const Shape& s, Device d) { return from_values(v, s, d); }
Tensor Tensor::from_vector(const std::vector<uint8_t>& v, const Shape& s, Device d) { return from_values(v, s, d); }
Tensor Tensor::from_vector(const std::vector<bf16>& v, const Shape& s, Device d) { return from_values(v, s, d); }
Tensor Tensor::from_vector(const std::vector<fp16>& v, const Shape& s, Device d) { return from_values(v, s, d); }

int64_t Tensor::size(int64_t d) const {
  const int64_t n = dim();
  if (d < 0) d += n;
  MINIDL_CHECK(d >= 0 && d < n, "dimension ", d, " out of range for a tensor of shape ", shape_str(shape()));
  return impl_->shape[static_cast<size_t>(d)];
}

bool Tensor::is_contiguous() const { return impl_->strides == contiguous_strides(impl_->shape); }

MemoryFormat Tensor::memory_format() const {
  if ((dim() == 4 || dim() == 5) && !is_contiguous() && impl_->strides == channels_last_strides(impl_->shape))
    return channels_last_for(dim());
  return MemoryFormat::Contiguous;
}

void* Tensor::raw_data() const {
  return static_cast<char*>(impl_->storage.get()) + impl_->offset * static_cast<int64_t>(dtype_size(impl_->dtype));
}

template <class T>
T* Tensor::data() const {
  MINIDL_CHECK(defined(), "data() of an undefined tensor");
  MINIDL_CHECK(dtype() == DTypeOf<T>::value, "tensor of dtype ", dtype_name(dtype()), " read as ",
               dtype_name(DTypeOf<T>::value));
  return static_cast<T*>(raw_data());
}
template float* Tensor::data<float>() const;
template int32_t* Tensor::data<int32_t>() const;
template uint8_t* Tensor::data<uint8_t>() const;
template bf16* Tensor::data<bf16>() const;
template fp16* Tensor::data<fp16>() const;

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  Tensor t = empty(shape(), dtype(), device, memory_format());
  copy_bytes(t.raw_data(), device, raw_data(), this->device(), nbytes());
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty_like(*this);
  copy_bytes(t.raw_data(), device(), raw_data(), device(), nbytes());
  return t;
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->shape = impl_->shape;
  impl->strides = impl_->strides;
  impl->offset = impl_->offset;
  impl->dtype = impl_->dtype;
  impl->device = impl_->device;
  return Tensor(std::move(impl));
}

Tensor Tensor::reshape(const Shape& new_shape) const {
  Shape s = new_shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      MINIDL_CHECK(infer < 0, "reshape to ", shape_str(new_shape), ": more than one -1");
      infer = static_cast<int64_t>(i);
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    MINIDL_CHECK(known > 0 && numel() % known == 0, "cannot reshape ", shape_str(shape()), " to ",
                 shape_str(new_shape));
    s[static_cast<size_t>(infer)] = numel() / known;
  }
  MINIDL_CHECK(shape_numel(s) == numel(), "cannot reshape ", shape_str(shape()), " (", numel(),
               " elements) to ", shape_str(new_shape));
  // Channels-last memory is in the shape's row-major order already when C or the spatial size is 1
  // (a global pool's (N, C, 1, 1)); otherwise the elements are reordered first (an autograd op).
  if (is_channels_last_format(memory_format()) && size(1) != 1 && numel() > 0 && numel() / size(0) != size(1))
    return contiguous().reshape(s);
  Tensor out = detach();
  out.impl_->shape = s;
  out.impl_->strides = contiguous_strides(s);
  if (autograd::needs_grad({*this})) {
    const Shape in_shape = shape();
    autograd::record(out, "reshape", {*this}, [in_shape](const Tensor& g) -> std::vector<Tensor> {
      return {g.reshape(in_shape)};
    });
  }
  return out;
}

void Tensor::copy_(const Tensor& src) {
  MINIDL_CHECK(src.shape() == shape() && src.dtype() == dtype(), "copy_: source ", src.str(),
               " does not match destination ", str());
  if (src.memory_format() != memory_format()) {
    const Tensor same_order = src.detach().to(device()).to(memory_format());
    copy_bytes(raw_data(), device(), same_order.raw_data(), device(), nbytes());
    return;
  }
  copy_bytes(raw_data(), device(), src.raw_data(), src.device(), nbytes());
}

void Tensor::fill_(float value) {
  MINIDL_CHECK(dtype() == DType::Float32, "fill_ needs a float32 tensor, got ", str());
  dispatch(
      device(), "fill", [&] { kernels::fill_cpu(data<float>(), value, numel()); },
      [&] { kernels::fill_cuda(data<float>(), value, numel()); });
}

void Tensor::zero_() {
  if (dtype() == DType::Float32) {
    fill_(0.f);
    return;
  }
  std::vector<uint8_t> zeros(nbytes(), 0);
  copy_bytes(raw_data(), device(), zeros.data(), Device::cpu(), nbytes());
}

template <class T>
std::vector<T> Tensor::values() const {
  MINIDL_CHECK(dtype() == DTypeOf<T>::value, "values<", dtype_name(DTypeOf<T>::value), "> of ", str());
  if (is_channels_last_format(memory_format())) return detach().contiguous().values<T>();
  std::vector<T> v(static_cast<size_t>(numel()));
  copy_bytes(v.data(), Device::cpu(), raw_data(), device(), nbytes());
  return v;
}
template std::vector<float> Tensor::values<float>() const;
template std::vector<int32_t> Tensor::values<int32_t>() const;
template std::vector<uint8_t> Tensor::values<uint8_t>() const;
template std::vector<bf16> Tensor::values<bf16>() const;
template std::vector<fp16> Tensor::values<fp16>() const;

std::vector<float> Tensor::to_vector() const {
  if (dtype() == DType::Float32) return values<float>();
  MINIDL_CHECK(is_floating(dtype()), "to_vector() needs a floating tensor, got ", str());
  return detach().cpu().to(DType::Float32).values<float>();
}

float Tensor::item() const {
  MINIDL_CHECK(numel() == 1, "item() of a tensor with ", numel(), " elements");
  return to_vector()[0];
}

Tensor& Tensor::set_requires_grad(bool on) {
  MINIDL_CHECK(!on || dtype() == DType::Float32, "only float32 tensors can require grad, got ", str());
  impl_->requires_grad = on;
  return *this;
}

void Tensor::backward() const {
  MINIDL_CHECK(numel() == 1, "backward() needs a one-element tensor (the loss), got ", str());
  autograd::backward(*this, Tensor::full(shape(), 1.f, device()));
}

std::string Tensor::str() const {
  if (!defined()) return "Tensor[undefined]";
  return minidl::str("Tensor[", dtype_name(dtype()), ", ", device().str(), ", ", shape_str(shape()),
                     is_channels_last_format(memory_format()) ? minidl::str(", ", memory_format_name(memory_format()), "]")
                                                              : std::string("]"));
}

void check_rank(const Tensor& t, int64_t rank, const std::string& what) {
  MINIDL_CHECK(t.defined(), what, ": input is undefined");
  MINIDL_CHECK(t.dtype() == DType::Float32, what, ": expects float32, got ", dtype_name(t.dtype()));
  MINIDL_CHECK(t.dim() == rank, what, ": expects a ", rank, "-d input, got shape ", shape_str(t.shape()));
}

void check_floating_rank(const Tensor& t, int64_t rank, const std::string& what) {
  MINIDL_CHECK(t.defined(), what, ": input is undefined");
  MINIDL_CHECK(is_floating(t.dtype()), what, ": expects float32, bfloat16 or float16, got ", dtype_name(t.dtype()));
  MINIDL_CHECK(t.dim() == rank, what, ": expects a ", rank, "-d input, got shape ", shape_str(t.shape()));
}

void check_same_device(const Tensor& a, const Tensor& b, const std::string& what) {
  MINIDL_CHECK(a.device() == b.device(), what, ": tensors on different devices (", a.device().str(),
               " and ", b.device().str(), ")");
}

}  // namespace minidl
