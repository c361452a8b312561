// The backends' factories and the argument checks they share (inside dist/ only). A factory of a
// backend this build lacks is an error that says so.
#pragma once
#include <memory>

#include "dist/communicator.h"

namespace minidl {

// MPI's world, started (MPI_Init_thread) by the first caller and finalized when the last holder
// lets go. Its error handler is MPI's default, MPI_ERRORS_ARE_FATAL: a failed call or a dead
// peer aborts the whole job through the launcher instead of leaving ranks waiting.
class MpiWorld {
 public:
  virtual ~MpiWorld() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  virtual int local_rank() const = 0;
  virtual void broadcast_bytes(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
};
std::shared_ptr<MpiWorld> mpi_world();

std::unique_ptr<Communicator> make_mpi_communicator(const Launch& launch);
std::unique_ptr<Communicator> make_nccl_communicator(const Launch& launch);

void check_dense(const Tensor& t, const char* op);
// in/out of an all-gather (out: world times in) or an all-to-all (equal sizes, world chunks).
enum class Collective { AllGather, AllToAll };
void check_collective(const Tensor& in, const Tensor& out, int world, Collective kind);

}  // namespace minidl
