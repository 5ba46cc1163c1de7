// Where NVRTC spends a cold warmup: every kernel's keys of a config compiled in programs of
// --batch keys, one program at a time on one thread, with the given extra NVRTC options. Prints
// per program and per kernel the wall and CPU seconds (CPU = user + sys of this process), the
// cubin size, the registers per thread and local-memory frame bytes ptxas gave (the largest of the
// program's kernels: warmup/cubin_resources.h; a frame above 0 is spills or a local array) and the
// keys. With --trace DIR, NVRTC also writes a -fdevice-time-trace JSON per
// program there (open it in chrome://tracing or Perfetto).
//
//   nvrtc_breakdown [--config dsv4-flash] [--kernel K] [--batch N] [--trace DIR]
//                   [--dump DIR] [--set "opt1 opt2"]... [--repeat R]
//   nvrtc_breakdown --schedule J [--old-policy] [--batch N] [--set "..."] [--share]
//   nvrtc_breakdown --scaling J [--scaling J2 ...] [--batch N] [--set "..."]
//
// --schedule J compiles the programs a warmup with J jobs makes (warmup/schedule.h; with
// --old-policy, the first policy's: 16 keys a program, kernel by kernel), one after another, and
// prints each program's CPU seconds and the start-to-finish time of that list on J idle workers.
//
// --scaling J compiles the programs a warmup with J jobs makes, concurrently, twice: on J threads of
// this process (as `warmkey warmup --jobs J` does) and in J forked worker processes of one thread
// each; both take the next program, largest first, from one shared counter. Prints wall and CPU
// seconds of each: where threads fall behind processes, something inside NVRTC or the process
// (a lock, the allocator) serialises the compiles.
//
// --share turns on identical-code folding (warmup/compiler.h; never used by a warmup: it changes the
// SASS). The "shared" column counts keys whose entry another key of the program provides. --dump
// also writes <file>.names: each key's lowered name in that cubin.
//
// Each --set is one whole option list (arch and -I are added), measured in turn; "default" (the
// default) is the runtime's own (CompileTarget's options). Measure cold: no driver is loaded here, but on a GPU host
// run with CUDA_CACHE_DISABLE=1.
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "equivalence/kernel_table.h"
#include "warmup/arch.h"
#include "warmup/compiler.h"
#include "warmup/cubin_resources.h"
#include "warmup/error.h"
#include "warmup/orchestrator.h"
#include "warmup/schedule.h"

namespace warmkey {
namespace {

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

std::vector<std::string> split_words(const std::string& s) {
  std::istringstream is(s);
  std::vector<std::string> out;
  for (std::string w; is >> w;) out.push_back(w);
  return out;
}

struct Args {
  std::string config = "dsv4-flash";
  std::string kernel;
  int batch = 0;  // 0: every key of a kernel in one program
  int repeat = 1;
  std::string trace_dir;
  std::string dump_dir;            // writes each program's cubin there (<kernel>_<set>_<program>.cubin)
  std::vector<int> scaling_jobs;   // --scaling J: those programs on J threads, then J processes
  std::vector<int> schedule_jobs;  // --schedule J: the programs warmup/schedule.h makes for J jobs
  bool old_policy = false;         // --old-policy: the programs of the first policy (16 per kernel)
  bool share = false;              // --share: identical-code folding (warmup/compiler.h; off in warmups)
  std::vector<std::string> sets;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw InputError(str_cat("nvrtc_breakdown: ", s, " needs a value"));
      return argv[++i];
    };
    if (s == "--config")
      a.config = value();
    else if (s == "--kernel")
      a.kernel = value();
    else if (s == "--batch")
      a.batch = std::stoi(value());
    else if (s == "--repeat")
      a.repeat = std::stoi(value());
    else if (s == "--trace")
      a.trace_dir = value();
    else if (s == "--schedule")
      a.schedule_jobs.push_back(std::stoi(value()));
    else if (s == "--scaling")
      a.scaling_jobs.push_back(std::stoi(value()));
    else if (s == "--old-policy")
      a.old_policy = true;
    else if (s == "--share")
      a.share = true;
    else if (s == "--dump")
      a.dump_dir = value();
    else if (s == "--set")
      a.sets.push_back(value());
    else
      throw InputError(str_cat("nvrtc_breakdown: unknown argument '", s, "'"));
  }
  if (a.sets.empty()) a.sets.push_back("default");
  return a;
}

// Start-to-finish seconds of `costs` (in list order) on `jobs` workers that each take the next
// program when free: the wall time of a warmup on `jobs` idle cores, contention aside.
double list_makespan(const std::vector<double>& costs, int jobs) {
  std::vector<double> free_at(static_cast<std::size_t>(std::max(1, jobs)), 0.0);
  for (double c : costs) *std::min_element(free_at.begin(), free_at.end()) += c;
  return *std::max_element(free_at.begin(), free_at.end());
}

// Compiles the programs a warmup would make for `jobs` jobs, one after another on this thread,
// and prints each program's CPU seconds and the makespan of that list on `jobs` idle workers.
int run_schedule(const Args& a, const Plan& plan, int jobs) {
  std::vector<JitKey> keys;
  std::vector<const KernelDef*> kernels;
  std::set<std::string> seen;
  CompileTarget target = resolved_target();
  if (a.sets[0] != "default") target.options = split_words(a.sets[0]);
  for (const PlanEntry& e : plan.entries) {
    JitKey k = make_jit_key(e.bound, target);
    if (!seen.insert(k.digest()).second) continue;
    keys.push_back(std::move(k));
    kernels.push_back(e.bound.kernel);
  }
  std::vector<std::vector<std::size_t>> programs;
  if (a.old_policy) {  // the first policy: each kernel's keys in plan order, 16 a program
    std::vector<const KernelDef*> order;
    std::map<const KernelDef*, std::vector<std::size_t>> groups;
    for (std::size_t i = 0; i < kernels.size(); ++i) {
      if (groups[kernels[i]].empty()) order.push_back(kernels[i]);
      groups[kernels[i]].push_back(i);
    }
    for (const KernelDef* d : order) {
      const auto& g = groups[d];
      for (std::size_t i = 0; i < g.size(); i += kMaxBatch)
        programs.emplace_back(g.begin() + static_cast<std::ptrdiff_t>(i),
                              g.begin() + static_cast<std::ptrdiff_t>(std::min(g.size(), i + kMaxBatch)));
    }
  } else {
    programs = schedule_programs(kernels, jobs, a.batch > 0 ? static_cast<std::size_t>(a.batch) : 0);
  }
  std::printf("\n%s programs for %d jobs (%zu keys, %zu programs)\n", a.old_policy ? "first-policy" : "schedule.h",
              jobs, keys.size(), programs.size());
  std::printf("%5s %-22s %5s %9s %9s\n", "prog", "kernel", "keys", "cpu_s", "wall_s");
  std::vector<double> costs;
  double total = 0;
  NvrtcCompiler compiler(target);
  compiler.set_share_identical_code(a.share);
  for (std::size_t p = 0; p < programs.size(); ++p) {
    std::vector<JitKey> part;
    for (std::size_t i : programs[p]) part.push_back(keys[i]);
    const KernelDef& def = *kernels[programs[p][0]];
    const double c0 = cpu_seconds();
    const auto w0 = std::chrono::steady_clock::now();
    compiler.compile_batch(def, part);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    const double cpu = cpu_seconds() - c0;
    costs.push_back(cpu);
    total += cpu;
    std::printf("%5zu %-22s %5zu %9.3f %9.3f\n", p, def.name.c_str(), part.size(), cpu, wall);
  }
  std::printf("keys sharing another key's code: %lld\n", static_cast<long long>(compiler.shared_instantiations()));
  std::printf("total CPU %.2f s; on %d idle workers in this order: %.2f s (ideal %.2f s)\n", total, jobs,
              list_makespan(costs, jobs), total / std::max(1, jobs));
  return 0;
}

double children_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_CHILDREN, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// The programs of a warmup with `jobs` jobs compiled concurrently on `jobs` threads, then by
// `jobs` forked processes; prints wall and CPU seconds of each.
int run_scaling(const Args& a, const Plan& plan, int jobs) {
  CompileTarget target = resolved_target();
  if (a.sets[0] != "default") target.options = split_words(a.sets[0]);
  std::vector<JitKey> keys;
  std::vector<const KernelDef*> kernels;
  std::set<std::string> seen;
  for (const PlanEntry& e : plan.entries) {
    JitKey k = make_jit_key(e.bound, target);
    if (!seen.insert(k.digest()).second) continue;
    keys.push_back(std::move(k));
    kernels.push_back(e.bound.kernel);
  }
  const auto programs = schedule_programs(kernels, jobs, a.batch > 0 ? static_cast<std::size_t>(a.batch) : 0);
  const NvrtcCompiler compiler(target);
  auto compile = [&](std::size_t p) {
    std::vector<JitKey> part;
    for (std::size_t i : programs[p]) part.push_back(keys[i]);
    compiler.compile_batch(*kernels[programs[p][0]], part);
  };
  // One counter for both modes, in memory the forked workers share.
  void* mem =
      mmap(nullptr, sizeof(std::atomic<std::size_t>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) throw InputError("nvrtc_breakdown: mmap failed");
  auto* next = new (mem) std::atomic<std::size_t>(0);
  auto worker = [&] {
    for (std::size_t p; (p = next->fetch_add(1)) < programs.size();) compile(p);
  };

  const double c0 = cpu_seconds();
  auto w0 = std::chrono::steady_clock::now();
  {
    std::vector<std::thread> pool;
    for (int j = 0; j < jobs; ++j) pool.emplace_back(worker);
    for (auto& t : pool) t.join();
  }
  const double thread_wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  const double thread_cpu = cpu_seconds() - c0;

  next->store(0);
  const double k0 = children_cpu_seconds();
  w0 = std::chrono::steady_clock::now();
  std::vector<pid_t> kids;
  for (int j = 0; j < jobs; ++j) {
    const pid_t pid = fork();
    if (pid == 0) {
      int rc = 0;
      try {
        worker();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "nvrtc_breakdown: worker: %s\n", e.what());
        rc = 1;
      }
      _exit(rc);
    }
    if (pid < 0) throw InputError("nvrtc_breakdown: fork failed");
    kids.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : kids) {
    int status = 0;
    waitpid(pid, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const double proc_wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  const double proc_cpu = children_cpu_seconds() - k0;
  munmap(mem, sizeof(std::atomic<std::size_t>));
  std::printf(
      "scaling jobs=%d keys=%zu programs=%zu  threads: wall %.3f s cpu %.2f s  processes: wall %.3f s cpu %.2f s%s\n",
      jobs, keys.size(), programs.size(), thread_wall, thread_cpu, proc_wall, proc_cpu,
      failed ? "  (a worker failed)" : "");
  std::fflush(stdout);
  return failed ? 1 : 0;
}

int run(const Args& a) {
  const Plan plan = plan_warmup(equivalence::builtin_registry(), load_config(a.config),
                                a.kernel.empty() ? std::nullopt : std::optional<std::string>(a.kernel));
  std::map<std::string, std::pair<const KernelDef*, std::vector<BoundKey>>> by_kernel;
  std::map<std::string, std::set<std::string>> seen;
  for (const PlanEntry& e : plan.entries) {
    if (!seen[e.kernel->name()].insert(e.jit.digest()).second) continue;
    auto& slot = by_kernel[e.kernel->name()];
    slot.first = e.bound.kernel;
    slot.second.push_back(e.bound);
  }
  std::printf("config %s: %zu JIT keys, %zu kernels, NVRTC %s\n", a.config.c_str(), plan.distinct_jit_keys(),
              by_kernel.size(), NvrtcCompiler::nvrtc_version().c_str());
  if (!a.scaling_jobs.empty()) {
    int rc = 0;
    for (int jobs : a.scaling_jobs) rc |= run_scaling(a, plan, jobs);
    return rc;
  }
  if (!a.schedule_jobs.empty()) {
    for (int jobs : a.schedule_jobs) run_schedule(a, plan, jobs);
    return 0;
  }
  for (std::size_t set_index = 0; set_index < a.sets.size(); ++set_index) {
    const std::string& set = a.sets[set_index];
    CompileTarget target = resolved_target();
    if (set != "default") target.options = split_words(set);
    std::printf("\noptions: %s\n",
                [&] {
                  std::string o;
                  for (const auto& w : target.options) o += w + " ";
                  return o;
                }()
                    .c_str());
    // A kernel's line ends with the keys that shared an instantiation; a program's line (the
    // indented ones) with its registers per thread and frame bytes, then its key.
    std::printf("%-22s %5s %5s %9s %9s %9s %10s %6s\n", "kernel", "prog", "keys", "wall_s", "cpu_s", "ms/key",
                "cubin_KiB", "shared | regs frame");
    double total_wall = 0, total_cpu = 0;
    std::size_t total_keys = 0;
    for (const auto& [name, entry] : by_kernel) {
      const auto& [def, bounds] = entry;
      std::vector<JitKey> keys;
      for (const BoundKey& b : bounds) keys.push_back(make_jit_key(b, target));
      std::size_t per = a.batch > 0 ? static_cast<std::size_t>(a.batch) : keys.size();
      double best_wall = 1e30, best_cpu = 1e30;
      std::size_t cubin_bytes = 0, programs = 0, shared_keys = 0;
      for (int r = 0; r < a.repeat; ++r) {
        shared_keys = 0;
        double kernel_wall = 0, kernel_cpu = 0;
        cubin_bytes = 0;
        programs = 0;
        for (std::size_t i = 0; i < keys.size(); i += per) {
          std::vector<JitKey> part(keys.begin() + static_cast<std::ptrdiff_t>(i),
                                   keys.begin() + static_cast<std::ptrdiff_t>(std::min(keys.size(), i + per)));
          if (!a.trace_dir.empty()) {
            std::filesystem::create_directories(a.trace_dir);
            for (JitKey& k : part)
              k.options.push_back(str_cat("-fdevice-time-trace=", a.trace_dir, "/", name, "_", programs, ".json"));
          }
          NvrtcCompiler compiler(target);
          compiler.set_share_identical_code(a.share);
          const double c0 = cpu_seconds();
          const auto w0 = std::chrono::steady_clock::now();
          std::vector<CompiledKernel> out;
          try {
            out = compiler.compile_batch(*def, part);
          } catch (const CompileError& e) {
            std::string what = e.what();
            std::size_t log = what.find("NVRTC log:");
            std::printf("%-22s failed: %s\n", name.c_str(), what.substr(log == std::string::npos ? 0 : log).c_str());
            return 1;
          }
          const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
          const double cpu = cpu_seconds() - c0;
          if (!a.dump_dir.empty()) {
            std::filesystem::create_directories(a.dump_dir);
            std::string file = str_cat(a.dump_dir, "/", name, "_", set_index, "_", programs, ".cubin");
            if (FILE* f = std::fopen(file.c_str(), "wb")) {
              std::fwrite(out[0].cubin->data(), 1, out[0].cubin->size(), f);
              std::fclose(f);
            }
            // Each key's entry in that cubin: "<lowered name> <key signature>" per line.
            if (FILE* f = std::fopen((file + ".names").c_str(), "w")) {
              for (const CompiledKernel& c : out)
                std::fprintf(f, "%s %s\n", c.lowered_name.c_str(), c.key.signature_text().c_str());
              std::fclose(f);
            }
          }
          kernel_wall += wall;
          kernel_cpu += cpu;
          shared_keys += static_cast<std::size_t>(compiler.shared_instantiations());
          cubin_bytes += out[0].cubin->size();
          if (a.repeat == 1 && per < keys.size()) {
            std::int64_t regs = -1, frame = 0;
            for (const KernelResources& r : cubin_resources(*out[0].cubin)) {
              regs = std::max(regs, r.registers);
              frame = std::max(frame, r.frame_bytes);
            }
            std::printf("  %-20s %5zu %5zu %9.3f %9.3f %9.1f %10.1f %4lld %5lld  %s\n", name.c_str(), programs,
                        part.size(), wall, cpu, 1e3 * cpu / static_cast<double>(part.size()),
                        static_cast<double>(out[0].cubin->size()) / 1024, static_cast<long long>(regs),
                        static_cast<long long>(frame), part.size() == 1 ? part[0].signature_text().c_str() : "");
          }
          ++programs;
        }
        best_wall = std::min(best_wall, kernel_wall);
        best_cpu = std::min(best_cpu, kernel_cpu);
      }
      std::printf("%-22s %5zu %5zu %9.3f %9.3f %9.1f %10.1f %6zu\n", name.c_str(), programs, keys.size(), best_wall,
                  best_cpu, 1e3 * best_cpu / static_cast<double>(keys.size()), static_cast<double>(cubin_bytes) / 1024,
                  shared_keys);
      total_wall += best_wall;
      total_cpu += best_cpu;
      total_keys += keys.size();
    }
    std::printf("%-22s %5s %5zu %9.3f %9.3f %9.1f\n", "total", "", total_keys, total_wall, total_cpu,
                1e3 * total_cpu / static_cast<double>(total_keys));
  }
  return 0;
}

}  // namespace
}  // namespace warmkey

int main(int argc, char** argv) {
  try {
    return warmkey::run(warmkey::parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nvrtc_breakdown: %s\n", e.what());
    return 2;
  }
}
