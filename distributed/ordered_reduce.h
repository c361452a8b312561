// The sum of per-micro-batch vectors in one fixed order, whichever ranks hold them: the reduction
// that makes N ranks give the bits of one rank accumulating N micro-batches. A float sum's bits
// depend on its order, so the order is the global micro-batch index and nothing else.
//
// Rank r holds L vectors of n float32 values, the micro-batches k = r * L + j (j < L). Each
// vector is cut into world_size shards; an all-to-all hands every rank one shard of all
// world_size * L vectors, which it sums in k order ((v0 + v1) + v2 ...); an all-gather puts the
// summed shards together. Each element is summed exactly as a single process summing the same
// vectors one after another sums it, and the traffic is a ring all-reduce's (a reduce-scatter
// plus an all-gather), with the engine doing no arithmetic.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "distributed/communicator.h"

namespace minidl {

// local: (L, n) float32 on the communicator's device, the same L and n on every rank. Returns
// the (n) sum over all world_size * L vectors in global micro-batch order, the same on every rank.
Tensor ordered_sum(Communicator& comm, const Tensor& local);

// The device buffers of the ordered reduction of (L, n) vectors over `world` ranks, allocated once
// and kept: what a reduction queued on a side stream (core/side_stream.h) needs, since it may not
// allocate.
struct OrderedSumBuffers {
  OrderedSumBuffers(int64_t world, int64_t count, int64_t n, Device device);
  int64_t count, n, shard;
  Tensor send, recv, sum, gathered;
};

// ordered_sum into `buffers` (made for local's L and n), allocating nothing; the result is a view
// of buffers.gathered, valid until the buffers' next use. The same bits as ordered_sum.
Tensor ordered_sum(Communicator& comm, const Tensor& local, OrderedSumBuffers& buffers);

// A view of n elements of a dense one-dimensional float32 tensor from `offset` on, sharing its
// storage (no autograd history).
Tensor flat_slice(const Tensor& flat, int64_t offset, int64_t n);

}  // namespace minidl
