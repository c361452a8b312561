// Hooks that let a test hit a narrow window deterministically: a race between two processes, or
// a kill -9 in the middle of a step, an evaluation or a file write. Each reads an environment
// variable and does nothing when it is unset, so a normal run never notices them.
#pragma once
#include <cstdint>
#include <string>

namespace minidl {

// MINIDL_TEST_KILL_AT=POINT or POINT#K: the process kills itself with SIGKILL (no clean-up runs,
// as with kill -9) the K-th time (default 1) it reaches `point`. The points: "step:N" (N steps
// trained), "eval:E" (evaluation of epoch E begins), "write:NAME" (the temp file of NAME is
// complete, not yet renamed over NAME).
// MINIDL_TEST_HANG_AT=POINT or POINT#K: at the same points the process hangs instead: it sleeps
// forever, alive, holding what it holds (a rank stuck in compute, a deadlock, a stalled disk).
void test_kill_point(const std::string& point);
// The point "KIND:N", formatted only when the hook is set: a training step pays one branch.
void test_kill_point(const char* kind, int64_t n);

// MINIDL_TEST_PAUSE_<name>=FILE: creates FILE.waiting, then waits until FILE exists (at most
// two minutes), so a test can run another process inside this window.
void test_pause_point(const std::string& name);

}  // namespace minidl
