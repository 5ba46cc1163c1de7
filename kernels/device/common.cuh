// Shared device helpers: fp32 conversions of the element types, integer parameters read through
// their value class, and vector loads/stores that use the alignment facts of the generated Spec.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

// NOTES: every kernel template receives a Spec `S` generated from its JitKey alone
// (warmup/jit_key.cpp, instantiation_source). Per parameter p it exposes p_t; pointers add
// p_aligned (16-byte aligned address) and p_none (a missing optional pointer); integers add
// p_class: 1 = the value is the constant 1, 16 = divisible by 16, 0 = nothing known. Device code
// may rely on these facts and on nothing else about the runtime values.

namespace wk {

// std::is_same without host headers.
template <class A, class B>
inline constexpr bool kSame = false;
template <class A>
inline constexpr bool kSame<A, A> = true;

// ---- element types <-> fp32 -----------------------------------------------------------------

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// Round-to-nearest-even, as the host reference (warmup/host_dtype.h) does.
template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// An expert id of any index dtype as a signed 64-bit value: negative i32/i64 ids stay negative,
// u32 ids stay non-negative (so 0xffffffff is an out-of-range id, never -1).
template <class T>
__device__ __forceinline__ long long to_index(T v) {
  return static_cast<long long>(v);
}

// ---- integer parameters ---------------------------------------------------------------------

// The runtime value of an integer parameter with everything its value class says: the constant 1
// (loops over it fold away) or a multiple of 16 (the optimiser may drop remainder handling).
template <int Class, class T>
__device__ __forceinline__ T int_param(T v) {
  if constexpr (Class == 1) {
    return T(1);
  } else {
    if constexpr (Class == 16) __builtin_assume(v % 16 == 0);
    return v;
  }
}

// WARMKEY_INT(S, n): the integer parameter `n` of the kernel read through S::n_class.
#define WARMKEY_INT(S, name) (::wk::int_param<S::name##_class>(name))

// ---- vector access --------------------------------------------------------------------------
// A run of N elements of T moves as 32-bit words: 16 bytes per access where the run allows
// (uint4), then 8 and 4. Elements are packed into and unpacked from the words with bit operations,
// so the compiler sees whole-vector loads and stores (never element stores through a punned
// pointer, which it splits).

// The raw bits of an element, and an element from raw bits (2, 4 or 8 bytes).
__device__ __forceinline__ unsigned long long raw_bits(float v) { return __float_as_uint(v); }
__device__ __forceinline__ unsigned long long raw_bits(__half v) { return __half_as_ushort(v); }
__device__ __forceinline__ unsigned long long raw_bits(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }

template <class T>
__device__ __forceinline__ T from_bits(unsigned long long b) {
  if constexpr (sizeof(T) == 2) {
    const unsigned short u = static_cast<unsigned short>(b);
    if constexpr (kSame<T, __half>)
      return __ushort_as_half(u);
    else if constexpr (kSame<T, __nv_bfloat16>)
      return __ushort_as_bfloat16(u);
    else
      return static_cast<T>(u);
  } else if constexpr (kSame<T, float>) {
    return __uint_as_float(static_cast<unsigned int>(b));
  } else {
    return static_cast<T>(b);  // integers: two's complement truncation
  }
}

// Words of a run of N elements of T; the run must be a whole number of words.
template <class T, int N>
inline constexpr int kWords = static_cast<int>(N * sizeof(T)) / 4;

// Element i of a run held in words.
template <class T, int N>
__device__ __forceinline__ T element(const unsigned (&w)[kWords<T, N>], int i) {
  if constexpr (sizeof(T) == 2)
    return from_bits<T>(w[i / 2] >> (16 * (i % 2)));
  else if constexpr (sizeof(T) == 4)
    return from_bits<T>(w[i]);
  else
    return from_bits<T>(w[2 * i] | (static_cast<unsigned long long>(w[2 * i + 1]) << 32));
}

// Reads kW words at p (aligned to the widest access the run allows). Streaming (evict-first) or
// through the read-only cache.
template <int kW, bool Streaming>
__device__ __forceinline__ void load_words(const void* p, unsigned (&w)[kW]) {
  int i = 0;
#pragma unroll
  for (; i + 4 <= kW; i += 4) {
    const uint4* q = reinterpret_cast<const uint4*>(p) + i / 4;
    const uint4 v = Streaming ? __ldcs(q) : __ldg(q);
    w[i] = v.x, w[i + 1] = v.y, w[i + 2] = v.z, w[i + 3] = v.w;
  }
  if constexpr (kW % 4 >= 2) {
    const uint2* q = reinterpret_cast<const uint2*>(static_cast<const unsigned*>(p) + i);
    const uint2 v = Streaming ? __ldcs(q) : __ldg(q);
    w[i] = v.x, w[i + 1] = v.y;
    i += 2;
  }
  if constexpr (kW % 2 == 1) {
    const unsigned* q = static_cast<const unsigned*>(p) + i;
    w[i] = Streaming ? __ldcs(q) : __ldg(q);
  }
}

// Writes kW words at p (aligned as in load_words). The store intrinsics keep each access whole:
// plain stores of a uint4 may be split into 32-bit stores once loops are unrolled.
template <int kW>
__device__ __forceinline__ void store_words(void* p, const unsigned (&w)[kW]) {
  int i = 0;
#pragma unroll
  for (; i + 4 <= kW; i += 4)
    __stwb(reinterpret_cast<uint4*>(p) + i / 4, make_uint4(w[i], w[i + 1], w[i + 2], w[i + 3]));
  if constexpr (kW % 4 >= 2) {
    __stwb(reinterpret_cast<uint2*>(static_cast<unsigned*>(p) + i), make_uint2(w[i], w[i + 1]));
    i += 2;
  }
  if constexpr (kW % 2 == 1) __stwb(static_cast<unsigned*>(p) + i, w[i]);
}

// Loads N elements at p into fp32. Aligned: p is aligned to the run's widest access and all N
// elements exist; the run is read with vector loads that stream past L1 (read-once data).
// Otherwise only the first `valid` elements are read, one by one, and the rest are 0.
template <bool Aligned, int N, class T>
__device__ __forceinline__ void load_floats(const T* p, long long valid, float (&out)[N]) {
  if constexpr (Aligned) {
    unsigned w[kWords<T, N>];
    load_words<kWords<T, N>, true>(p, w);
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = to_float(element<T, N>(w, i));
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = i < valid ? to_float(p[i]) : 0.0f;
  }
}

// Stores N fp32 values at p, rounded to T. Aligned as in load_floats; otherwise only the first
// `valid` elements are written, one by one.
template <bool Aligned, int N, class T>
__device__ __forceinline__ void store_floats(T* p, long long valid, const float (&in)[N]) {
  if constexpr (Aligned) {
    constexpr int kPerWord = 4 / static_cast<int>(sizeof(T));
    unsigned w[kWords<T, N>] = {};
#pragma unroll
    for (int i = 0; i < N; ++i)
      w[i / kPerWord] |= static_cast<unsigned>(raw_bits(from_float<T>(in[i]))) << (8 * sizeof(T) * (i % kPerWord));
    store_words(p, w);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      if (i < valid) p[i] = from_float<T>(in[i]);
    }
  }
}

// Whether p is 16-byte aligned: for kernels that pick vector or element-wise access at run time
// (one binary for aligned and misaligned views; the test is uniform, so no divergence).
__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0;
}

// Loads N consecutive integers of T (4 or 8 bytes) through the read-only cache as signed 64-bit
// values (to_index); p must be aligned to the run's widest access.
template <int N, class T>
__device__ __forceinline__ void load_indices_aligned(const T* p, long long (&out)[N]) {
  unsigned w[kWords<T, N>];
  load_words<kWords<T, N>, false>(p, w);
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = to_index(element<T, N>(w, i));
}

// Elements of T in one 16-byte access.
template <class T>
inline constexpr int kVec16 = 16 / static_cast<int>(sizeof(T));

// Programmatic dependent launch (sm_90+). wait: block until the grids this launch depends on have
// completed and flushed their memory; without the launch attribute it returns at once.
// launch_dependents: allow the next grid in the stream to start its prologue early (that grid's
// own wait keeps it from reading this one's output too soon).
template <bool Enabled>
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (Enabled) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

template <bool Enabled>
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (Enabled) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The entry of a kernel whose KernelDef sets pdl_wait (warmup/signature.h): the wait comes before
// any global memory access, so a launch with programmatic dependent launch is as ordered as a plain
// one; the successor is let in at once, and its own wait orders it after this grid.
__device__ __forceinline__ void pdl_entry() {
  pdl_wait<true>();
  pdl_launch_dependents<true>();
}

// ---- asynchronous copies global -> shared (cp.async, sm_80 and later) -------------------------

// A shared-memory address as cp.async, ldmatrix and the mbarrier instructions take it.
__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// NOTES: the copies without a validity flag keep the source's pointee type (a template): taking
// `const void*` instead changed the register allocation of dsv4_topk's thread path (half its keys'
// SASS, nvrtc 13.0, 2026-12-05), whose fp32 rows these copy; the flagged copies take `const void*`
// as the GEMMs always called them.

// 16 bytes, cached in L2 only (.cg: the only variant that takes 16 bytes and skips L1).
template <class T>
__device__ __forceinline__ void cp_async16(unsigned dst, const T* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}
// The same, or, for an invalid source, 16 zero bytes (src-size 0: nothing is read, but src must
// still be a mapped address).
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
// 4 bytes (.ca: the L1-allocating variant; .cg takes 16 bytes only).
template <class T>
__device__ __forceinline__ void cp_async4(unsigned dst, const T* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src));
}
// The same, or 4 zero bytes for an invalid source.
__device__ __forceinline__ void cp_async4(unsigned dst, const void* src, bool valid) {
  const int n = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
// Closes this thread's group of copies issued since the last commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed groups are still in flight. Other threads'
// copies need a barrier after this as well.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace wk
