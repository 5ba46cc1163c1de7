// The grouped expert GEMMs of a dsv4-flash MoE layer (H 4096, I 2048, E 256, K 6): warmkey's
// fused_moe (sorted layout) and batched_moe (batched layout: [E, capacity, K] with per-expert
// counts, the capacity the busiest expert's count) against cuBLAS on the same tokens-per-expert distribution, W13 and
// W2, bf16 and fp8 w8a8; prefill in TFLOPS and the ratio to cuBLAS, decode in weight-streaming GB/s against a
// device-to-device copy measured in the same program. nvfp4_moe (NVFP4 weights decoded to bf16 on
// the chip) on the same routing, next to cuBLAS bf16 on the same grouping. The shared expert's
// two dense GEMMs (BM_shared_expert): fused_moe as one expert against the layer's cuBLAS call and
// cuBLASLt, outputs checked against each other. A `variant` argument runs another tile on the same
// batch in the same run (an A/B): BM_nvfp4_moe's decode (1 the staged tile, 2-4 other streaming
// tiles) and prefill (1 the staged 128 x 128 tile the warp-specialised one replaced), BM_batched_moe's
// prefill (1 the mma.sync tile the warp-specialised one replaced).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <random>

#include "bench/bench_util.h"
#include "equivalence/oracles/fused_moe.h"
#include "kernels/batched_moe/batched_moe.h"
#include "kernels/fused_moe/fused_moe.h"
#include "kernels/nvfp4_moe/nvfp4_moe.h"
#include "replay/layer/layer_cublas.h"
#include "warmup/error.h"
#include "warmup/host_dtype.h"
#include "warmup/model_config.h"

#ifdef WARMKEY_HAVE_CUBLAS
#include <cublasLt.h>
#include <cublas_v2.h>
#endif

namespace warmkey::bench {
namespace {

constexpr std::int64_t kHidden = 4096, kInter = 2048, kExperts = 256, kTopK = 6;
constexpr int kTimedLaunches = 10, kRepeats = 5;

enum Layer { kW13 = 0, kW2 = 1 };
enum Quant { kBf16 = 0, kFp8 = 1 };
// kBlocked: entry i goes to expert i * E / (T * top-k), so each expert's entries (and, for W2, its A
// rows) are one contiguous run: the gather-free case, for the A/B against uniform.
enum Routing { kUniform = 0, kSkewed = 1, kBlocked = 2 };

std::int64_t gemm_n(int layer) { return layer == kW13 ? 2 * kInter : kHidden; }
std::int64_t gemm_k(int layer) { return layer == kW13 ? kHidden : kInter; }

// Expert weights, allocated and filled once per (layer, quant): 8.6 GB for W13 in bf16.
struct Weights {
  DeviceBuffer b, scale;
};
Weights& weights(int layer, int quant) {
  static std::map<int, Weights> all;
  auto it = all.find(layer * 2 + quant);
  if (it != all.end()) return it->second;
  Device& dev = Device::instance();
  const std::int64_t n = gemm_n(layer), k = gemm_k(layer);
  const DType d = quant == kFp8 ? DType::f8e4m3 : DType::bf16;
  Weights w;
  w.b = dev.alloc(static_cast<std::size_t>(kExperts * n * k * dtype_size(d)));
  if (quant == kFp8) {
    fill_random(w.b.data(), DType::u8, kExperts * n * k, 11 + layer);  // random e4m3 bytes
    w.scale = dev.alloc(static_cast<std::size_t>(kExperts * (n / 128) * (k / 128) * 4));
    fill_random(w.scale.data(), DType::f32, kExperts * (n / 128) * (k / 128), 13 + layer);
  } else {
    fill_random(w.b.data(), d, kExperts * n * k, 17 + layer);
  }
  return all.emplace(layer * 2 + quant, std::move(w)).first->second;
}

// Top-6 of 256 per token, distinct experts: uniform, or skewed (half of the slots drawn from 16
// hot experts).
std::vector<int> route(std::int64_t tokens, int routing, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int> ids(static_cast<std::size_t>(tokens * kTopK));
  std::vector<int> pool(kExperts);
  if (routing == kBlocked) {
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(i * kExperts / ids.size());
    return ids;
  }
  for (std::int64_t t = 0; t < tokens; ++t) {
    std::iota(pool.begin(), pool.end(), 0);
    for (int j = 0; j < kTopK; ++j) {
      int pick = static_cast<int>(std::uniform_int_distribution<int>(j, kExperts - 1)(rng));
      if (routing == kSkewed && rng() % 2 == 0) {
        const int hot = static_cast<int>(rng() % 16);
        const auto pos = std::find(pool.begin() + j, pool.end(), hot);
        if (pos != pool.end()) pick = static_cast<int>(pos - pool.begin());
      }
      std::swap(pool[static_cast<std::size_t>(j)], pool[static_cast<std::size_t>(pick)]);
      ids[static_cast<std::size_t>(t * kTopK + j)] = pool[static_cast<std::size_t>(j)];
    }
  }
  return ids;
}

// moe_align's layout for ids (what moe_align computes on the device; built here so the benchmark
// times the GEMM alone).
struct Layout {
  std::vector<int> sorted, experts, counts;
  int post = 0;
};
Layout align(const std::vector<int>& ids, std::int64_t block_m, std::int64_t experts = kExperts) {
  const std::int64_t nv = static_cast<std::int64_t>(ids.size()), em = nv + experts * (block_m - 1);
  Layout l;
  l.sorted.assign(static_cast<std::size_t>(em), static_cast<int>(nv));
  l.experts.assign(static_cast<std::size_t>((em + block_m - 1) / block_m), -1);
  l.counts.assign(static_cast<std::size_t>(experts), 0);
  std::vector<std::vector<int>> groups(static_cast<std::size_t>(experts));
  for (std::int64_t i = 0; i < nv; ++i)
    groups[static_cast<std::size_t>(ids[static_cast<std::size_t>(i)])].push_back(static_cast<int>(i));
  std::int64_t pos = 0;
  for (int e = 0; e < experts; ++e) {
    const auto& g = groups[static_cast<std::size_t>(e)];
    l.counts[static_cast<std::size_t>(e)] = static_cast<int>(g.size());
    std::copy(g.begin(), g.end(), l.sorted.begin() + pos);
    const std::int64_t blocks = (static_cast<std::int64_t>(g.size()) + block_m - 1) / block_m;
    for (std::int64_t b = 0; b < blocks; ++b) l.experts[static_cast<std::size_t>(pos / block_m + b)] = e;
    pos += blocks * block_m;
  }
  l.post = static_cast<int>(pos);
  return l;
}

DeviceBuffer upload(const std::vector<int>& v) {
  Device& dev = Device::instance();
  DeviceBuffer b = dev.alloc(std::max<std::size_t>(v.size() * 4, 16));
  if (!v.empty()) dev.copy_to_device(b.data(), v.data(), v.size() * 4);
  return b;
}

// Median per-launch milliseconds of kTimedLaunches back-to-back calls, over kRepeats.
template <class Fn>
double median_ms(Fn&& fn) {
  Device& dev = Device::instance();
  fn();  // compile, load, warm the caches of the host side
  dev.synchronize();
  std::vector<double> ms;
  for (int r = 0; r < kRepeats; ++r)
    ms.push_back(dev.time_ms(nullptr, [&] {
      for (int i = 0; i < kTimedLaunches; ++i) fn();
    }) / kTimedLaunches);
  std::nth_element(ms.begin(), ms.begin() + kRepeats / 2, ms.end());
  return ms[kRepeats / 2];
}

#ifdef WARMKEY_HAVE_CUBLAS
// cuBLAS on the same grouping: one GEMM per expert with tokens, C_e[c_e, N] = A_e[c_e, K] B_e^T,
// A_e contiguous (already gathered: cuBLAS gets the easier layout), bf16 in and out, fp32
// compute, as one cublasGemmGroupedBatchedEx call.
struct Cublas {
  cublasHandle_t handle = nullptr;
  Cublas() {
    if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) handle = nullptr;
  }
  ~Cublas() {
    if (handle) cublasDestroy(handle);
  }
};

double cublas_ms(const std::vector<int>& counts, std::int64_t n, std::int64_t k, const void* b, void* a_sorted,
                 void* c_sorted, std::string* note) {
  static Cublas cb;
  if (!cb.handle) {
    *note = "cublasCreate failed";
    return 0;
  }
  std::vector<cublasOperation_t> ta, tb;
  std::vector<int> m_arr, n_arr, k_arr, lda, ldb, ldc, sizes;
  std::vector<float> alpha, beta;
  std::vector<const void*> ap, bp;
  std::vector<void*> cp;
  std::int64_t row = 0;
  for (int e = 0; e < kExperts; ++e) {
    const int c = counts[static_cast<std::size_t>(e)];
    if (c == 0) continue;
    // column-major view: C^T (N x c) = B_e (K x N)^T * A_e^T (K x c)
    ta.push_back(CUBLAS_OP_T), tb.push_back(CUBLAS_OP_N);
    m_arr.push_back(static_cast<int>(n)), n_arr.push_back(c), k_arr.push_back(static_cast<int>(k));
    lda.push_back(static_cast<int>(k)), ldb.push_back(static_cast<int>(k)), ldc.push_back(static_cast<int>(n));
    alpha.push_back(1.0f), beta.push_back(0.0f), sizes.push_back(1);
    bp.push_back(static_cast<const std::uint16_t*>(b) + static_cast<std::int64_t>(e) * n * k);
    ap.push_back(static_cast<const std::uint16_t*>(a_sorted) + row * k);
    cp.push_back(static_cast<std::uint16_t*>(c_sorted) + row * n);
    row += c;
  }
  Device& dev = Device::instance();
  DeviceBuffer ptrs = dev.alloc(3 * bp.size() * sizeof(void*));
  auto** dp = static_cast<const void**>(ptrs.data());
  dev.copy_to_device(dp, bp.data(), bp.size() * sizeof(void*));
  dev.copy_to_device(dp + bp.size(), ap.data(), ap.size() * sizeof(void*));
  dev.copy_to_device(dp + 2 * bp.size(), cp.data(), cp.size() * sizeof(void*));
  const int groups = static_cast<int>(bp.size());
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  const double ms = median_ms([&] {
    status = cublasGemmGroupedBatchedEx(cb.handle, ta.data(), tb.data(), m_arr.data(), n_arr.data(), k_arr.data(),
                                        alpha.data(), dp, CUDA_R_16BF, lda.data(), dp + groups, CUDA_R_16BF, ldb.data(),
                                        beta.data(), const_cast<void**>(dp + 2 * groups), CUDA_R_16BF, ldc.data(),
                                        groups, sizes.data(), CUBLAS_COMPUTE_32F);
  });
  if (status != CUBLAS_STATUS_SUCCESS) {
    *note = str_cat("cublasGemmGroupedBatchedEx status ", static_cast<int>(status));
    return 0;
  }
  return ms;
}

// The same GEMMs as one cublasGemmEx per expert (cuBLAS picks its best kernel for each size).
double cublas_loop_ms(const std::vector<int>& counts, std::int64_t n, std::int64_t k, const void* b, void* a_sorted,
                      void* c_sorted, std::string* note) {
  static Cublas cb;
  if (!cb.handle) return 0;
  const float alpha = 1.0f, beta = 0.0f;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  const double ms = median_ms([&] {
    std::int64_t row = 0;
    for (int e = 0; e < kExperts; ++e) {
      const int c = counts[static_cast<std::size_t>(e)];
      if (c == 0) continue;
      const cublasStatus_t st =
          cublasGemmEx(cb.handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), c, static_cast<int>(k), &alpha,
                       static_cast<const std::uint16_t*>(b) + static_cast<std::int64_t>(e) * n * k, CUDA_R_16BF,
                       static_cast<int>(k), static_cast<const std::uint16_t*>(a_sorted) + row * k, CUDA_R_16BF,
                       static_cast<int>(k), &beta, static_cast<std::uint16_t*>(c_sorted) + row * n, CUDA_R_16BF,
                       static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      if (st != CUBLAS_STATUS_SUCCESS) status = st;
      row += c;
    }
  });
  if (status != CUBLAS_STATUS_SUCCESS) {
    *note = str_cat("cublasGemmEx status ", static_cast<int>(status));
    return 0;
  }
  return ms;
}

// The fp8 peer: one cublasLtMatmul per expert with tokens, e4m3 x e4m3 -> bf16, fp32 compute, with
// DeepSeek-style block scales as cuBLASLt states them (CUDA 12.9+): the weight (cuBLASLt's A, N x K
// transposed) by 128 x 128 blocks (BLK128x128_32F), the activations (cuBLASLt's B, K x c) by 1 x 128
// vectors along K (VEC128_32F). Each expert's plan (layouts, heuristic algorithm) is made before
// timing. Returns 0 with *note on any status other than success (the mode is unsupported, ...).
struct CublasLt {
  cublasLtHandle_t handle = nullptr;
  DeviceBuffer workspace;
  static constexpr std::size_t kWorkspace = 64ull << 20;
  CublasLt() {
    if (cublasLtCreate(&handle) != CUBLAS_STATUS_SUCCESS) handle = nullptr;
    if (handle) workspace = Device::instance().alloc(kWorkspace);
  }
  ~CublasLt() {
    if (handle) cublasLtDestroy(handle);
  }
};

// One cuBLASLt fp8 e4m3 matmul per expert. block_scaled: the weights' 128 x 128 block scales
// (BLK128x128_32F) and the activations' 1 x 128 scales (VEC128_32F), the same recipe as fused_moe's
// fp8 path (on the H200 with libcublasLt 13 the heuristic returns CUBLAS_STATUS_NOT_SUPPORTED for
// it: docs/PERFORMANCE.md). Otherwise one fp32 scale per matrix (SCALAR_32F): no block-scale
// promotion, less work than the recipe, so a bound the recipe cannot beat on the same GPU.
double cublaslt_fp8_ms(const std::vector<int>& counts, std::int64_t n, std::int64_t k, const void* b,
                       const void* b_scale, bool block_scaled, std::string* note) {
  static CublasLt lt;
  if (!lt.handle) {
    *note = "cublasLtCreate failed";
    return 0;
  }
  Device& dev = Device::instance();
  std::int64_t rows = 0;
  for (int c : counts) rows += c;
  // Activations and their 1 x 128 scales (values do not matter for speed; scales near 1).
  DeviceBuffer a = dev.alloc(static_cast<std::size_t>(std::max<std::int64_t>(rows, 1) * k));
  fill_random(a.data(), DType::u8, rows * k, 31);
  DeviceBuffer a_scale = dev.alloc(static_cast<std::size_t>((rows + 128) * (k / 128) * 4));
  fill_random(a_scale.data(), DType::f32, (rows + 128) * (k / 128), 33);
  DeviceBuffer c_out = dev.alloc(static_cast<std::size_t>(std::max<std::int64_t>(rows, 1) * n * 2));
  DeviceBuffer one = dev.alloc(sizeof(float));  // the per-tensor scales: 1.0
  const float unit = 1.0f;
  dev.copy_to_device(one.data(), &unit, sizeof unit);
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    cublasLtMatmulHeuristicResult_t algo{};
    const void *a = nullptr, *b = nullptr;
    void* c = nullptr;
  };
  std::vector<Plan> plans;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  const char* failed = "";
  auto fail = [&](cublasStatus_t st, const char* what) {
    if (st != CUBLAS_STATUS_SUCCESS && status == CUBLAS_STATUS_SUCCESS) status = st, failed = what;
    return st != CUBLAS_STATUS_SUCCESS;
  };
  std::int64_t row = 0;
  const auto* bw = static_cast<const std::uint8_t*>(b);
  const auto* bs = static_cast<const float*>(b_scale);
  for (int e = 0; e < kExperts && status == CUBLAS_STATUS_SUCCESS; ++e) {
    const int c = counts[static_cast<std::size_t>(e)];
    if (c == 0) continue;
    Plan p;
    p.a = bw + static_cast<std::int64_t>(e) * n * k;
    p.b = static_cast<const std::uint8_t*>(a.data()) + row * k;
    p.c = static_cast<std::uint16_t*>(c_out.data()) + row * n;
    const void* sa =
        block_scaled ? static_cast<const void*>(bs + static_cast<std::int64_t>(e) * (n / 128) * (k / 128)) : one.data();
    const void* sb = block_scaled
                         ? static_cast<const void*>(static_cast<const float*>(a_scale.data()) + row * (k / 128))
                         : one.data();
    const cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
    const cublasLtMatmulMatrixScale_t blk = block_scaled ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                                                         : CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F,
                                      vec = block_scaled ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                                         : CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    if (fail(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc")) break;
    fail(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t), "transa");
    fail(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof nn), "transb");
    fail(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &blk, sizeof blk), "a scale mode");
    fail(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &vec, sizeof vec), "b scale mode");
    fail(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa), "a scale");
    fail(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb), "b scale");
    fail(cublasLtMatrixLayoutCreate(&p.la, CUDA_R_8F_E4M3, static_cast<std::uint64_t>(k), static_cast<std::uint64_t>(n),
                                    k),
         "layout a");
    fail(cublasLtMatrixLayoutCreate(&p.lb, CUDA_R_8F_E4M3, static_cast<std::uint64_t>(k), static_cast<std::uint64_t>(c),
                                    k),
         "layout b");
    fail(
        cublasLtMatrixLayoutCreate(&p.lc, CUDA_R_16BF, static_cast<std::uint64_t>(n), static_cast<std::uint64_t>(c), n),
        "layout c");
    cublasLtMatmulPreference_t pref = nullptr;
    fail(cublasLtMatmulPreferenceCreate(&pref), "preference");
    const std::size_t ws = CublasLt::kWorkspace;
    if (pref) cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    int found = 0;
    if (status == CUBLAS_STATUS_SUCCESS &&
        !fail(cublasLtMatmulAlgoGetHeuristic(lt.handle, p.op, p.la, p.lb, p.lc, p.lc, pref, 1, &p.algo, &found),
              "heuristic") &&
        found == 0)
      fail(CUBLAS_STATUS_NOT_SUPPORTED, "heuristic found no algorithm");
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    plans.push_back(p);
    row += c;
  }
  double ms = 0;
  if (status == CUBLAS_STATUS_SUCCESS) {
    const float alpha = 1.0f, beta = 0.0f;
    ms = median_ms([&] {
      for (const Plan& p : plans) {
        const cublasStatus_t st =
            cublasLtMatmul(lt.handle, p.op, &alpha, p.a, p.la, p.b, p.lb, &beta, p.c, p.lc, p.c, p.lc, &p.algo.algo,
                           lt.workspace.data(), CublasLt::kWorkspace, nullptr);
        if (st != CUBLAS_STATUS_SUCCESS && status == CUBLAS_STATUS_SUCCESS) status = st, failed = "matmul";
      }
    });
  }
  for (Plan& p : plans) {
    if (p.op) cublasLtMatmulDescDestroy(p.op);
    for (auto* l : {p.la, p.lb, p.lc})
      if (l) cublasLtMatrixLayoutDestroy(l);
  }
  if (status != CUBLAS_STATUS_SUCCESS) {
    *note = str_cat("cublasLt fp8 block-scaled ", failed, " status ", static_cast<int>(status));
    return 0;
  }
  return ms;
}
#endif

void BM_expert_gemm(benchmark::State& state) {
  if (!device_or_skip(state)) return;
  const int layer = static_cast<int>(state.range(0)), quant = static_cast<int>(state.range(1));
  const std::int64_t tokens = state.range(2);
  const int routing = static_cast<int>(state.range(3));
  const int variant = static_cast<int>(state.range(4));  // 0: the heuristic; 1..9: alternative tiles
  const std::int64_t n = gemm_n(layer), k = gemm_k(layer), nv = tokens * kTopK;
  const DType d = quant == kFp8 ? DType::f8e4m3 : DType::bf16;
  Device& dev = Device::instance();
  Weights& w = weights(layer, quant);

  const std::vector<int> ids = route(tokens, routing, 1000 + static_cast<std::uint64_t>(tokens));
  const bool naive = fused_moe_naive(tokens, kTopK, kExperts);
  FusedMoeTile tile = fused_moe_tile(nv, kExperts, d);
  if (variant == 1) tile = {128, 128, 128 / dtype_size(d), 8, 8, quant == kFp8 ? 4 : 3};
  if (variant == 2) tile = {64, 128, 128 / dtype_size(d), 8, 8, 4};
  // 3, 4, 5: the warp-specialised tile with other rasterisations (GROUP_M 32 and 2) and 3 stages.
  if (variant == 3) tile = {128, 256, 128 / dtype_size(d), 32, 12, 4};
  if (variant == 4) tile = {128, 256, 128 / dtype_size(d), 2, 12, 4};
  if (variant == 5) tile = {128, 256, 128 / dtype_size(d), 8, 12, 3};
  // 6: the 32-row tile of the bucket below (the fp8 tuned file's 1,024 bucket, which its nearest-key
  // rule gives up to T = 1,536); 7: the heuristic's 64-row mma.sync tile of 24 to 64 entries per
  // expert, pinned (the A/B keeps it once a heuristic changes).
  if (variant == 6) tile = {32, 64, 128 / dtype_size(d), 1, 4, 4};
  if (variant == 7) tile = {64, quant == kFp8 ? 64 : 128, 128 / dtype_size(d), 8, 4, 4};
  // 8, 9: the decode tile (16 rows) with 6 and 4 stages (the heuristic's has 5): candidates for a
  // tuned file's small buckets.
  if (variant == 8) tile = {16, 64, 128 / dtype_size(d), 1, 4, 6};
  if (variant == 9) tile = {16, 64, 128 / dtype_size(d), 1, 4, 4};
  const Layout layout = align(ids, tile.block_m);

  const std::int64_t m = layer == kW13 ? tokens : nv, top_k = layer == kW13 ? kTopK : 1;
  DeviceBuffer a_buf = dev.alloc(static_cast<std::size_t>(m * k * dtype_size(d)));
  if (quant == kFp8)
    fill_random(a_buf.data(), DType::u8, m * k, 5);
  else
    fill_random(a_buf.data(), d, m * k, 5);
  DeviceBuffer c_buf = dev.alloc(static_cast<std::size_t>(nv * n * 2));
  DeviceBuffer a_scale, weights_buf = dev.alloc(static_cast<std::size_t>(nv * 4));
  fill_random(weights_buf.data(), DType::f32, nv, 7);
  DeviceBuffer sorted = upload(naive ? std::vector<int>{} : layout.sorted);
  DeviceBuffer experts = upload(naive ? ids : layout.experts);
  DeviceBuffer post = upload({layout.post});

  FusedMoeArgs args;
  args.a = Tensor::view(d, a_buf.data(), {m, k});
  args.b = Tensor::view(d, w.b.data(), {kExperts, n, k});
  args.c = Tensor::view(DType::bf16, c_buf.data(), {nv, n});
  if (quant == kFp8) {
    a_scale = dev.alloc(static_cast<std::size_t>(m * (k / 128) * 4));
    fill_random(a_scale.data(), DType::f32, m * (k / 128), 9);
    args.a_scale = Tensor::view(DType::f32, a_scale.data(), {m, k / 128});
    args.b_scale = Tensor::view(DType::f32, w.scale.data(), {kExperts, n / 128, k / 128});
  }
  if (layer == kW2) args.topk_weights = Tensor::view(DType::f32, weights_buf.data(), {nv});
  if (naive) {
    args.expert_ids = Tensor::view(DType::i32, experts.data(), {nv});
  } else {
    args.sorted_token_ids = Tensor::view(DType::i32, sorted.data(), {static_cast<std::int64_t>(layout.sorted.size())});
    args.expert_ids = Tensor::view(DType::i32, experts.data(), {static_cast<std::int64_t>(layout.experts.size())});
    args.num_tokens_post_padded = Tensor::view(DType::i32, post.data(), {1});
  }
  args.top_k = top_k;
  if (variant != 0) args.tile = tile;
  const FusedMoe kernel;
  kernel.validate(args);
  const LaunchSpec spec = kernel.launch_spec(args);
  const BoundKey bound = bind(kernel.def(), spec);
  const double ms = median_ms([&] { runtime().launch(bound, spec, nullptr); });
  state.counters["grid"] = spec.grid[0];

  const double flops = 2.0 * static_cast<double>(nv) * static_cast<double>(n) * static_cast<double>(k);
  std::int64_t used = 0;
  for (int c : layout.counts) used += c > 0;
  const double weight_bytes = static_cast<double>(used) * static_cast<double>(n * k * dtype_size(d));
  const double bytes = weight_bytes + static_cast<double>(m * k * dtype_size(d) + nv * n * 2);
  for (auto _ : state) state.SetIterationTime(ms / 1e3);
  state.counters["of_peak"] =
      roofline_guard(kernel.dispatch(args).to_string() + " GB/s", RooflineModel::bytes, bytes, ms / 1e3);
  roofline_guard(kernel.dispatch(args).to_string() + " TFLOPS", RooflineModel::flops, flops, ms / 1e3, d);
  state.counters["us"] = ms * 1e3;
  state.counters["TFLOPS"] = flops / (ms / 1e3) / 1e12;
  state.counters["GB/s"] = bytes / (ms / 1e3) / 1e9;
  state.counters["of_copy"] = bytes / (ms / 1e3) / 1e9 / copy_bandwidth_gbs();
  state.counters["experts_used"] = static_cast<double>(used);
  std::string label = kernel.dispatch(args).to_string();

#ifdef WARMKEY_HAVE_CUBLAS
  {  // cuBLAS bf16 on the same grouping (for fp8 too: the comparison point is cuBLAS bf16)
    Weights& wb = weights(layer, kBf16);
    DeviceBuffer a_sorted = dev.alloc(static_cast<std::size_t>(nv * k * 2));
    fill_random(a_sorted.data(), DType::bf16, nv * k, 21);
    DeviceBuffer c_sorted = dev.alloc(static_cast<std::size_t>(nv * n * 2));
    std::string note;
    const double grouped = cublas_ms(layout.counts, n, k, wb.b.data(), a_sorted.data(), c_sorted.data(), &note);
    const double loop = cublas_loop_ms(layout.counts, n, k, wb.b.data(), a_sorted.data(), c_sorted.data(), &note);
    state.counters["cublas_grouped_us"] = grouped * 1e3;
    state.counters["cublas_loop_us"] = loop * 1e3;
    const double cb = grouped > 0 && loop > 0 ? std::min(grouped, loop) : std::max(grouped, loop);
    if (cb > 0) {  // the faster of the two cuBLAS ways
      state.counters["cublas_TFLOPS"] = flops / (cb / 1e3) / 1e12;
      state.counters["vs_cublas"] = cb / ms;  // > 1: warmkey is faster
    } else {
      label += " cublas: " + note;
    }
    if (quant == kFp8 && tokens >= 2048) {  // the fp8 peer: cuBLASLt with the same block scales
      std::string lt_note;
      const double lt = cublaslt_fp8_ms(layout.counts, n, k, w.b.data(), w.scale.data(), true, &lt_note);
      if (lt > 0) {
        state.counters["cublaslt_fp8_TFLOPS"] = flops / (lt / 1e3) / 1e12;
        state.counters["vs_cublaslt_fp8"] = lt / ms;  // > 1: warmkey is faster
      } else {
        // No block-scaled fp8 in cuBLASLt here (Hopper): the per-tensor-scaled bound instead.
        std::string tensor_note;
        const double lt1 = cublaslt_fp8_ms(layout.counts, n, k, w.b.data(), w.scale.data(), false, &tensor_note);
        if (lt1 > 0) {
          state.counters["cublaslt_fp8_tensor_TFLOPS"] = flops / (lt1 / 1e3) / 1e12;
          state.counters["vs_cublaslt_fp8_tensor"] = lt1 / ms;  // > 1: warmkey is faster
          label += " (block-scaled cuBLASLt fp8: " + lt_note + "; peer: per-tensor scales)";
        } else {
          label += " " + lt_note + "; per-tensor: " + tensor_note;
        }
      }
    }
  }
#endif
  state.SetLabel(label);
}

// batched_moe on the same routing: expert e's tokens in rows [0, count_e) of its slice.
void BM_batched_moe(benchmark::State& state) {
  if (!device_or_skip(state)) return;
  const int layer = static_cast<int>(state.range(0)), quant = static_cast<int>(state.range(1));
  const std::int64_t tokens = state.range(2);
  const int routing = static_cast<int>(state.range(3));
  const std::int64_t n = gemm_n(layer), k = gemm_k(layer), nv = tokens * kTopK;
  const DType d = quant == kFp8 ? DType::f8e4m3 : DType::bf16;
  Device& dev = Device::instance();
  Weights& w = weights(layer, quant);
  const std::vector<int> ids = route(tokens, routing, 1000 + static_cast<std::uint64_t>(tokens));
  const Layout layout = align(ids, 16);
  const std::int64_t cap = std::max<std::int64_t>(1, *std::max_element(layout.counts.begin(), layout.counts.end()));
  DeviceBuffer a_buf = dev.alloc(static_cast<std::size_t>(kExperts * cap * k * dtype_size(d)));
  fill_random(a_buf.data(), quant == kFp8 ? DType::u8 : d, kExperts * cap * k, 5);
  DeviceBuffer c_buf = dev.alloc(static_cast<std::size_t>(kExperts * cap * n * 2));
  DeviceBuffer counts = upload(layout.counts), a_scale;
  BatchedMoeArgs args;
  args.a = Tensor::view(d, a_buf.data(), {kExperts, cap, k});
  args.b = Tensor::view(d, w.b.data(), {kExperts, n, k});
  args.c = Tensor::view(DType::bf16, c_buf.data(), {kExperts, cap, n});
  args.expert_num_tokens = Tensor::view(DType::i32, counts.data(), {kExperts});
  if (quant == kFp8) {
    a_scale = dev.alloc(static_cast<std::size_t>(kExperts * cap * (k / 128) * 4));
    fill_random(a_scale.data(), DType::f32, kExperts * cap * (k / 128), 9);
    args.a_scale = Tensor::view(DType::f32, a_scale.data(), {kExperts, cap, k / 128});
    args.b_scale = Tensor::view(DType::f32, w.scale.data(), {kExperts, n / 128, k / 128});
  }
  // variant 1 (prefill capacities, whose heuristic tile is the warp-specialised one): the mma.sync
  // 128-row tile it replaced, for an A/B of the same batch in the same run.
  if (state.range(4) == 1 && batched_moe_tile(cap, d).warps == 12)
    args.tile = FusedMoeTile{128, quant == kFp8 ? 64 : 128, 128 / dtype_size(d), 1, 8, 4};
  const BatchedMoe kernel;
  kernel.validate(args);
  const LaunchSpec spec = kernel.launch_spec(args);
  const BoundKey bound = bind(kernel.def(), spec);
  const double ms = median_ms([&] { runtime().launch(bound, spec, nullptr); });
  const double flops = 2.0 * static_cast<double>(nv) * static_cast<double>(n) * static_cast<double>(k);
  std::int64_t used = 0;
  for (int c : layout.counts) used += c > 0;
  const double bytes = static_cast<double>(used) * static_cast<double>(n * k * dtype_size(d)) +
                       static_cast<double>(nv * (k * dtype_size(d) + n * 2));
  for (auto _ : state) state.SetIterationTime(ms / 1e3);
  state.counters["of_peak"] =
      roofline_guard(kernel.dispatch(args).to_string() + " GB/s", RooflineModel::bytes, bytes, ms / 1e3);
  roofline_guard(kernel.dispatch(args).to_string() + " TFLOPS", RooflineModel::flops, flops, ms / 1e3, d);
  state.counters["us"] = ms * 1e3;
  state.counters["TFLOPS"] = flops / (ms / 1e3) / 1e12;
  state.counters["GB/s"] = bytes / (ms / 1e3) / 1e9;
  state.counters["of_copy"] = bytes / (ms / 1e3) / 1e9 / copy_bandwidth_gbs();
  state.counters["capacity"] = static_cast<double>(cap);
  std::string label = kernel.dispatch(args).to_string();
#ifdef WARMKEY_HAVE_CUBLAS
  {
    Weights& wb = weights(layer, kBf16);
    DeviceBuffer a_sorted = dev.alloc(static_cast<std::size_t>(nv * k * 2));
    fill_random(a_sorted.data(), DType::bf16, nv * k, 21);
    DeviceBuffer c_sorted = dev.alloc(static_cast<std::size_t>(nv * n * 2));
    std::string note;
    const double grouped = cublas_ms(layout.counts, n, k, wb.b.data(), a_sorted.data(), c_sorted.data(), &note);
    const double loop = cublas_loop_ms(layout.counts, n, k, wb.b.data(), a_sorted.data(), c_sorted.data(), &note);
    const double cb = grouped > 0 && loop > 0 ? std::min(grouped, loop) : std::max(grouped, loop);
    if (cb > 0) {
      state.counters["cublas_TFLOPS"] = flops / (cb / 1e3) / 1e12;
      state.counters["vs_cublas"] = cb / ms;
    } else {
      label += " cublas: " + note;
    }
  }
#endif
  state.SetLabel(label);
}

// NVFP4 expert weights of a layer: packed e2m1 codes (random bytes: every code), e4m3 scales (valid
// codes 0x30..0x3f: 0.5 .. 1.875, never NaN), per-expert global scales; allocated once per layer.
struct Nvfp4Weights {
  DeviceBuffer b, scale, global;
};
Nvfp4Weights& nvfp4_weights(int layer) {
  static std::map<int, Nvfp4Weights> all;
  auto it = all.find(layer);
  if (it != all.end()) return it->second;
  Device& dev = Device::instance();
  const std::int64_t n = gemm_n(layer), k = gemm_k(layer);
  Nvfp4Weights w;
  w.b = dev.alloc(static_cast<std::size_t>(kExperts * n * k / 2));
  fill_random(w.b.data(), DType::u8, kExperts * n * k / 2, 31 + layer);
  w.scale = dev.alloc(static_cast<std::size_t>(kExperts * n * k / 16));
  std::vector<std::uint8_t> codes(static_cast<std::size_t>(kExperts * n * k / 16));
  for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<std::uint8_t>(0x30 + (i * 7 + i / 13) % 16);
  dev.copy_to_device(w.scale.data(), codes.data(), codes.size());
  w.global = dev.alloc(static_cast<std::size_t>(kExperts * 4));
  const std::vector<float> ones(kExperts, 1.0f / 64);
  dev.copy_to_device(w.global.data(), ones.data(), ones.size() * 4);
  return all.emplace(layer, std::move(w)).first->second;
}

// nvfp4_moe on the same routing and layout as BM_expert_gemm (bf16 activations and outputs); decode
// bandwidth counts the NVFP4 bytes (K / 2 + K / 16 per weight row).
void BM_nvfp4_moe(benchmark::State& state) {
  if (!device_or_skip(state)) return;
  const int layer = static_cast<int>(state.range(0));
  const std::int64_t tokens = state.range(1);
  const int routing = static_cast<int>(state.range(2));
  const std::int64_t n = gemm_n(layer), k = gemm_k(layer), nv = tokens * kTopK;
  Device& dev = Device::instance();
  Nvfp4Weights& w = nvfp4_weights(layer);
  const std::vector<int> ids = route(tokens, routing, 1000 + static_cast<std::uint64_t>(tokens));
  const bool naive = fused_moe_naive(tokens, kTopK, kExperts);
  // variant (batches whose heuristic tile streams: up to 24 entries per expert): 1 the staged tile
  // (BLOCK_K 64) the streaming one replaced at decode; 2-4 other streaming tiles (32 x 8 warps, 64 x 4,
  // and 4 the 64 x 8 the heuristic took before 2026-12-06's register decode: BLOCK_N x warps); from
  // 8 to 24 entries per expert also 5 the next bucket's 64 x 128 tile and 7 the
  // staged 32 x 64 tile the streaming one replaced there (2026-12-06). Batches whose heuristic tile
  // is the staged 64 x 128 one: 6 the streaming tile, 8 the warp-specialised tile with GROUP_M 2
  // (fused_moe's took that bucket 1.4-2.0x faster in fp8). Prefill batches whose heuristic tile is the
  // warp-specialised one: 1 the staged 128 x 128 tile it replaced. An A/B of the same batch in the
  // same run.
  const int variant = static_cast<int>(state.range(3));
  FusedMoeTile tile = nvfp4_moe_tile(nv, kExperts, k);
  const bool mid = nv > kFusedMoeEntriesPerExpertBoundaries[0] * kExperts && tile.block_k == 128;
  if (mid && variant == 5) tile = {64, 128, 64, 8, 4, 4};
  if (mid && variant == 7) tile = {32, 64, 64, 1, 4, 4};
  if (tile.block_m == 64 && variant == 6) tile = {16, 32, 128, 1, 4, 1};
  if (tile.block_m == 64 && variant == 8) tile = {128, 256, 64, 2, 12, 4};  // warp-specialised, GROUP_M 2
  // 9-12, the same bucket: the staged tile with 8 warps, with 6 stages, the 128 x 128 tile of 8 warps,
  // and BLOCK_N 64 (decode in shared memory: more warps a tile, more bytes in flight, fewer).
  if (tile.block_m == 64 && variant == 9) tile = {64, 128, 64, 8, 8, 4};
  if (tile.block_m == 64 && variant == 10) tile = {64, 128, 64, 8, 4, 6};
  if (tile.block_m == 64 && variant == 11) tile = {128, 128, 64, 8, 8, 3};
  if (tile.block_m == 64 && variant == 12) tile = {64, 64, 64, 8, 4, 4};
  if (variant > 0 && variant <= 4 && tile.block_k == 128) {
    static const FusedMoeTile kVariants[] = {
        {16, 64, 64, 1, 4, 6}, {16, 32, 128, 1, 8, 1}, {16, 64, 128, 1, 4, 1}, {16, 64, 128, 1, 8, 1}};
    tile = kVariants[variant - 1];
  }
  if (variant == 1 && tile.warps == 12) tile = {128, 128, 64, 8, 8, 3};
  const Layout layout = align(ids, tile.block_m);
  const std::int64_t m = layer == kW13 ? tokens : nv, top_k = layer == kW13 ? kTopK : 1;
  DeviceBuffer a_buf = dev.alloc(static_cast<std::size_t>(m * k * 2));
  fill_random(a_buf.data(), DType::bf16, m * k, 5);
  DeviceBuffer c_buf = dev.alloc(static_cast<std::size_t>(nv * n * 2));
  DeviceBuffer weights_buf = dev.alloc(static_cast<std::size_t>(nv * 4));
  fill_random(weights_buf.data(), DType::f32, nv, 7);
  DeviceBuffer sorted = upload(naive ? std::vector<int>{} : layout.sorted);
  DeviceBuffer experts = upload(naive ? ids : layout.experts);
  DeviceBuffer post = upload({layout.post});

  Nvfp4MoeArgs args;
  args.a = Tensor::view(DType::bf16, a_buf.data(), {m, k});
  args.b = Tensor::view(DType::u8, w.b.data(), {kExperts, n, k / 2});
  args.b_scale = Tensor::view(DType::f8e4m3, w.scale.data(), {kExperts, n, k / 16});
  args.b_global_scale = Tensor::view(DType::f32, w.global.data(), {kExperts});
  args.c = Tensor::view(DType::bf16, c_buf.data(), {nv, n});
  if (layer == kW2) args.topk_weights = Tensor::view(DType::f32, weights_buf.data(), {nv});
  if (naive) {
    args.expert_ids = Tensor::view(DType::i32, experts.data(), {nv});
  } else {
    args.sorted_token_ids = Tensor::view(DType::i32, sorted.data(), {static_cast<std::int64_t>(layout.sorted.size())});
    args.expert_ids = Tensor::view(DType::i32, experts.data(), {static_cast<std::int64_t>(layout.experts.size())});
    args.num_tokens_post_padded = Tensor::view(DType::i32, post.data(), {1});
  }
  args.top_k = top_k;
  args.tile = tile;
  const Nvfp4Moe kernel;
  kernel.validate(args);
  const LaunchSpec spec = kernel.launch_spec(args);
  const BoundKey bound = bind(kernel.def(), spec);
  const double ms = median_ms([&] { runtime().launch(bound, spec, nullptr); });
  state.counters["grid"] = spec.grid[0];

  const double flops = 2.0 * static_cast<double>(nv) * static_cast<double>(n) * static_cast<double>(k);
  std::int64_t used = 0;
  for (int c : layout.counts) used += c > 0;
  const double weight_bytes = static_cast<double>(used) * static_cast<double>(n * (k / 2 + k / 16) + 4);
  const double bytes = weight_bytes + static_cast<double>(m * k * 2 + nv * n * 2);
  for (auto _ : state) state.SetIterationTime(ms / 1e3);
  state.counters["of_peak"] =
      roofline_guard(kernel.dispatch(args).to_string() + " GB/s", RooflineModel::bytes, bytes, ms / 1e3);
  roofline_guard(kernel.dispatch(args).to_string() + " TFLOPS", RooflineModel::flops, flops, ms / 1e3, DType::bf16);
  state.counters["us"] = ms * 1e3;
  state.counters["TFLOPS"] = flops / (ms / 1e3) / 1e12;
  state.counters["GB/s"] = bytes / (ms / 1e3) / 1e9;
  state.counters["of_copy"] = bytes / (ms / 1e3) / 1e9 / copy_bandwidth_gbs();
  state.counters["experts_used"] = static_cast<double>(used);
  std::string label = kernel.dispatch(args).to_string();
#ifdef WARMKEY_HAVE_CUBLAS
  {  // cuBLAS bf16 on the same grouping: the dense baseline NVFP4 emulation is compared with
    Weights& wb = weights(layer, kBf16);
    DeviceBuffer a_sorted = dev.alloc(static_cast<std::size_t>(nv * k * 2));
    fill_random(a_sorted.data(), DType::bf16, nv * k, 21);
    DeviceBuffer c_sorted = dev.alloc(static_cast<std::size_t>(nv * n * 2));
    std::string note;
    const double grouped = cublas_ms(layout.counts, n, k, wb.b.data(), a_sorted.data(), c_sorted.data(), &note);
    const double loop = cublas_loop_ms(layout.counts, n, k, wb.b.data(), a_sorted.data(), c_sorted.data(), &note);
    state.counters["cublas_grouped_us"] = grouped * 1e3;
    state.counters["cublas_loop_us"] = loop * 1e3;
    const double cb = grouped > 0 && loop > 0 ? std::min(grouped, loop) : std::max(grouped, loop);
    if (cb > 0) {
      state.counters["cublas_TFLOPS"] = flops / (cb / 1e3) / 1e12;
      state.counters["vs_cublas"] = cb / ms;  // > 1: nvfp4_moe is faster than cuBLAS bf16
    } else {
      label += " cublas: " + note;
    }
  }
#endif
  state.SetLabel(label);
}

// ---- the shared expert ----------------------------------------------------------------------------
// Issue 23 item 6: the shared expert's two dense GEMMs (gate/up: N = 2 I_s, K = H; down: N = H,
// K = I_s; I_s = n_shared_experts * I, sizes from the embedded config "dsv4-flash"), bf16 in and
// out, through fused_moe as one expert (E = 1, TOP_K = 1, moe_align's sorted layout built on the
// host: the naive layout never applies, T * 1 * 4 > E; the tile from fused_moe's heuristic, no
// routed weight), through the layer's cuBLAS call (replay/layer/layer_cublas.cpp) and through
// cuBLASLt with its heuristic's first algorithm (and the fastest correct one of its first 16,
// cublaslt_best_*), in the same program and run.

struct SharedShape {
  std::int64_t n, k;
};
SharedShape shared_shape(int layer) {
  static const ModelConfig config = load_config("dsv4-flash");
  const std::int64_t is = config.n_shared_experts * config.moe_intermediate_size;
  return layer == kW13 ? SharedShape{2 * is, config.hidden_size} : SharedShape{config.hidden_size, is};
}

// One input set of a shared-expert GEMM and an output per peer. One expert's W13 is 32 MiB, under
// the H200's 50 MB L2: launches rotate over rotating_sets() of these, so none reads warm weights.
struct SharedSet {
  DeviceBuffer b, a, c_fused, c_cublas, c_lt;
};

#ifdef WARMKEY_HAVE_CUBLAS
// median_ms (the file's timing: 10 back-to-back launches, median of 5, after one untimed launch)
// with launch i on set i mod sets; the untimed launch takes set 0.
template <class Fn>
double median_ms_rotating(std::size_t sets, Fn&& fn) {
  std::size_t next = 0;
  return median_ms([&] {
    fn(next);
    next = (next + 1) % sets;
  });
}

// max |got - want| / max |want| over `count` bf16 values on the device; +inf when either holds a
// NaN or infinity (outputs are poisoned with NaN before the checked launch) or want is all zeros.
double bf16_rel_diff(const void* got, const void* want, std::int64_t count) {
  Device& dev = Device::instance();
  std::vector<std::uint16_t> g(static_cast<std::size_t>(count)), w(static_cast<std::size_t>(count));
  dev.copy_to_host(g.data(), got, g.size() * 2);
  dev.copy_to_host(w.data(), want, w.size() * 2);
  double max_want = 0, max_diff = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double x = bf16_bits_to_float(g[i]), y = bf16_bits_to_float(w[i]);
    if (!std::isfinite(x) || !std::isfinite(y)) return std::numeric_limits<double>::infinity();
    max_want = std::max(max_want, std::abs(y));
    max_diff = std::max(max_diff, std::abs(x - y));
  }
  return max_want > 0 ? max_diff / max_want : std::numeric_limits<double>::infinity();
}

// The cuBLAS workspace the layer binds (replay/layer/layer_cublas.h), given to cuBLASLt too.
constexpr std::size_t kLayerWorkspace = 32u << 20;

// The same GEMM as one cublasLtMatmul (same orientation, bf16, CUBLAS_COMPUTE_32F, f32 scales) with
// the algorithms cublasLtMatmulAlgoGetHeuristic returns for a 32 MiB workspace, at most kLtAlgos:
// the first is the peer, the others the benchmark also times one by one (a startup sweep an engine
// could make: is any of them nearer the copy roofline at decode sizes than the first?). One plan
// serves every set (the pointers are the call's).
constexpr int kLtAlgos = 16;
struct SharedLtPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> all;  // not empty once status is success
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  const char* failed = "";
  SharedLtPlan(cublasLtHandle_t h, std::int64_t m, std::int64_t n, std::int64_t k) {
    auto ok = [&](cublasStatus_t st, const char* what) {
      if (st != CUBLAS_STATUS_SUCCESS && status == CUBLAS_STATUS_SUCCESS) status = st, failed = what;
      return status == CUBLAS_STATUS_SUCCESS;
    };
    const cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
    const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
    if (!ok(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc") ||
        !ok(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t), "transa") ||
        !ok(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof nn), "transb") ||
        !ok(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, u(k), u(n), k), "layout a") ||
        !ok(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, u(k), u(m), k), "layout b") ||
        !ok(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, u(n), u(m), n), "layout c"))
      return;
    cublasLtMatmulPreference_t pref = nullptr;
    if (!ok(cublasLtMatmulPreferenceCreate(&pref), "preference")) return;
    const std::size_t ws = kLayerWorkspace;
    ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
       "workspace preference");
    int found = 0;
    all.resize(kLtAlgos);
    if (ok(cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, kLtAlgos, all.data(), &found), "heuristic") &&
        found == 0)
      ok(CUBLAS_STATUS_NOT_SUPPORTED, "heuristic found no algorithm");
    all.resize(static_cast<std::size_t>(std::max(found, 0)));
    cublasLtMatmulPreferenceDestroy(pref);
  }
  // The algorithm's split-K count (1: none), or 0 when the attribute cannot be read.
  static int split_k(const cublasLtMatmulAlgo_t& a) {
    int v = 0;
    std::size_t written = 0;
    return cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &v, sizeof v, &written) ==
                   CUBLAS_STATUS_SUCCESS
               ? v
               : 0;
  }
  ~SharedLtPlan() {
    if (op) cublasLtMatmulDescDestroy(op);
    for (auto* l : {la, lb, lc})
      if (l) cublasLtMatrixLayoutDestroy(l);
  }
  SharedLtPlan(const SharedLtPlan&) = delete;
  SharedLtPlan& operator=(const SharedLtPlan&) = delete;
};

// The figures of one peer: time, GB/s, TFLOPS and of_peak under `prefix`; both roofline guards
// first (a ratio above 1.0 ends the program before any figure is reported).
void shared_figures(benchmark::State& state, const std::string& prefix, const std::string& figure, double ms,
                    double bytes, double flops) {
  const double of_peak = roofline_guard(figure + " GB/s", RooflineModel::bytes, bytes, ms / 1e3);
  roofline_guard(figure + " TFLOPS", RooflineModel::flops, flops, ms / 1e3, DType::bf16);
  state.counters[prefix + "us"] = ms * 1e3;
  state.counters[prefix + "GB/s"] = bytes / (ms / 1e3) / 1e9;
  state.counters[prefix + "TFLOPS"] = flops / (ms / 1e3) / 1e12;
  if (of_peak > 0) state.counters[prefix + "of_peak"] = of_peak;
}
#endif

// Marks the case failed (google-benchmark's error, no figures) with `why`.
void shared_fail(benchmark::State& state, const std::string& why) {
  state.SkipWithError(why.c_str());
  for (auto _ : state) {
  }
}

// One shared-expert GEMM at T tokens: fused_moe (E = 1), the layer's cublasGemmEx and cuBLASLt on
// the same rotating sets. Counters: us / GB/s / TFLOPS / of_peak for fused_moe, the same prefixed
// cublas_ and cublaslt_, bytes (weights + activations in + out, each once), fused_over_cublas and
// fused_over_cublaslt (fused_moe's time / the peer's: > 1, cuBLAS is faster), rel_diff and
// cublaslt_rel_diff (max |x - cuBLAS| / max |cuBLAS| on set 0). A case whose fused_moe or cuBLASLt
// output differs from cuBLAS's beyond fused_moe's bf16 tolerance fails, as does one without cuBLAS.
void BM_shared_expert(benchmark::State& state) {
  if (!device_or_skip(state)) return;
  const int layer = static_cast<int>(state.range(0));
  const std::int64_t t = state.range(1);
  const SharedShape dims = shared_shape(layer);
  const std::int64_t n = dims.n, k = dims.k;
#ifndef WARMKEY_HAVE_CUBLAS
  (void)t, (void)n, (void)k;
  shared_fail(state, "built without cuBLAS: nothing to check fused_moe against");
#else
  Device& dev = Device::instance();
  const double bytes = static_cast<double>((n * k + t * k + t * n) * 2);
  const double flops = 2.0 * static_cast<double>(t) * static_cast<double>(n) * static_cast<double>(k);
  const std::size_t sets = rotating_sets(static_cast<std::size_t>(bytes));
  std::vector<SharedSet> set(sets);
  for (std::size_t i = 0; i < sets; ++i) {
    SharedSet& s = set[i];
    s.b = dev.alloc(static_cast<std::size_t>(n * k * 2));
    fill_random(s.b.data(), DType::bf16, n * k, 1000 + 2 * i);
    s.a = dev.alloc(static_cast<std::size_t>(t * k * 2));
    fill_random(s.a.data(), DType::bf16, t * k, 1001 + 2 * i);
    for (DeviceBuffer* c : {&s.c_fused, &s.c_cublas, &s.c_lt}) {
      *c = dev.alloc(static_cast<std::size_t>(t * n * 2));
      dev.fill_bytes(c->data(), 0xFF, static_cast<std::size_t>(t * n * 2));  // bf16 NaN
    }
  }

  // fused_moe: one expert, every entry its own row (TOP_K 1), no routed weight.
  const FusedMoeTile tile = fused_moe_tile(t, 1, DType::bf16);
  const Layout layout = align(std::vector<int>(static_cast<std::size_t>(t), 0), tile.block_m, 1);
  DeviceBuffer sorted = upload(layout.sorted), experts = upload(layout.experts), post = upload({layout.post});
  const FusedMoe kernel;
  std::vector<FusedMoeArgs> args(sets);
  std::vector<PreparedLaunch> launches;
  launches.reserve(sets);
  for (std::size_t i = 0; i < sets; ++i) {
    FusedMoeArgs& x = args[i];
    x.a = Tensor::view(DType::bf16, set[i].a.data(), {t, k});
    x.b = Tensor::view(DType::bf16, set[i].b.data(), {1, n, k});
    x.c = Tensor::view(DType::bf16, set[i].c_fused.data(), {t, n});
    x.sorted_token_ids = Tensor::view(DType::i32, sorted.data(), {static_cast<std::int64_t>(layout.sorted.size())});
    x.expert_ids = Tensor::view(DType::i32, experts.data(), {static_cast<std::int64_t>(layout.experts.size())});
    x.num_tokens_post_padded = Tensor::view(DType::i32, post.data(), {1});
    x.top_k = 1;
    kernel.validate(x);
    const LaunchSpec spec = kernel.launch_spec(x);
    launches.push_back({bind(kernel.def(), spec), spec});
  }
  auto fused = [&](std::size_t i) { runtime().launch(launches[i].bound, launches[i].spec, nullptr); };

  // The layer's own call (replay/layer/layer_cublas.cpp: the stream and its workspace bound before
  // each GEMM, cublasGemmEx OP_T / OP_N, CUBLAS_COMPUTE_32F), as its decode lane runs both shared GEMMs.
  replay::layer::Cublas& cb = replay::layer::Cublas::instance();
  if (!cb.available()) return shared_fail(state, str_cat("layer cuBLAS: ", cb.unavailable_reason()));
  std::string cublas_error;
  auto cublas = [&](std::size_t i) {
    try {
      cb.gemm(DType::bf16, t, n, k, set[i].a.data(), set[i].b.data(), set[i].c_cublas.data(), false, nullptr);
    } catch (const DeviceError& e) {
      cublas_error = e.what();
    }
  };
  static CublasLt lt;
  std::string lt_note;
  std::optional<SharedLtPlan> plan;
  if (lt.handle) {
    plan.emplace(lt.handle, t, n, k);
    if (plan->status != CUBLAS_STATUS_SUCCESS)
      lt_note = str_cat("cublasLt ", plan->failed, " status ", static_cast<int>(plan->status));
  } else {
    lt_note = "cublasLtCreate failed";
  }
  const bool have_lt = lt_note.empty();
  cublasStatus_t lt_status = CUBLAS_STATUS_SUCCESS;
  const cublasLtMatmulAlgo_t* lt_algo = have_lt ? &plan->all.front().algo : nullptr;
  auto cublaslt = [&](std::size_t i) {
    const float alpha = 1.0f, beta = 0.0f;
    const cublasStatus_t st = cublasLtMatmul(lt.handle, plan->op, &alpha, set[i].b.data(), plan->la, set[i].a.data(),
                                             plan->lb, &beta, set[i].c_lt.data(), plan->lc, set[i].c_lt.data(),
                                             plan->lc, lt_algo, lt.workspace.data(), kLayerWorkspace, nullptr);
    if (st != CUBLAS_STATUS_SUCCESS) lt_status = st;
  };

  // Check before timing, on set 0 (outputs still NaN): a wrong kernel cannot look fast.
  fused(0);
  cublas(0);
  if (have_lt) cublaslt(0);
  dev.synchronize();
  if (!cublas_error.empty()) return shared_fail(state, cublas_error);
  // Each output is within fused_moe's bf16 tolerance (the oracle's, 2^-7) of the exact product, so
  // the two are within twice it of each other; a wrong kernel is off by far more.
  const double tolerance = 2 * equivalence::fused_moe_rel_tolerance(DType::bf16, DType::bf16);
  const double diff = bf16_rel_diff(set[0].c_fused.data(), set[0].c_cublas.data(), t * n);
  if (!(diff <= tolerance))
    return shared_fail(state,
                       str_cat("fused_moe differs from cuBLAS: max |diff| / max |cuBLAS| = ", diff, " > ", tolerance));
  double lt_diff = 0;
  if (have_lt && lt_status == CUBLAS_STATUS_SUCCESS) {
    lt_diff = bf16_rel_diff(set[0].c_lt.data(), set[0].c_cublas.data(), t * n);
    if (!(lt_diff <= tolerance))
      return shared_fail(
          state, str_cat("cuBLASLt differs from cuBLAS: max |diff| / max |cuBLAS| = ", lt_diff, " > ", tolerance));
  }

  const double fused_ms = median_ms_rotating(sets, fused);
  const double cb_ms = median_ms_rotating(sets, cublas);
  if (!cublas_error.empty()) return shared_fail(state, cublas_error);
  double lt_ms = 0;
  if (have_lt && lt_status == CUBLAS_STATUS_SUCCESS) lt_ms = median_ms_rotating(sets, cublaslt);
  if (lt_status != CUBLAS_STATUS_SUCCESS) lt_note = str_cat("cublasLtMatmul status ", static_cast<int>(lt_status));
  // The heuristic's other algorithms, each checked against cuBLAS on set 0 (NaN-poisoned first)
  // before it is timed; the fastest correct one is reported (cublaslt_best_*; index 0 is the first).
  double best_ms = lt_ms;
  int best_index = 0, checked = lt_ms > 0 ? 1 : 0, wrong = 0;
  if (lt_ms > 0) {
    for (std::size_t j = 1; j < plan->all.size(); ++j) {
      lt_algo = &plan->all[j].algo;
      lt_status = CUBLAS_STATUS_SUCCESS;
      dev.fill_bytes(set[0].c_lt.data(), 0xFF, static_cast<std::size_t>(t * n * 2));
      cublaslt(0);
      dev.synchronize();
      if (lt_status != CUBLAS_STATUS_SUCCESS) continue;
      if (!(bf16_rel_diff(set[0].c_lt.data(), set[0].c_cublas.data(), t * n) <= tolerance)) {
        ++wrong;
        continue;
      }
      ++checked;
      const double ms = median_ms_rotating(sets, cublaslt);
      if (lt_status == CUBLAS_STATUS_SUCCESS && ms < best_ms) best_ms = ms, best_index = static_cast<int>(j);
    }
    lt_algo = &plan->all.front().algo;
  }

  const std::string key = kernel.dispatch(args[0]).to_string();
  const std::string shape = str_cat("shared ", layer == kW13 ? "gate_up" : "down", " T=", t, " N=", n, " K=", k);
  for (auto _ : state) state.SetIterationTime(fused_ms / 1e3);
  shared_figures(state, "", shape + " fused_moe " + key, fused_ms, bytes, flops);
  shared_figures(state, "cublas_", shape + " cublasGemmEx", cb_ms, bytes, flops);
  if (lt_ms > 0) shared_figures(state, "cublaslt_", shape + " cublasLtMatmul", lt_ms, bytes, flops);
  if (lt_ms > 0) {
    shared_figures(state, "cublaslt_best_", shape + " cublasLtMatmul (best of the heuristic's)", best_ms, bytes, flops);
    state.counters["cublaslt_best_index"] = best_index;
    state.counters["cublaslt_best_splitk"] =
        SharedLtPlan::split_k(plan->all[static_cast<std::size_t>(best_index)].algo);
    state.counters["cublaslt_algos"] = static_cast<double>(plan->all.size());
    state.counters["cublaslt_algos_checked"] = checked;
    state.counters["cublaslt_algos_wrong"] = wrong;
  }
  state.counters["bytes"] = bytes;
  state.counters["fused_over_cublas"] = fused_ms / cb_ms;
  if (lt_ms > 0) state.counters["fused_over_cublaslt"] = fused_ms / lt_ms;
  state.counters["rel_diff"] = diff;
  if (lt_ms > 0) state.counters["cublaslt_rel_diff"] = lt_diff;
  state.counters["sets"] = static_cast<double>(sets);
  std::string label =
      str_cat(shape, ", faster: ", fused_ms < cb_ms ? "fused_moe" : "cuBLAS", " (tile ", tile, "; ", key, ")");
  if (!lt_note.empty()) label += " cublasLt: " + lt_note;
  state.SetLabel(label);
#endif
}

void shared_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"layer", "T"});
  for (int layer : {kW13, kW2}) {
    for (std::int64_t t : {1, 8, 64, 256, 2048}) b->Args({layer, t});
  }
}

void nvfp4_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"layer", "T", "skewed", "variant"});
  for (int layer : {kW13, kW2}) {
    for (std::int64_t t : {1, 8, 64, 256}) {
      for (int variant : {0, 1, 2, 3, 4}) b->Args({layer, t, kUniform, variant});
    }
    for (std::int64_t t : {342, 512, 1024}) {  // 8 < entries per expert <= 24: streaming
      for (int variant : {0, 2, 3, 4, 5, 7}) b->Args({layer, t, kUniform, variant});
    }
    for (std::int64_t t : {1100, 1365, 1536, 2048, 2730}) {  // 24 < entries per expert <= 64: staged 64 x 128
      for (int variant : {0, 6}) b->Args({layer, t, kUniform, variant});
      // 8-12 lost to the staged 64 x 128 tile on an H100 (2026-12-06): only with the other A/B tiles.
      if (const char* v = std::getenv("WARMKEY_BENCH_TILE_VARIANTS"); v && *v == '1') {
        for (int variant : {8, 9, 10, 11, 12}) b->Args({layer, t, kUniform, variant});
      }
    }
    b->Args({layer, 2048, kSkewed, 0});
    for (std::int64_t t : {8192}) {
      for (int r : {kUniform, kSkewed}) b->Args({layer, t, r, 0});
    }
    for (std::int64_t t : {8192, 16384}) b->Args({layer, t, kUniform, 1});
    b->Args({layer, 16384, kUniform, 0});
  }
}

void batched_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"layer", "fp8", "T", "skewed", "variant"});
  for (int layer : {kW13, kW2}) {
    for (int quant : {kBf16, kFp8}) {
      for (std::int64_t t : {1, 8, 64, 256}) b->Args({layer, quant, t, kUniform, 0});
      for (std::int64_t t : {2048, 8192, 16384}) {
        for (int variant : {0, 1}) b->Args({layer, quant, t, kUniform, variant});
      }
    }
  }
}

void args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"layer", "fp8", "T", "skewed", "tile"});
  for (int layer : {kW13, kW2}) {
    for (int quant : {kBf16, kFp8}) {
      for (std::int64_t t : {1, 8, 64, 256}) b->Args({layer, quant, t, kUniform, 0});
      for (std::int64_t t : {2048, 8192, 16384}) {
        for (int r : {kUniform, kSkewed}) b->Args({layer, quant, t, r, 0});
      }
      if (const char* v = std::getenv("WARMKEY_BENCH_TILE_VARIANTS"); v && *v == '1') {
        for (std::int64_t t : {2048, 8192, 16384}) {
          for (int variant : {1, 2, 3, 4, 5}) b->Args({layer, quant, t, kUniform, variant});
        }
        for (std::int64_t t : {8192, 16384}) {
          b->Args({layer, quant, t, kBlocked, 0});
          b->Args({layer, quant, t, kUniform, 5});
        }
        // 25-64 entries per expert: the heuristic's warp-specialised tile with GROUP_M 2 against
        // the same pinned (variant 4), the 32-row tile (6) and the 64-row tile it replaced (7:
        // 1.4-2.0x slower in fp8 at T = 1,100-2,730 on an H100, 2026-12-06); above 64, the
        // heuristic's GROUP_M 8 against 2 (4).
        for (std::int64_t t : {1100, 1536, 2730}) {
          for (int variant : {0, 4, 6, 7}) b->Args({layer, quant, t, kUniform, variant});
        }
        for (std::int64_t t : {4096}) {
          for (int variant : {0, 4}) b->Args({layer, quant, t, kUniform, variant});
        }
        for (std::int64_t t : {1, 8, 64, 256}) {
          for (int variant : {8, 9}) b->Args({layer, quant, t, kUniform, variant});
        }
      }
    }
  }
}

BENCHMARK(BM_d2d_copy)->UseManualTime()->Iterations(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_expert_gemm)->Apply(args)->UseManualTime()->Iterations(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_batched_moe)->Apply(batched_args)->UseManualTime()->Iterations(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_nvfp4_moe)->Apply(nvfp4_args)->UseManualTime()->Iterations(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_shared_expert)->Apply(shared_args)->UseManualTime()->Iterations(1)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace warmkey::bench

BENCHMARK_MAIN();
