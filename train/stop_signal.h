// SIGINT (Ctrl-C) and SIGTERM (kill, a scheduler's time limit) ask a run to stop cleanly: the
// handler only records the signal; the trainer sees it after the step in flight, writes a
// checkpoint at that step, says so and exits 128 + signal (130, 143). A second signal while the
// first is handled kills the process at once (the default action), for a user who cannot wait.
#pragma once

namespace minidl {

class StopSignals {
 public:
  StopSignals();   // installs the handlers
  ~StopSignals();  // restores the previous ones
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // 0, or the first signal received (SIGINT or SIGTERM).
  static int received();
};

const char* signal_name(int signal);  // "SIGINT", "SIGTERM"

}  // namespace minidl
