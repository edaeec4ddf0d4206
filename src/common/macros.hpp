#pragma once
// PCOPS_HD marks maths shared by the CPU and CUDA backends.
#if defined(__CUDACC__)
#define PCOPS_HD __host__ __device__ __forceinline__
#else
#define PCOPS_HD inline
#endif
