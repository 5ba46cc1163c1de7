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
// device buffers, each rank on the GPU of its rank number; it also launches each step's
// deepep_globalize, ep_scatter and ep_gather on the rank's GPU through the JIT runtime (monitor in
// error mode) on the step's real buffers and checks them with their oracles. The expert GEMMs and
// the layer output still come from the references in both transports.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

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
  // Test hooks: rank fail_rank exits with status 3, rank hang_rank stops answering, when it
  // reaches fail_phase ("id", "warmup", "dispatch", "combine", "result").
  int fail_rank = -1;
  int hang_rank = -1;
  std::string fail_phase = "dispatch";
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
};

struct LaunchReport {
  bool ok = false;
  std::string error;                  // why the run failed: a dead or timed-out rank, a rank's exception
  std::vector<std::string> problems;  // mismatches with the reference layer, unwarmed launch keys
  std::vector<RankSummary> ranks;
  std::int64_t steps = 0;
  double seconds = 0;
  std::string text() const;
};

// Runs the ranks and waits for them (never longer than the phases' deadlines). Throws InputError
// on bad options (rank count, config); every failure of a rank is in the report.
LaunchReport run_ranks(const LaunchOptions& options);

}  // namespace warmkey::replay::ep
