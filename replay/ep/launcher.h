// `warmkey ep`: the expert-parallel layer over N rank processes. The parent forks the ranks,
// relays the NCCL unique id from rank 0 to every rank over socketpairs (no extra service), and
// watches every phase with a deadline: a rank that dies or stops answering fails the run with a
// message naming the rank and the phase, never a hang. Each rank warms its keys (ranks share one
// disk cache: each key is compiled once), runs the protocol's phases (simulator.h), and returns
// its output rows and its launch-key findings; the parent compares the distributed output with the
// single-process reference layer.
//
// Transports: `socket` runs the all-to-alls as frames relayed by the parent and the kernel steps
// as their references (any machine; warmup compiles for --arch without loading). `nccl` loads
// libnccl.so.2 lazily, joins one communicator and runs the all-to-alls with ncclSend/ncclRecv on
// device buffers, each rank on the GPU of its rank number. The expert GEMMs run on each rank's GPU
// with the nccl transport, and with the socket transport under --device-experts (device_experts.h:
// the layer plan's moe_align, fused_moe W13, swiglu_limit, fused_moe W2 and moe_mul_sum through
// the JIT runtime, monitor in error mode), ranks sharing GPUs (rank r on device r % count); the
// layer output is then compared with the single-process reference layer on a sample of tokens with
// the whole-layer check's tolerance. Without them the expert GEMMs are the CPU references and the
// whole output is compared within 4 K ulps of fp32. A rank on a GPU also launches each step's
// deepep_globalize, ep_scatter and ep_gather on its device on the step's real buffers and checks
// them with their oracles. Each rank times each step's dispatch, expert compute and combine (CUDA
// events on its stream where they run on the device); the nccl transport also times NCCL's own
// all-to-all on the same byte counts and reports the bandwidth ratio.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "warmup/model_config.h"

namespace warmkey::replay::ep {

enum class Transport { socket, nccl };

struct LaunchOptions {
  ModelConfig config;                       // config.ep_size is the rank count
  std::vector<std::int64_t> tokens = {16};  // tokens per rank of each step (one step per entry)
  std::uint64_t seed = 1;
  double timeout_s = 120;  // per phase
  Transport transport = Transport::socket;
  // Warmup of every rank: nothing, the EP kernels (deepep_globalize, ep_scatter, ep_gather) or
  // every kernel the config uses, into cache_dir (nullopt: the default disk cache) for arch.
  enum class Warm { none, ep_kernels, all } warm = Warm::ep_kernels;
  std::optional<std::filesystem::path> cache_dir;
  std::string arch;  // empty: the device's, else $WARMKEY_ARCH, else sm_90
  // The expert GEMMs on each rank's GPU (`--device-experts`; always with the nccl transport).
  // With the socket transport rank r runs on device r % (the GPUs CUDA sees), so ranks may share
  // one GPU; run_ranks throws DeviceError naming --device-experts where there is none.
  bool device_experts = false;
  // Runs with the expert GEMMs on a device: each rank's tokens of each step compared with the
  // reference layer, spread evenly (0: all of them).
  std::int64_t check_tokens = 16;
  bool experts_on_device() const { return device_experts || transport == Transport::nccl; }
  // Test hooks: rank fail_rank exits with status 3, rank hang_rank stops answering, when it
  // reaches fail_phase ("id", "warmup", "dispatch", "combine", "result").
  int fail_rank = -1;
  int hang_rank = -1;
  std::string fail_phase = "dispatch";
};

// One step of one rank, in milliseconds. Where a phase ran on the device it is timed with CUDA
// events on the rank's stream (the nccl transport's all-to-alls: the payload exchange, after the
// 8-byte size exchange; the device expert path's launches), else by the host's clock (the socket
// transport's relayed exchange, the CPU reference experts).
struct StepTiming {
  std::int64_t tokens = 0;     // tokens per rank of the step
  std::int64_t recv_rows = 0;  // rows this rank received
  double dispatch_ms = 0, experts_ms = 0, combine_ms = 0;
  bool transfers_on_device = false, experts_on_device = false;
  // nccl transport: the dispatch payload all-to-all again (mean of a few runs) against NCCL's own
  // all-to-all on the same byte counts (Nccl::all_to_all_uniform: every rank's largest send
  // spread evenly over the ranks), each over the bytes this rank sends; ratio = ours / NCCL's.
  std::int64_t a2a_bytes = 0, nccl_bytes = 0;
  double a2a_ms = 0, nccl_ms = 0, bandwidth_ratio = 0;
  std::string nccl_baseline;  // "ncclAlltoAll" or "ncclSend/ncclRecv loop"; empty: not measured
};

struct RankSummary {
  int rank = 0;
  std::string id_digest;  // of the NCCL unique id the rank received (all equal)
  std::int64_t warm_keys = 0, compiled = 0, disk_hits = 0;
  std::int64_t launches = 0;  // EP kernel launches checked against the rank's warm set
  std::int64_t sent_rows = 0, recv_rows = 0;
  double warm_seconds = 0;
  std::int64_t device_checks = 0;     // nccl transport: EP kernel launches checked against their oracles
  std::int64_t runtime_compiles = 0;  // after warmup (the monitor is in error mode: must stay 0)
  bool device_experts = false;        // the expert GEMMs ran on the rank's GPU
  int device = -1;                    // the rank's device ordinal (-1: none)
  std::int64_t expert_launches = 0;   // device expert path launches (through the monitor in error mode)
  std::vector<StepTiming> steps;
};

struct LaunchReport {
  bool ok = false;
  std::string error;                  // why the run failed: a dead or timed-out rank, a rank's exception
  std::vector<std::string> problems;  // mismatches with the reference layer, unwarmed launch keys
  std::vector<RankSummary> ranks;
  std::int64_t steps = 0;
  double seconds = 0;
  bool device_experts = false;
  std::int64_t checked = 0;  // device runs: outputs compared with the sampled reference layer
  double worst = 0;          // their largest |got - want| / tolerance
  std::string text() const;
  nlohmann::json to_json() const;
};

// Runs the ranks and waits for them (never longer than the phases' deadlines). Throws InputError
// on bad options (rank count, config); every failure of a rank is in the report.
LaunchReport run_ranks(const LaunchOptions& options);

// The GPUs CUDA sees, asked in a child process (the caller's process never initialises CUDA, so
// it can still fork ranks that use it); 0 with `why` filled when there is no driver or no GPU.
int visible_gpus(std::string* why);

}  // namespace warmkey::replay::ep
