// Plain-C++ face of CUDA graph capture (graph_capture.cu), for core/cuda_graph.cpp.
#pragma once
#include <functional>
#include <string>

namespace minidl::cuda {

// Captures what `body` queues on minidl's stream and instantiates it; returns the executable
// graph, or null with *why set (the body's Error, or the capture's own failure).
void* capture_graph(const std::function<void()>& body, std::string* why);
void launch_graph(void* exec);
// Waits for the queued replays, then frees the graph.
void destroy_graph(void* exec);

}  // namespace minidl::cuda
