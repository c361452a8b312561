// The CUDA half of core/side_stream.h, plain C++ so that side_stream.cpp compiles in every build.
// Streams travel as void* (cudaStream_t); null names the main stream, cuda::stream()'s own.
#pragma once

namespace minidl::cuda {

void* create_stream();
void destroy_stream(void* stream);
// `waiter` waits for everything `signaler` has queued so far.
void stream_wait(void* waiter, void* signaler);
// Makes cuda::stream() return `stream` (null: the main stream again); returns the previous one.
void* swap_stream(void* stream);

}  // namespace minidl::cuda
