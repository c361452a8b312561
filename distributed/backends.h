// The backends' factories and the argument checks they share (inside distributed/ only). A factory of a
// backend this build lacks is an error that says so.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "distributed/communicator.h"

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
  // Communicator::end_job_after_error for a world of several ranks (MPI_Abort); returns in a world
  // of one.
  virtual void end_job_after_error(const std::string& message) = 0;
};
std::shared_ptr<MpiWorld> mpi_world();
// An MPI call's status (MPI_SUCCESS or an error code): an error says which call and why.
void check_mpi(int status, const char* call);

// The deadline on the collectives of a world of several ranks, and the naming of a rank that
// does not arrive: a rank that hangs without dying would otherwise leave the others waiting in a
// collective forever. Every rank numbers the collectives it enters and tells rank 0 the number
// in a message of 8 bytes on a communicator of the watch's own (sent, never waited for); rank 0
// keeps a receive posted for each rank. When a collective runs past the timeout, rank 0 knows
// which ranks have not reached it, prints one message naming them and ends the job
// (MPI_Abort). The other ranks give rank 0 a tenth of the timeout more (2 to 60 s) before they
// end the job themselves, saying that rank 0 did not.
class CollectiveWatch {
 public:
  virtual ~CollectiveWatch() = default;
  // This rank enters its next collective, `op` (named in the messages).
  virtual void enter(const char* op) = 0;
  // Polls `done` until it holds, sleeping between polls once it has waited a millisecond (the
  // longer it waits, the longer the sleeps, up to a millisecond); past the current collective's
  // deadline, ends the job.
  virtual void wait(const std::function<bool()>& done) = 0;
  // Rank 0 waits, as `wait` does, until every rank has entered the current collective; the
  // others return at once.
  virtual void wait_for_arrivals() = 0;
  // A barrier of the ranks that waits as `wait` does.
  virtual void barrier() = 0;
  virtual void set_report(Communicator::TimeoutReport report) = 0;
};
std::unique_ptr<CollectiveWatch> make_collective_watch(std::shared_ptr<MpiWorld> world, double timeout_s);

std::unique_ptr<Communicator> make_mpi_communicator(const Launch& launch, double timeout_s);
std::unique_ptr<Communicator> make_nccl_communicator(const Launch& launch, double timeout_s);

void check_dense(const Tensor& t, const char* op);
// in/out of an all-gather (out: world times in) or an all-to-all (equal sizes, world chunks).
enum class Collective { AllGather, AllToAll };
void check_collective(const Tensor& in, const Tensor& out, int world, Collective kind);

}  // namespace minidl
