#include "train/stop_signal.h"

#include <signal.h>

namespace minidl {

namespace {

volatile sig_atomic_t g_received = 0;
struct sigaction g_old_int, g_old_term;

void on_signal(int sig) {
  if (g_received != 0) {
    // Second signal: stop waiting for the step to end.
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  g_received = sig;
}

}  // namespace

StopSignals::StopSignals() {
  g_received = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // reads and writes in flight continue; the flag is checked per step
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

int StopSignals::received() { return g_received; }

const char* signal_name(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal"; }

}  // namespace minidl
