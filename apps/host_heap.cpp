#include "apps/host_heap.h"

#include <malloc.h>

namespace minidl {

void keep_freed_host_memory() {
  // Above any tensor a CPU run allocates at once is never mmap'ed; the heap is never trimmed.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, -1);
}

}  // namespace minidl
