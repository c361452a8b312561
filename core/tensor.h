// Tensor: a cheap handle (shared_ptr) to a TensorImpl that holds shared storage plus shape,
// strides, offset, dtype and device, and the autograd fields (requires_grad, grad, grad_fn).
// Copying a Tensor shares everything; clone() copies the data. Views share storage through
// reshape(), the only view op. A tensor's elements lie in one of two orders (MemoryFormat): the
// row-major order of its shape, or, for a 4-d (N, C, H, W) or 5-d (N, C, D, H, W) tensor,
// channels-last.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"

namespace minidl {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);

namespace autograd {
struct Node;
}

// How the elements of a tensor lie in memory. The shape is always the logical one, (N, C, H, W)
// for images, as in PyTorch:
//   Contiguous    row-major in the shape's order (NCHW), strides (C*H*W, H*W, W, 1);
//   ChannelsLast  4-d only: NHWC, strides (H*W*C, 1, W*C, C) (torch.channels_last). cuDNN's
//                 tensor-core convolutions want this order, and elementwise ops do not care.
//   ChannelsLast3d  5-d only: NDHWC, strides (D*H*W*C, 1, H*W*C, W*C, C)
//                 (torch.channels_last_3d), the same order for volumes.
// Ops that read a layout (convolution, normalization, pooling) say which formats they take;
// elementwise ops keep their input's format (empty_like), and reshape() of a channels-last
// tensor reorders to the shape's row-major order first, as PyTorch's does.
enum class MemoryFormat : unsigned char { Contiguous, ChannelsLast, ChannelsLast3d };
const char* memory_format_name(MemoryFormat f);  // "contiguous", "channels_last", "channels_last_3d"
// The channels-last format of a tensor of rank `dim` (ChannelsLast for 4, ChannelsLast3d for 5),
// Contiguous for other ranks: what a run's "channels_last" gives its images or volumes.
MemoryFormat channels_last_for(int64_t dim);
// True for ChannelsLast and ChannelsLast3d: the channels are the innermost dimension.
inline bool is_channels_last_format(MemoryFormat f) { return f != MemoryFormat::Contiguous; }

struct TensorImpl {
  std::shared_ptr<void> storage;  // owns the bytes (host or device)
  Shape shape;
  std::vector<int64_t> strides;   // in elements
  int64_t offset = 0;             // in elements
  DType dtype = DType::Float32;
  Device device;
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;              // accumulated gradient (leaves)
  std::shared_ptr<autograd::Node> grad_fn;       // the op that made this tensor (non-leaves)
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Factories. Contents of empty() are undefined.
  static Tensor empty(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu(),
                      MemoryFormat format = MemoryFormat::Contiguous);
  static Tensor zeros(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, float value, Device device = Device::cpu());
  static Tensor from_vector(const std::vector<float>& values, const Shape& shape, Device device = Device::cpu());
  static Tensor from_vector(const std::vector<int32_t>& values, const Shape& shape, Device device = Device::cpu());
  static Tensor from_vector(const std::vector<uint8_t>& values, const Shape& shape, Device device = Device::cpu());
  static Tensor from_vector(const std::vector<bf16>& values, const Shape& shape, Device device = Device::cpu());
  static Tensor from_vector(const std::vector<fp16>& values, const Shape& shape, Device device = Device::cpu());
  // Same shape, dtype, device and memory format as t.
  static Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.dtype(), t.device(), t.memory_format()); }
  static Tensor zeros_like(const Tensor& t);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl_->shape; }
  int64_t dim() const { return static_cast<int64_t>(impl_->shape.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return shape_numel(impl_->shape); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }
  const std::vector<int64_t>& strides() const { return impl_->strides; }
  int64_t offset() const { return impl_->offset; }
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->device; }
  bool is_cuda() const { return impl_->device.is_cuda(); }
  bool is_contiguous() const;
  // ChannelsLast for a 4-d NHWC tensor, ChannelsLast3d for a 5-d NDHWC one, else Contiguous.
  MemoryFormat memory_format() const;
  bool is_channels_last() const { return memory_format() == MemoryFormat::ChannelsLast; }
  bool is_channels_last_3d() const { return memory_format() == MemoryFormat::ChannelsLast3d; }

  // Typed pointer to the first element (checks the dtype).
  template <class T> T* data() const;
  void* raw_data() const;

  Tensor to(Device device) const;  // same tensor when already there
  // A copy converted to another floating dtype (float32, bfloat16, float16) on the same device,
  // rounded to nearest even (core/half_types.h), or between int32 and float32 (float32 -> int32
  // truncates toward zero, as PyTorch does); the same tensor when already of that dtype.
  // Gradients flow through a floating conversion (cast back to this tensor's dtype), as with
  // PyTorch's .to(dtype).
  Tensor to(DType dtype) const;
  // A copy in another memory format (the same tensor when already in it); with a dtype too, the
  // conversion and the reordering are one pass (core/layout.cpp). Gradients flow back through
  // the inverse reordering, as with PyTorch's .to(memory_format=...).
  Tensor to(MemoryFormat format) const { return to(dtype(), format); }
  Tensor to(DType dtype, MemoryFormat format) const;
  Tensor contiguous() const { return to(MemoryFormat::Contiguous); }
  Tensor cpu() const { return to(Device::cpu()); }
  Tensor clone() const;            // new storage, same values, no autograd history
  Tensor detach() const;           // shares storage, no autograd history
  // A view with a new shape over the same storage (contiguous tensors only; one -1 allowed).
  // Gradients flow through it.
  Tensor reshape(const Shape& shape) const;

  void copy_(const Tensor& src);   // same shape and dtype, any devices and memory formats
  void fill_(float value);
  void zero_();
  // The elements on the host in the shape's row-major order (NCHW for a channels-last tensor too).
  std::vector<float> to_vector() const;  // float values (of float32, bfloat16, float16)
  template <class T> std::vector<T> values() const;  // the elements as stored type T
  float item() const;                    // one-element floating tensor

  // Autograd.
  bool requires_grad() const { return impl_->requires_grad; }
  Tensor& set_requires_grad(bool on);
  Tensor grad() const { return Tensor(impl_->grad); }
  void set_grad(const Tensor& g) { impl_->grad = g.impl_; }
  const std::shared_ptr<autograd::Node>& grad_fn() const { return impl_->grad_fn; }
  bool is_leaf() const { return impl_->grad_fn == nullptr; }
  void backward() const;  // from a one-element tensor; seeds with 1

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }
  std::string str() const;  // "Tensor[float32, cuda:0, (2, 3)]", ", channels_last" when it is

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// Errors out naming `what` unless t is a defined float32 tensor of the given rank.
void check_rank(const Tensor& t, int64_t rank, const std::string& what);
// The same for a tensor of any floating dtype (float32, bfloat16, float16).
void check_floating_rank(const Tensor& t, int64_t rank, const std::string& what);
void check_same_device(const Tensor& a, const Tensor& b, const std::string& what);

}  // namespace minidl
