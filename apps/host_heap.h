// How the minidl command asks the C library to manage host memory for training.
#pragma once

namespace minidl {

// Keeps freed tensor memory in the process for the next batch's tensors. glibc serves a block
// above its mmap threshold (at most 32 MiB) with a fresh mapping and returns it to the kernel at
// free, so every evaluation batch of configs/quick_cpu.json (1000 images: activations of 131 MB)
// faulted its tensors in again page by page: evaluation ran 1.6x slower. The command, not the
// library, sets this: it is the process's policy, which a program that links libminidl keeps for
// itself. The heap then stays at the run's peak, as PyTorch's caching allocator does on a GPU.
void keep_freed_host_memory();

}  // namespace minidl
