// Tensor-core GEMM building blocks shared by the expert GEMMs (fused_moe, batched_moe): a
// swizzled shared-memory tile of 128-byte rows, cp.async staging, ldmatrix fragments, mma.sync per
// element type, and a multi-stage pipeline over k-tiles.
#pragma once

#include <cuda_fp8.h>

#include "device/common.cuh"

// NOTES:
// - Everything is in bytes along K: one k-tile row is 128 bytes (64 bf16/f16, 128 fp8 e4m3,
//   32 f32), one mma k-step 32 bytes (m16n8k16 bf16/f16, m16n8k32 e4m3, m16n8k8 tf32). The mma
//   fragments of the three shapes are laid out identically in 32-bit units, so one ldmatrix
//   scheme (x4 over 8x16-byte matrices) feeds all of them.
// - Shared tile: row r, 16-byte chunk c lives at r * 128 + ((c ^ (r & 7)) * 16). The 8 rows an
//   ldmatrix phase reads then fall on 8 distinct 16-byte bank groups: no bank conflicts, for both
//   the cp.async writes (8 lanes per row) and the ldmatrix reads.
// - A stage holds BM rows of A then BN rows of B: (BM + BN) * 128 bytes. The pipeline keeps
//   STAGES - 1 k-tiles in flight while one is consumed.
// - f32 operands go through tf32 (cvt.rna: round to nearest, ties away), fp32 accumulation.
//   fp8 e4m3 uses the sm_89+ mma with fp32 accumulation; block scales are the caller's business.

namespace wk::gemm {

inline constexpr int kRowBytes = 128;  // one k-tile row
inline constexpr int kChunks = 8;      // 16-byte chunks per row
inline constexpr int kStepBytes = 32;  // one mma k-step
inline constexpr int kSteps = kRowBytes / kStepBytes;

// Byte offset of chunk c of row r in a swizzled tile.
__device__ __forceinline__ int swizzle(int r, int c) { return r * kRowBytes + ((c ^ (r & 7)) << 4); }

// 16 bytes global -> shared through registers, element by element (T-aligned only): the path for
// operands whose address is not 16-byte aligned.
template <class T>
__device__ __forceinline__ void copy16_sync(char* dst, const char* src, bool valid) {
  uint4 v = make_uint4(0, 0, 0, 0);
  if (valid) {
    constexpr int kN = 16 / static_cast<int>(sizeof(T));
    unsigned w[4] = {0, 0, 0, 0};
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      unsigned bits;
      if constexpr (sizeof(T) == 1)
        bits = __ldg(reinterpret_cast<const unsigned char*>(src) + i);
      else if constexpr (sizeof(T) == 2)
        bits = __ldg(reinterpret_cast<const unsigned short*>(src) + i);
      else
        bits = __ldg(reinterpret_cast<const unsigned*>(src) + i);
      w[(i * sizeof(T)) / 4] |= bits << (8 * ((i * sizeof(T)) % 4));
    }
    v = make_uint4(w[0], w[1], w[2], w[3]);
  }
  *reinterpret_cast<uint4*>(dst) = v;
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ unsigned to_tf32(unsigned bits) {
  unsigned out;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(out) : "f"(__uint_as_float(bits)));
  return out;
}

// d += a * b for one 16x8 output tile and one 32-byte k-step, by element type.
template <class T>
__device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  if constexpr (kSame<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else if constexpr (kSame<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else if constexpr (kSame<T, float>) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(to_tf32(a[0])), "r"(to_tf32(a[1])), "r"(to_tf32(a[2])), "r"(to_tf32(a[3])), "r"(to_tf32(b[0])),
          "r"(to_tf32(b[1])));
  } else {
    static_assert(sizeof(T) == 1, "gemm: element types are bf16, f16, f32 and fp8 e4m3");
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

// A block scale as a float: f32 as is, a UE8M0 byte x as 2^(x - 127) (x = 0 is the subnormal 2^-127,
// 255 NaN).
__device__ __forceinline__ float block_scale(float v) { return v; }
__device__ __forceinline__ float block_scale(unsigned char x) {
  return x == 0 ? __uint_as_float(0x00400000u) : __uint_as_float(static_cast<unsigned>(x) << 23);
}

// The shape of one block's work: BM x BN outputs, WARPS warps laid out WARPS_M x WARPS_N, each
// owning a (BM / WARPS_M) x (BN / WARPS_N) tile of MI x NI mma tiles (16 x 8).
template <class T, int BM, int BN, int WARPS, int STAGES>
struct Tile {
  static constexpr int kThreads = 32 * WARPS;
  static constexpr int kWarpsM = (BM >= 64 && WARPS >= 2) ? 2 : 1;
  static constexpr int kWarpsN = WARPS / kWarpsM;
  static constexpr int kWarpM = BM / kWarpsM;
  static constexpr int kWarpN = BN / kWarpsN;
  static constexpr int kMI = kWarpM / 16;
  static constexpr int kNI = kWarpN / 8;
  static constexpr int kElemsPerRow = kRowBytes / static_cast<int>(sizeof(T));  // BLOCK_K in elements
  static constexpr int kStageBytes = (BM + BN) * kRowBytes;
  static constexpr int kSmemBytes = STAGES * kStageBytes;
  // 16-byte chunks each thread copies per stage (rounded up; the last round may be partial).
  static constexpr int kAIters = (BM * kChunks + kThreads - 1) / kThreads;
  static constexpr int kBIters = (BN * kChunks + kThreads - 1) / kThreads;
  static_assert(WARPS == kWarpsM * kWarpsN, "gemm: warps must split evenly");
  static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0, "gemm: a warp tile is a multiple of 16 x 16");
  static_assert(STAGES >= 2, "gemm: at least two stages");

  using Acc = float[kMI][kNI][4];

  // One k-tile of the stage at `stage` (shared memory) into acc: kSteps mma k-steps.
  static __device__ __forceinline__ void compute(const char* stage, float (&acc)[kMI][kNI][4], int warp_m, int warp_n,
                                                 int lane) {
    const unsigned a_base = smem_u32(stage);
    compute_ab(a_base, a_base + BM * kRowBytes, acc, warp_m, warp_n, lane);
  }

  // The same with the A and B tiles at their own shared addresses (swizzled 128-byte rows, BM rows
  // of A, BN rows of B): for operands staged in another form and expanded before the mma (nvfp4).
  static __device__ __forceinline__ void compute_ab(unsigned a_base, unsigned b_base, float (&acc)[kMI][kNI][4],
                                                    int warp_m, int warp_n, int lane) {
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
      unsigned af[kMI][4];
      unsigned bf[kNI][2];
#pragma unroll
      for (int mi = 0; mi < kMI; ++mi) {
        const int row = warp_m * kWarpM + mi * 16 + (lane & 15);
        ldmatrix_x4(af[mi], a_base + swizzle(row, ks * 2 + (lane >> 4)));
      }
#pragma unroll
      for (int nj = 0; nj < kNI / 2; ++nj) {
        const int row = warp_n * kWarpN + nj * 16 + ((lane >> 4) << 3) + (lane & 7);
        unsigned r[4];
        ldmatrix_x4(r, b_base + swizzle(row, ks * 2 + ((lane >> 3) & 1)));
        bf[2 * nj][0] = r[0], bf[2 * nj][1] = r[1], bf[2 * nj + 1][0] = r[2], bf[2 * nj + 1][1] = r[3];
      }
#pragma unroll
      for (int mi = 0; mi < kMI; ++mi) {
#pragma unroll
        for (int ni = 0; ni < kNI; ++ni) mma<T>(acc[mi][ni], af[mi], bf[ni]);
      }
    }
  }

  // One k-tile whose partial sums take a per-row factor (block-scaled fp8): the k-tile is summed
  // into fresh fp32 partials, then folded as acc += part * row_scale[mi][row half] * col_scale.
  static __device__ __forceinline__ void compute_scaled(const char* stage, float (&acc)[kMI][kNI][4],
                                                        const float (&row_scale)[kMI][2], float col_scale, int warp_m,
                                                        int warp_n, int lane) {
    float part[kMI][kNI][4];
    zero(part);
    compute(stage, part, warp_m, warp_n, lane);
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi) {
      const float s0 = row_scale[mi][0] * col_scale, s1 = row_scale[mi][1] * col_scale;
#pragma unroll
      for (int ni = 0; ni < kNI; ++ni) {
        acc[mi][ni][0] = fmaf(part[mi][ni][0], s0, acc[mi][ni][0]);
        acc[mi][ni][1] = fmaf(part[mi][ni][1], s0, acc[mi][ni][1]);
        acc[mi][ni][2] = fmaf(part[mi][ni][2], s1, acc[mi][ni][2]);
        acc[mi][ni][3] = fmaf(part[mi][ni][3], s1, acc[mi][ni][3]);
      }
    }
  }

  static __device__ __forceinline__ void zero(float (&acc)[kMI][kNI][4]) {
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
      for (int ni = 0; ni < kNI; ++ni)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[mi][ni][q] = 0.0f;
  }

  // The pipeline: load(stage_ptr, kt) issues the copies of k-tile kt into a stage (cp.async or
  // synchronous), consume(stage_ptr, kt) uses a staged k-tile. Every thread calls it.
  template <class Load, class Consume>
  static __device__ __forceinline__ void pipeline(char* smem, int k_tiles, Load&& load, Consume&& consume) {
    pipeline_bytes<kStageBytes>(smem, k_tiles, static_cast<Load&&>(load), static_cast<Consume&&>(consume));
  }

  // The pipeline over stages of StageBytes bytes each (a caller that stages its own layout).
  template <int StageBytes, class Load, class Consume>
  static __device__ __forceinline__ void pipeline_bytes(char* smem, int k_tiles, Load&& load, Consume&& consume) {
    // The prologue stays a loop: runs once per block, and unrolled it put STAGES - 1 more copies
    // of `load` into every key's code (compile time only; docs/PERFORMANCE.md).
#pragma unroll 1
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < k_tiles) load(smem + s * StageBytes, s);
      cp_async_commit();
    }
#pragma unroll 1
    for (int kt = 0; kt < k_tiles; ++kt) {
      cp_async_wait<STAGES - 2>();
      __syncthreads();
      const int next = kt + STAGES - 1;
      if (next < k_tiles) load(smem + (next % STAGES) * StageBytes, next);
      cp_async_commit();
      consume(smem + (kt % STAGES) * StageBytes, kt);
    }
    cp_async_wait<0>();
  }
};

}  // namespace wk::gemm
