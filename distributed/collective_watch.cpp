// CollectiveWatch (distributed/backends.h): the collective timeout and the naming of a rank that hangs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <thread>
#include <vector>

#include "core/error.h"
#include "distributed/backends.h"

#ifdef MINIDL_HAVE_MPI
#include <mpi.h>
#endif

namespace minidl {

#ifdef MINIDL_HAVE_MPI

namespace {

using Clock = std::chrono::steady_clock;

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g s", s);
  return text;
}

// "1", "1 and 3", "1, 3 and 4"
std::string list_text(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i)
    out += (i == 0 ? "" : i + 1 == items.size() ? " and " : ", ") + items[i];
  return out;
}

class MpiCollectiveWatch final : public CollectiveWatch {
 public:
  MpiCollectiveWatch(std::shared_ptr<MpiWorld> world, double timeout_s)
      : world_(std::move(world)), rank_(world_->rank()), size_(world_->size()), timeout_s_(timeout_s) {
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    // Rank 0 answers first, so the others give it more time: a tenth of the timeout, 2 to 60 s.
    if (rank_ != 0) timeout_s_ += std::min(60.0, std::max(2.0, timeout_s / 10));
    if (rank_ == 0) {
      reached_.assign(static_cast<size_t>(size_), 0);
      incoming_.assign(static_cast<size_t>(size_), 0);
      receives_.assign(static_cast<size_t>(size_), MPI_REQUEST_NULL);
      for (int r = 1; r < size_; ++r) post_receive(r);
    }
  }

  ~MpiCollectiveWatch() override {
    if (rank_ == 0) {
      // Every rank has announced the collectives rank 0 completed; those announcements are
      // received, so no send is left unmatched at MPI_Finalize. A rank that never sends them
      // (it failed) is not waited for longer than the timeout.
      const auto until = Clock::now() + std::chrono::duration<double>(timeout_s_);
      while (!all_reached(count_) && Clock::now() < until) {
        receive_announcements();
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      for (MPI_Request& r : receives_) {
        if (r == MPI_REQUEST_NULL) continue;
        MPI_Cancel(&r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
      }
    } else {
      for (Announcement& a : sent_) MPI_Request_free(&a.request);
    }
    MPI_Comm_free(&comm_);
  }

  void enter(const char* op) override {
    ++count_;
    op_ = op;
    entered_ = Clock::now();
    if (rank_ == 0) {
      receive_announcements();
      return;
    }
    // Completed sends are dropped; a deque keeps the buffers of the others where MPI reads them.
    while (!sent_.empty()) {
      int done = 0;
      check_mpi(MPI_Test(&sent_.front().request, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (!done) break;
      sent_.pop_front();
    }
    sent_.push_back({count_, MPI_REQUEST_NULL});
    check_mpi(MPI_Isend(&sent_.back().count, 1, MPI_INT64_T, 0, 0, comm_, &sent_.back().request), "MPI_Isend");
  }

  void wait(const std::function<bool()>& done) override {
    const auto deadline = entered_ + std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double>(timeout_s_));
    // Spinning for the first millisecond keeps a collective whose ranks arrive together as fast
    // as a blocking one; after it, sleeps leave the core to the ranks still computing.
    const auto spin_until = Clock::now() + std::chrono::milliseconds(1);
    std::chrono::microseconds nap(20);
    while (!done()) {
      const auto now = Clock::now();
      if (now >= deadline) time_out();
      if (now < spin_until) continue;
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(1000));
    }
  }

  void wait_for_arrivals() override {
    if (rank_ != 0) return;
    wait([this] {
      receive_announcements();
      return all_reached(count_);
    });
  }

  void barrier() override {
    MPI_Request request;
    check_mpi(MPI_Ibarrier(comm_, &request), "MPI_Ibarrier");
    wait([&] {
      int done = 0;
      check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
      return done != 0;
    });
  }

  void set_report(Communicator::TimeoutReport report) override { report_ = std::move(report); }

 private:
  struct Announcement {
    int64_t count;
    MPI_Request request;
  };

  void post_receive(int r) {
    check_mpi(MPI_Irecv(&incoming_[static_cast<size_t>(r)], 1, MPI_INT64_T, r, 0, comm_,
                        &receives_[static_cast<size_t>(r)]),
              "MPI_Irecv");
  }

  // Rank 0: takes every announcement that has arrived and posts the next receive.
  void receive_announcements() {
    for (int r = 1; r < size_; ++r) {
      const size_t i = static_cast<size_t>(r);
      while (true) {
        int done = 0;
        check_mpi(MPI_Test(&receives_[i], &done, MPI_STATUS_IGNORE), "MPI_Test");
        if (!done) break;
        reached_[i] = std::max(reached_[i], incoming_[i]);
        post_receive(r);
      }
    }
  }

  bool all_reached(int64_t count) const {
    for (int r = 1; r < size_; ++r)
      if (reached_[static_cast<size_t>(r)] < count) return false;
    return true;
  }

  [[noreturn]] void time_out() {
    const std::string collective = str("collective #", count_, " (", op_, ")");
    const std::string context = report_.where ? report_.where() : std::string();
    std::string message;
    if (rank_ == 0) {
      receive_announcements();
      std::vector<std::string> late, at;
      for (int r = 1; r < size_; ++r) {
        if (reached_[static_cast<size_t>(r)] >= count_) continue;
        late.push_back(std::to_string(r));
        at.push_back(str("#", reached_[static_cast<size_t>(r)]));
      }
      const bool one = late.size() == 1;
      message = late.empty()
                    ? str(collective, " did not complete within ", seconds_text(timeout_s_), " although all ", size_,
                          " ranks reached it: MPI or the network between the ranks is stuck")
                    : str(one ? "rank " : "ranks ", list_text(late), " of ", size_, " did not reach ", collective,
                          " within ", seconds_text(timeout_s_), " (", one ? "it is" : "they are", " at ", list_text(at),
                          "): ", one ? "it hangs or is" : "they hang or are", " stuck");
      message += str("; ending the job", context.empty() ? "" : str(" (rank 0 is ", context, ")"));
    } else {
      message = str("rank ", rank_, " of ", size_, ": ", collective, " did not complete within ",
                    seconds_text(timeout_s_), ", and rank 0, which names a rank that does not arrive, did not end ",
                    "the job: rank 0 hangs or is stuck; ending the job",
                    context.empty() ? "" : str(" (rank ", rank_, " is ", context, ")"));
    }
    std::fprintf(stderr, "minidl: error: %s\n", message.c_str());
    std::fflush(stderr);
    if (report_.record) report_.record(message);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort();
  }

  std::shared_ptr<MpiWorld> world_;
  int rank_, size_;
  double timeout_s_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int64_t count_ = 0;                 // the collectives this rank entered
  const char* op_ = "";
  Clock::time_point entered_ = Clock::now();
  Communicator::TimeoutReport report_;
  std::deque<Announcement> sent_;     // rank > 0: announcements not known to be delivered
  std::vector<int64_t> reached_;      // rank 0: the last collective each rank announced
  std::vector<int64_t> incoming_;     // rank 0: the receive buffer of each rank's announcement
  std::vector<MPI_Request> receives_;
};

}  // namespace

std::unique_ptr<CollectiveWatch> make_collective_watch(std::shared_ptr<MpiWorld> world, double timeout_s) {
  return std::make_unique<MpiCollectiveWatch>(std::move(world), timeout_s);
}

#else

std::unique_ptr<CollectiveWatch> make_collective_watch(std::shared_ptr<MpiWorld>, double) {
  fail("this minidl was built without MPI (CMake found no MPI; install libopenmpi-dev and rebuild)");
}

#endif

}  // namespace minidl
