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

// Keys per program if every key cost the same: ceil(keys / (kProgramsPerJob * jobs)), within
// [1, kMaxBatch]; one job gets kMaxBatch. (The warmup summary reports it; schedule_programs sizes
// programs by estimated cost instead.)
std::size_t auto_batch(std::size_t keys, int jobs);

// Estimated CPU milliseconds of compiling one key of `def`: measured per kernel for the kernels of
// the embedded configs (cold, one program per kernel: a fused_moe key costs ~6x a swiglu_limit
// key), else proportional to the size of its own device header.
double estimated_key_cost(const KernelDef& def);

// Packs keys, given by their kernel, into programs of one kernel each: a kernel's n keys go
// boustrophedon into programs whose sizes differ by at most one (each run of `count` neighbouring
// keys lands in `count` different programs, every other run in reverse order: variants that
// alternate in cost are spread evenly). With `batch` > 0: ceil(n / batch) programs. With
// `batch` 0: programs of about total estimated cost / ceil(keys / auto_batch(keys, jobs)) each (as
// many programs as equal batches would make), at least ceil(n / kMaxBatch) and at most n of them
// (one job: ceil(n / kMaxBatch)), so a dear kernel is spread over more programs than a cheap one. Returns the indices
// of each program's keys, in input order within a program, programs sorted by estimated cost (fixed part + keys * key
// cost), largest first: workers that take programs in this order finish close together. A null
// kernel is skipped.
std::vector<std::vector<std::size_t>> schedule_programs(const std::vector<const KernelDef*>& kernels, int jobs,
                                                        std::size_t batch);

}  // namespace warmkey
