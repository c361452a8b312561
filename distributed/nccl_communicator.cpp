#include "core/error.h"
#include "distributed/backends.h"

#ifdef MINIDL_HAVE_NCCL
#include <nccl.h>

#include "core/cuda/runtime.h"
#endif

namespace minidl {

#ifdef MINIDL_HAVE_NCCL

namespace {

void check_nccl(ncclResult_t status, const char* call) {
  if (status == ncclSuccess) return;
  fail(str("NCCL: ", call, " failed: ", ncclGetErrorString(status),
           status == ncclSystemError || status == ncclRemoteError ? " (a peer rank may have died)" : ""));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::Float32: return ncclFloat32;
    case DType::Int32: return ncclInt32;
    default: fail(str("NCCL all_reduce_sum: float32 or int32 tensors only, got ", dtype_name(t)));
  }
}

// Every call is queued on minidl's one stream, ordered with the kernels that make and read its
// tensors, as any other op is. With several ranks, each call first passes the watch
// (distributed/backends.h) on the host: rank 0 queues collective #k only once every rank has announced
// it, within the timeout, so a rank whose host hangs is named instead of leaving the others'
// GPUs waiting in NCCL. Rank 0 can then never be waiting on the GPU for a collective some rank
// has not queued. The cost: one 8-byte MPI message per rank per collective, and rank 0's host
// does not run ahead of the slowest host past a collective.
class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const Launch& launch, double timeout_s) {
    ncclUniqueId id;
    if (launch.world_size > 1) {
      // The id travels over MPI, which also says who is who.
      mpi_ = mpi_world();
      MINIDL_CHECK(mpi_->size() == launch.world_size, "NCCL: the launcher said ", launch.world_size,
                   " ranks but MPI_COMM_WORLD has ", mpi_->size());
      size_ = mpi_->size();
      rank_ = mpi_->rank();
      local_rank_ = mpi_->local_rank();
      if (rank_ == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
      mpi_->broadcast_bytes(&id, sizeof(id), 0);
      watch_ = make_collective_watch(mpi_, timeout_s);
    } else {
      check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    }
    check_nccl(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank");
  }
  ~NcclCommunicator() override {
    cudaStreamSynchronize(cuda::stream());
    ncclCommDestroy(comm_);
  }
  const char* backend() const override { return "nccl"; }
  int world_size() const override { return size_; }
  int rank() const override { return rank_; }
  int local_rank() const override { return local_rank_; }
  void all_reduce_sum(Tensor& t) override {
    check_device(t, "all_reduce_sum");
    arrive("all_reduce_sum");
    check_nccl(ncclAllReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()),
                             ncclSum, comm_, cuda::stream()),
               "ncclAllReduce");
  }
  void broadcast(Tensor& t, int root) override {
    check_device(t, "broadcast");
    MINIDL_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " is not a rank");
    arrive("broadcast");
    check_nccl(ncclBroadcast(t.raw_data(), t.raw_data(), t.nbytes(), ncclUint8, root, comm_, cuda::stream()),
               "ncclBroadcast");
  }
  void all_gather(const Tensor& in, Tensor& out) override {
    check_device(in, "all_gather");
    check_collective(in, out, size_, Collective::AllGather);
    arrive("all_gather");
    check_nccl(ncclAllGather(in.raw_data(), out.raw_data(), in.nbytes(), ncclUint8, comm_, cuda::stream()),
               "ncclAllGather");
  }
  void all_to_all(const Tensor& in, Tensor& out) override {
    check_device(in, "all_to_all");
    check_collective(in, out, size_, Collective::AllToAll);
    const size_t chunk = in.nbytes() / static_cast<size_t>(size_);
    arrive("all_to_all");
    const auto* src = static_cast<const char*>(in.raw_data());
    auto* dst = static_cast<char*>(out.raw_data());
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    for (int peer = 0; peer < size_; ++peer) {
      const size_t at = static_cast<size_t>(peer) * chunk;
      check_nccl(ncclSend(src + at, chunk, ncclUint8, peer, comm_, cuda::stream()), "ncclSend");
      check_nccl(ncclRecv(dst + at, chunk, ncclUint8, peer, comm_, cuda::stream()), "ncclRecv");
    }
    check_nccl(ncclGroupEnd(), "ncclGroupEnd");
  }
  void barrier() override {
    MINIDL_CUDA_CHECK(cudaStreamSynchronize(cuda::stream()));
    if (!watch_) return;
    watch_->enter("barrier");
    watch_->barrier();
  }
  void enter_graph(const char* what) override { arrive(what); }
  void set_timeout_report(TimeoutReport report) override {
    if (watch_) watch_->set_report(std::move(report));
  }
  void end_job_after_error(const std::string& message) override {
    if (mpi_) mpi_->end_job_after_error(message);
  }

 private:
  static void check_device(const Tensor& t, const char* op) {
    check_dense(t, op);
    MINIDL_CHECK(t.is_cuda(), "NCCL ", op, ": the NCCL backend takes CUDA tensors, got ", t.str());
  }
  void arrive(const char* op) {
    if (!watch_) return;
    watch_->enter(op);
    watch_->wait_for_arrivals();
  }
  std::shared_ptr<MpiWorld> mpi_;
  std::unique_ptr<CollectiveWatch> watch_;  // with several ranks
  ncclComm_t comm_ = nullptr;
  int size_ = 1, rank_ = 0, local_rank_ = 0;
};

}  // namespace

bool built_with_nccl() { return true; }

std::unique_ptr<Communicator> make_nccl_communicator(const Launch& launch, double timeout_s) {
  return std::make_unique<NcclCommunicator>(launch, timeout_s);
}

#else

bool built_with_nccl() { return false; }

std::unique_ptr<Communicator> make_nccl_communicator(const Launch&, double) {
  fail("--dist nccl: this minidl was built without NCCL (it needs the CUDA backend and nccl.h beside the CUDA "
       "toolkit)");
}

#endif

}  // namespace minidl
