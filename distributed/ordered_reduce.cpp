#include "distributed/ordered_reduce.h"

#include <algorithm>
#include <memory>

#include "core/allocator.h"
#include "core/error.h"
#include "core/tensor_ops.h"

namespace minidl {

Tensor flat_slice(const Tensor& flat, int64_t offset, int64_t n) {
  MINIDL_CHECK(flat.defined() && flat.dtype() == DType::Float32 && flat.is_contiguous() && offset >= 0 && n > 0 &&
                   offset + n <= flat.numel(),
               "flat_slice: ", n, " elements at ", offset, " are not inside ",
               flat.defined() ? flat.str() : std::string("none"));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = flat.impl()->storage;
  impl->shape = {n};
  impl->strides = {1};
  impl->offset = flat.offset() + offset;
  impl->dtype = DType::Float32;
  impl->device = flat.device();
  return Tensor(impl);
}

OrderedSumBuffers::OrderedSumBuffers(int64_t world, int64_t count_, int64_t n_, Device device)
    : count(count_), n(n_), shard((n_ + world - 1) / world) {
  // The tail of the last shard past n stays zero: the copies below never write it.
  send = Tensor::zeros({world * count * shard}, DType::Float32, device);
  recv = Tensor::empty({world * count * shard}, DType::Float32, device);
  sum = Tensor::empty({shard}, DType::Float32, device);
  gathered = Tensor::empty({world * shard}, DType::Float32, device);
}

Tensor ordered_sum(Communicator& comm, const Tensor& local) {
  MINIDL_CHECK(local.defined() && local.dim() == 2, "ordered_sum: expected (L, n) float32 vectors, got ",
               local.defined() ? local.str() : std::string("none"));
  OrderedSumBuffers buffers(comm.world_size(), local.size(0), local.size(1), local.device());
  return ordered_sum(comm, local, buffers);
}

Tensor ordered_sum(Communicator& comm, const Tensor& local, OrderedSumBuffers& buffers) {
  MINIDL_CHECK(local.defined() && local.dim() == 2 && local.dtype() == DType::Float32 && local.is_contiguous() &&
                   local.numel() > 0,
               "ordered_sum: expected (L, n) float32 vectors, got ", local.defined() ? local.str() : std::string("none"));
  MINIDL_ASSERT(local.size(0) == buffers.count && local.size(1) == buffers.n && local.device() == buffers.send.device());
  const int64_t world = comm.world_size();
  const int64_t count = buffers.count, n = buffers.n, shard = buffers.shard;
  const Device device = local.device();
  // send: for each destination rank d, shard d of each local vector j at (d * L + j) * shard.
  auto* out = static_cast<float*>(buffers.send.raw_data());
  const auto* in = static_cast<const float*>(local.raw_data());
  for (int64_t d = 0; d < world; ++d) {
    const int64_t begin = d * shard, length = std::min(shard, n - begin);
    if (length <= 0) continue;
    for (int64_t j = 0; j < count; ++j)
      copy_bytes_async(out + (d * count + j) * shard, device, in + j * n + begin, device,
                       static_cast<size_t>(length) * sizeof(float));
  }
  // recv: this rank's shard of vector k = r * L + j at k * shard, so row order is global order.
  comm.all_to_all(buffers.send, buffers.recv);
  // ((v0 + v1) + v2) + ...: each add is one rounding, in place (axpy_ by 1 is the add's bits).
  copy_bytes_async(buffers.sum.raw_data(), device, buffers.recv.raw_data(), device,
                   static_cast<size_t>(shard) * sizeof(float));
  for (int64_t k = 1; k < world * count; ++k) axpy_(buffers.sum, 1.f, flat_slice(buffers.recv, k * shard, shard));
  comm.all_gather(buffers.sum, buffers.gathered);
  return flat_slice(buffers.gathered, 0, n);
}

}  // namespace minidl
