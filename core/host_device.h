// The one marker for functions shared verbatim by the CPU code and CUDA kernels (the augmentation
// draws, the optimizer updates, the normalization formulas): host and device, force-inlined, when
// nvcc compiles; a plain inline function in C++ translation units.
#pragma once

#if defined(__CUDACC__)
#define MINIDL_HD __host__ __device__ __forceinline__
#else
#define MINIDL_HD inline
#endif
