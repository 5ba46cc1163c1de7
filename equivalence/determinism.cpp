// Manifests and their comparison, in process and across a re-exec.
#include "equivalence/determinism.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "equivalence/kernel_table.h"

extern char** environ;

namespace warmkey::equivalence {
namespace {

constexpr const char* kOutEnv = "WARMKEY_MANIFEST_OUT";
constexpr const char* kConfigEnv = "WARMKEY_MANIFEST_CONFIG";
constexpr const char* kKernelEnv = "WARMKEY_MANIFEST_KERNEL";
constexpr const char* kMutantEnv = "WARMKEY_MANIFEST_MUTANT";

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Violations for the first few lines that differ between a and b.
std::vector<Violation> compare(const std::string& a, const std::string& b, const std::string& config,
                               const std::string& how) {
  std::vector<Violation> out;
  auto la = lines_of(a), lb = lines_of(b);
  std::size_t n = std::max(la.size(), lb.size());
  for (std::size_t i = 0; i < n && out.size() < 3; ++i) {
    std::string x = i < la.size() ? la[i] : "(missing)";
    std::string y = i < lb.size() ? lb[i] : "(missing)";
    if (x == y) continue;
    Violation v;
    v.property = Property::P7;
    v.kernel = x.substr(0, x.find('\t'));
    v.config = config;
    v.found_by = how;
    v.detail = str_cat("manifest line ", i + 1, " differs:\n    this run:  ", x, "\n    other run: ", y);
    out.push_back(std::move(v));
  }
  if (la.size() != lb.size() && out.empty()) {
    Violation v;
    v.property = Property::P7;
    v.config = config;
    v.found_by = how;
    v.detail = str_cat("manifests have ", la.size(), " and ", lb.size(), " lines");
    out.push_back(std::move(v));
  }
  return out;
}

std::string one_line(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\t') c = ' ';
  }
  return s;
}

}  // namespace

std::string key_manifest(const std::vector<KernelUnderTest>& kernels, const ModelConfig& config,
                         const CompileTarget& target) {
  std::ostringstream os;
  for (const auto& kt : kernels) {
    const Kernel& k = *kt.kernel;
    if (!k.used_by(config)) {
      os << k.name() << "\tnot used\n";
      continue;
    }
    std::vector<CompileKey> keys;
    try {
      keys = k.warmup_keys(config);
    } catch (const std::exception& e) {
      os << k.name() << "\twarmup_keys threw\t" << one_line(e.what()) << '\n';
      continue;
    }
    for (const CompileKey& key : keys) {
      os << k.name() << '\t' << key.to_string() << '\t';
      try {
        JitKey jk = make_jit_key(k.warmup_bound_key(key), target);
        os << jk.text() << '\t' << jk.digest() << '\n';
      } catch (const std::exception& e) {
        os << "error\t" << one_line(e.what()) << '\n';
      }
    }
  }
  return os.str();
}

std::vector<Violation> check_determinism_in_process(const Subjects& subjects, const ModelConfig& config,
                                                    const std::optional<std::string>& only) {
  std::string first = key_manifest(subjects.kernels(), config);
  const Registry fresh = make_registry(subjects.rows());
  Subjects again(fresh, only, subjects.mutant(), &subjects.rows());
  ModelConfig reread = ModelConfig::from_json(nlohmann::json::parse(config.to_json().dump()));
  std::string second = key_manifest(again.kernels(), reread);
  return compare(first, second, config.name, "P7 in process: a fresh registry and the config re-read from JSON");
}

std::vector<Violation> check_determinism_across_processes(const Subjects& subjects, const ModelConfig& config,
                                                          const std::vector<std::string>& child_argv,
                                                          const std::optional<std::string>& only) {
  std::string mine = key_manifest(subjects.kernels(), config);
  namespace fs = std::filesystem;
  static std::atomic<int> counter{0};
  fs::path out =
      fs::temp_directory_path() / str_cat("warmkey-manifest-", getpid(), "-", counter++, "-",
                                          std::chrono::steady_clock::now().time_since_epoch().count(), ".txt");
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string_view s(*e);
    if (s.starts_with("WARMKEY_MANIFEST_")) continue;
    env_strings.emplace_back(s);
  }
  env_strings.push_back(str_cat(kOutEnv, "=", out.string()));
  env_strings.push_back(str_cat(kConfigEnv, "=", config.to_json().dump()));
  env_strings.push_back(str_cat(kKernelEnv, "=", only.value_or("")));
  env_strings.push_back(str_cat(kMutantEnv, "=", subjects.mutant() ? subjects.mutant()->name : ""));
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = child_argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);

  // The child's own output is not ours to show: send it to /dev/null.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  auto failure = [&](const std::string& why) {
    Violation v;
    v.property = Property::P7;
    v.config = config.name;
    v.found_by = "P7 across processes";
    v.detail = why;
    return std::vector<Violation>{v};
  };
  if (rc != 0) return failure(str_cat("could not start the child process ", child_argv.at(0), ": ", std::strerror(rc)));
  int status = 0;
  waitpid(pid, &status, 0);
  std::ifstream in(out);
  std::stringstream theirs;
  theirs << in.rdbuf();
  std::error_code ec;
  fs::remove(out, ec);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !in)
    return failure(
        str_cat("the child process (", child_argv.at(0), ") did not write a manifest (status ", status, ")"));
  return compare(mine, theirs.str(), config.name, "P7 across processes (a re-exec with a fresh address layout)");
}

bool emit_manifest_if_requested() {
  const char* out = std::getenv(kOutEnv);
  if (out == nullptr || *out == '\0') return false;
  const char* config_text = std::getenv(kConfigEnv);
  const char* kernel = std::getenv(kKernelEnv);
  const char* mutant_name = std::getenv(kMutantEnv);
  ModelConfig config = config_text ? ModelConfig::from_json(nlohmann::json::parse(config_text)) : default_config();
  std::optional<std::string> only;
  if (kernel && *kernel) only = kernel;
  const equivalence::Mutant* mutant = mutant_name && *mutant_name ? equivalence::find_mutant(mutant_name) : nullptr;
  Subjects subjects(equivalence::builtin_registry(), only, mutant);
  std::ofstream f(out);
  f << key_manifest(subjects.kernels(), config);
  return true;
}

}  // namespace warmkey::equivalence
