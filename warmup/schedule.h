// How a warmup packs keys into NVRTC programs and orders them: the one batch-size policy.
#pragma once

#include <cstddef>
#include <vector>

#include "warmup/signature.h"

namespace warmkey {

// At most this many instantiations per program: it bounds the tail one slow program adds and the
// cost of a failed program (its keys are then compiled one by one).
inline constexpr std::size_t kMaxBatch = 16;
// Programs per job the automatic batch aims at, so that the longest-first order can even out
// programs of unequal cost. A program costs a fixed ~25-40 ms of CPU (NVRTC set-up, the CUDA
// headers) on top of its keys (docs/PERFORMANCE.md, "Where a cold warmup spends its time").
inline constexpr std::size_t kProgramsPerJob = 4;

// Instantiations per program when the caller leaves it open: ceil(keys / (kProgramsPerJob *
// jobs)), within [1, kMaxBatch]. One job gets kMaxBatch.
std::size_t auto_batch(std::size_t keys, int jobs);

// Estimated compile cost of one key of `def`, in relative units: the size of its own device
// header (the shared device headers and the CUDA headers cost every program the same).
double estimated_key_cost(const KernelDef& def);

// Packs keys, given by their kernel, into programs of one kernel each: a kernel's n keys go
// round-robin into ceil(n / batch) programs (sizes differ by at most one, and neighbouring
// variants, which often differ in cost, land in different programs); `batch` 0 means
// auto_batch(kernels.size(), jobs). Returns the indices of each program's keys, in input order
// within a program, programs sorted by estimated cost (fixed part + keys * key cost), largest
// first: workers that take programs in this order finish close together. A null kernel is
// skipped.
std::vector<std::vector<std::size_t>> schedule_programs(const std::vector<const KernelDef*>& kernels, int jobs,
                                                        std::size_t batch);

}  // namespace warmkey
