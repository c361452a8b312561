#include "dist/ordered_reduce.h"

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

Tensor ordered_sum(Communicator& comm, const Tensor& local) {
  MINIDL_CHECK(local.defined() && local.dim() == 2 && local.dtype() == DType::Float32 && local.is_contiguous() &&
                   local.numel() > 0,
               "ordered_sum: expected (L, n) float32 vectors, got ", local.defined() ? local.str() : std::string("none"));
  const int64_t world = comm.world_size();
  const int64_t count = local.size(0), n = local.size(1);
  const int64_t shard = (n + world - 1) / world;
  const Device device = local.device();
  // send: for each destination rank d, shard d of each local vector j at (d * L + j) * shard; the
  // tail of the last shard past n stays zero.
  Tensor send = Tensor::zeros({world * count * shard}, DType::Float32, device);
  auto* out = static_cast<float*>(send.raw_data());
  const auto* in = static_cast<const float*>(local.raw_data());
  for (int64_t d = 0; d < world; ++d) {
    const int64_t begin = d * shard, length = std::min(shard, n - begin);
    if (length <= 0) continue;
    for (int64_t j = 0; j < count; ++j)
      copy_bytes_async(out + (d * count + j) * shard, device, in + j * n + begin, device,
                       static_cast<size_t>(length) * sizeof(float));
  }
  // recv: this rank's shard of vector k = r * L + j at k * shard, so row order is global order.
  Tensor recv = Tensor::empty({world * count * shard}, DType::Float32, device);
  comm.all_to_all(send, recv);
  Tensor sum = flat_slice(recv, 0, shard).clone();
  for (int64_t k = 1; k < world * count; ++k) sum = add(sum, flat_slice(recv, k * shard, shard));
  Tensor gathered = Tensor::empty({world * shard}, DType::Float32, device);
  comm.all_gather(sum, gathered);
  return flat_slice(gathered, 0, n);
}

}  // namespace minidl
