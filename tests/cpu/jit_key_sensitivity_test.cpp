// The JitKey covers every input the compiler sees: each header of the kernel's closure (also the
// ones included transitively), the prelude and the generated instantiation, each option, the arch
// and the NVRTC version. Perturbing any of them changes the digest and the cache file's name; an
// entry or bundle entry whose stored key text differs in any byte is never served.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <fstream>
#include <functional>
#include <regex>
#include <set>

#include "tests/cpu/runtime_axpy.h"
#include "warmup/arch.h"
#include "warmup/bundle.h"
#include "warmup/compiler.h"
#include "warmup/disk_cache.h"
#include "warmup/error.h"
#include "warmup/le_codec.h"
#include "warmup/runtime.h"
#include "warmup/source_set.h"

namespace warmkey {
namespace jit_key_sensitivity_test {

namespace fs = std::filesystem;
using test_axpy::key;
using test_axpy::TempDir;

CompileTarget target() {
  CompileTarget t;
  t.arch = "sm_90";
  t.nvrtc_version = "13.0";
  return t;
}

// The axpy_bf16 kernel over a copy of the test sources with `name`'s text changed.
struct PerturbedKernel {
  SourceSet sources;
  KernelDef def;
};

std::unique_ptr<PerturbedKernel> with_header_changed(const std::string& name, const std::string& suffix) {
  auto k = std::make_unique<PerturbedKernel>();
  for (const auto& [n, text] : test_axpy::sources().all()) k->sources.add(n, n == name ? text + suffix : text);
  k->def = test_axpy::axpy_bf16_def();
  k->def.sources = &k->sources;
  return k;
}

JitKey key_of(const KernelDef& def) { return make_jit_key(key(64, 2, def, DType::bf16), target()); }

TEST(JitKeySensitivity, everyHeaderOfTheClosureChangesTheDigestAndTheFileName) {
  const KernelDef& def = test_axpy::axpy_bf16_def();
  const JitKey base = key_of(def);
  const std::vector<std::string> closure = def.sources->closure(def.header);
  // axpy_bf16.cuh includes axpy.cuh, which includes axpy_math.cuh: one direct, one transitive.
  ASSERT_EQ(closure, (std::vector<std::string>{"test/axpy.cuh", "test/axpy_bf16.cuh", "test/axpy_math.cuh"}));
  const DiskCache cache("/cache");
  std::set<std::string> digests{base.digest()};
  for (const std::string& name : closure) {
    for (const std::string& change : {std::string(" "), std::string("\n// x"), std::string("\n")}) {
      SCOPED_TRACE(name + " + '" + change + "'");
      auto perturbed = with_header_changed(name, change);
      const JitKey k = key_of(perturbed->def);
      EXPECT_NE(k.source_digest, base.source_digest);
      EXPECT_NE(cache.path_for(k), cache.path_for(base));
      EXPECT_NE(cache.lock_path(k), cache.lock_path(base));
      EXPECT_TRUE(digests.insert(k.digest()).second) << "two perturbations share a digest";
    }
  }
  // A header outside the closure does not reach this kernel's program text.
  auto unrelated = with_header_changed("test/axpy_broken.cuh", " ");
  EXPECT_EQ(key_of(unrelated->def).digest(), base.digest());
}

TEST(JitKeySensitivity, theGeneratorDigestCoversThePreludeTheVersionAndIsInEveryKey) {
  const std::string& gen = generator_digest();
  EXPECT_EQ(gen, generator_digest_of(kGeneratorVersion, instantiation_prelude()));
  EXPECT_NE(generator_digest_of(kGeneratorVersion, instantiation_prelude() + " "), gen);
  EXPECT_NE(generator_digest_of(kGeneratorVersion, instantiation_prelude().substr(1)), gen);
  EXPECT_NE(generator_digest_of(std::string(kGeneratorVersion) + "x", instantiation_prelude()), gen);
  JitKey k = key_of(test_axpy::axpy_def());
  EXPECT_EQ(k.generator, gen);
  EXPECT_NE(k.text().find("gen=" + gen), std::string::npos) << k.text();
  const DiskCache cache("/cache");
  JitKey other = k;
  other.generator = generator_digest_of(kGeneratorVersion, instantiation_prelude() + "\n");
  EXPECT_NE(other.digest(), k.digest());
  EXPECT_NE(cache.path_for(other), cache.path_for(k));
  EXPECT_EQ(diff(k, other), std::vector<std::string>{"generator: " + k.generator + " -> " + other.generator});
}

// The sample the generator digest renders takes every branch of instantiation_source(): every
// pointee dtype, aligned and not, read-only and written, a missing pointer, every integer width
// with and without 'D', the constexpr 1, float and bool. A generator change in any branch shows.
TEST(JitKeySensitivity, theGeneratorSampleTakesEveryBranch) {
  const JitKey sample = generator_sample_key();
  std::set<std::string> kinds;
  for (const ParamKey& p : sample.params) kinds.insert(p.type + ":" + p.attr + (p.writable ? ":w" : ""));
  for (DType d : kAllDTypes) {
    const std::string t = std::string("*") + std::string(dtype_triton_name(d));
    EXPECT_TRUE(kinds.count(t + ":D") + kinds.count(t + ":") + kinds.count(t + "::w") + kinds.count(t + ":D:w") > 0)
        << t;
  }
  for (const char* k :
       {"constexpr:None", "i32:", "i32:D", "i64:", "i64:D", "u64:", "u64:D", "constexpr:1", "fp32:None", "u1:None"})
    EXPECT_EQ(kinds.count(k), 1u) << k;
  bool read_only = false, written = false, aligned = false, unaligned = false;
  for (const ParamKey& p : sample.params) {
    if (p.type[0] != '*') continue;
    (p.writable ? written : read_only) = true;
    (p.attr == "D" ? aligned : unaligned) = true;
  }
  EXPECT_TRUE(read_only && written && aligned && unaligned);
  EXPECT_NO_THROW(instantiation_source(sample, "k_sample"));
}

// What NVRTC compiles is exactly the prelude, the kernel's header and the key's instantiation: a
// new input to the program text must go through the generator digest, or this test fails.
TEST(JitKeySensitivity, theProgramTextIsThePreludeTheHeaderAndTheInstantiation) {
  const KernelDef& def = test_axpy::axpy_def();
  const JitKey k = key_of(def);
  const std::string program = NvrtcCompiler::program_source(def, {k});
  const std::string head = instantiation_prelude() + "#include \"" + def.header + "\"\n";
  ASSERT_EQ(program.substr(0, head.size()), head);
  std::smatch m;
  const std::string rest = program.substr(head.size());
  ASSERT_TRUE(std::regex_search(rest, m, std::regex("struct (k_[0-9a-f]+) \\{")));
  EXPECT_EQ(rest, instantiation_source(k, m[1].str()));
}

TEST(JitKeySensitivity, everyOptionTheArchAndTheNvrtcVersionChangeTheDigestAndTheFileName) {
  const BoundKey bound = key(64);
  const CompileTarget base_target = target();
  ASSERT_GE(base_target.options.size(), 2u);
  std::vector<std::pair<std::string, CompileTarget>> targets;
  for (std::size_t i = 0; i < base_target.options.size(); ++i) {
    CompileTarget t = base_target;
    t.options.erase(t.options.begin() + static_cast<std::ptrdiff_t>(i));
    targets.emplace_back("drop option " + base_target.options[i], t);
    t = base_target;
    t.options[i] += "0";
    targets.emplace_back("change option " + base_target.options[i], t);
    t = base_target;
    t.options[i] = t.options[i].substr(0, t.options[i].size() - 1);
    targets.emplace_back("shorten option " + base_target.options[i], t);
  }
  CompileTarget t = base_target;
  t.options.push_back("-DWARMKEY_EXTRA=1");
  targets.emplace_back("add an option", t);
  t = base_target;
  std::swap(t.options[0], t.options[1]);
  targets.emplace_back("reorder the options", t);
  t = base_target;
  t.options = {base_target.options[0] + " " + base_target.options[1]};  // one string, same characters
  targets.emplace_back("join two options", t);
  for (const char* arch : {"sm_100", "sm_80", "sm_90a"}) {
    t = base_target;
    t.arch = arch;
    targets.emplace_back(std::string("arch ") + arch, t);
  }
  for (const char* v : {"13.1", "12.9", "13.0.1"}) {
    t = base_target;
    t.nvrtc_version = v;
    targets.emplace_back(std::string("nvrtc ") + v, t);
  }
  const DiskCache cache("/cache");
  const JitKey base = make_jit_key(bound, base_target);
  std::set<std::string> digests{base.digest()};
  for (const auto& [what, tt] : targets) {
    SCOPED_TRACE(what);
    const JitKey k = make_jit_key(bound, tt);
    EXPECT_NE(cache.path_for(k), cache.path_for(base));
    EXPECT_TRUE(digests.insert(k.digest()).second) << "digest shared with another perturbation";
    EXPECT_FALSE(diff(base, k).empty());
  }
}

// A kernel's own options (KernelDef::options) follow the target's in its keys, so they reach the
// digest and the compiler: a kernel that adds one names other binaries than one that does not.
TEST(JitKeySensitivity, aKernelsOwnOptionsFollowTheTargetsAndReachTheDigestAndTheBinary) {
  ASSERT_TRUE(kernel_options_enabled()) << "run without WARMKEY_KERNEL_OPTIONS=0";
  KernelDef plain = test_axpy::axpy_def();
  KernelDef fast = plain;
  fast.options = {kFastCompileMin};
  KernelDef other = plain;
  other.options = {"-Ofc=mid"};
  const CompileTarget t = target();
  const JitKey kp = make_jit_key(key(64, 2, plain, DType::f32), t);
  const JitKey kf = make_jit_key(key(64, 2, fast, DType::f32), t);
  const JitKey ko = make_jit_key(key(64, 2, other, DType::f32), t);
  std::vector<std::string> expected = t.options;
  EXPECT_EQ(kp.options, expected);
  expected.push_back(kFastCompileMin);
  EXPECT_EQ(kf.options, expected);
  EXPECT_NE(kp.digest(), kf.digest());
  EXPECT_NE(kf.digest(), ko.digest());
  EXPECT_EQ(diff(kp, kf), std::vector<std::string>{"options differ"});
  // The compiler receives them: NVRTC accepts the option and makes another cubin.
  NvrtcCompiler compiler(resolved_target());
  const JitKey cp = make_jit_key(key(64, 2, plain, DType::f32), compiler.target());
  const JitKey cf = make_jit_key(key(64, 2, fast, DType::f32), compiler.target());
  const auto bp = compiler.compile_batch(plain, {cp});
  const auto bf = compiler.compile_batch(fast, {cf});
  ASSERT_FALSE(bp[0].cubin->empty());
  ASSERT_FALSE(bf[0].cubin->empty());
  EXPECT_NE(*bp[0].cubin, *bf[0].cubin);
  // An option NVRTC refuses is a compile error naming it.
  KernelDef bad = plain;
  bad.options = {"-Ofast-compile=min"};  // NVRTC 13.0 spells it -Ofc
  try {
    compiler.compile_batch(bad, {make_jit_key(key(64, 2, bad, DType::f32), compiler.target())});
    ADD_FAILURE() << "an unknown option compiled";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("-Ofast-compile=min"), std::string::npos) << e.what();
  }
}

// Every field of the key reaches text() (and so the digest): a field that does not would let two
// different binaries share a cache entry.
TEST(JitKeySensitivity, everyFieldOfTheKeyReachesTheDigest) {
  const JitKey base = key_of(test_axpy::axpy_def());
  std::vector<std::pair<std::string, std::function<void(JitKey&)>>> edits = {
      {"kernel", [](JitKey& k) { k.kernel += "x"; }},
      {"entry", [](JitKey& k) { k.entry += "x"; }},
      {"source_digest", [](JitKey& k) { k.source_digest[0] ^= 1; }},
      {"arch", [](JitKey& k) { k.arch += "a"; }},
      {"nvrtc_version", [](JitKey& k) { k.nvrtc_version += ".1"; }},
      {"generator", [](JitKey& k) { k.generator[0] ^= 1; }},
      {"options", [](JitKey& k) { k.options.push_back("-G"); }},
      {"constexpr value", [](JitKey& k) { k.constexprs[0].second += 1; }},
      {"constexpr name", [](JitKey& k) { k.constexprs[0].first += "X"; }},
      {"param name", [](JitKey& k) { k.params[0].name += "x"; }},
      {"param type", [](JitKey& k) { k.params[0].type = "*fp16"; }},
      {"param attr", [](JitKey& k) { k.params[0].attr = k.params[0].attr == "D" ? "" : "D"; }},
      {"param writable", [](JitKey& k) { k.params[0].writable = !k.params[0].writable; }},
      {"block x", [](JitKey& k) { k.block[0] += 1; }},
      {"block y", [](JitKey& k) { k.block[1] += 1; }},
      {"block z", [](JitKey& k) { k.block[2] += 1; }},
  };
  std::set<std::string> digests{base.digest()};
  for (const auto& [what, edit] : edits) {
    JitKey k = base;
    edit(k);
    EXPECT_NE(k.text(), base.text()) << what;
    EXPECT_TRUE(digests.insert(k.digest()).second) << what;
    EXPECT_FALSE(diff(base, k).empty()) << what;
  }
}

// A bundle whose entries carry the requested key's text changed in one byte, cut short or
// extended serves none of them: the runtime compiles (here: refuses, in error mode) instead.
TEST(JitKeySensitivity, aBundleEntryWhoseKeyTextDiffersInAnyByteIsNeverServed) {
  TempDir dir;
  JitRuntime maker([] {
    RuntimeOptions o;
    o.cache_dir = std::filesystem::path();
    o.load_modules = false;
    return o;
  }());
  const BoundKey bound = key(64);
  std::shared_ptr<const CompiledKernel> real = maker.get(bound, Phase::warmup);
  const std::string text = real->key.text();
  std::vector<std::string> variants;
  for (std::size_t i = 0; i < text.size(); i += 3) {
    std::string v = text;
    v[i] = static_cast<char>(v[i] == 'x' ? 'y' : 'x');
    variants.push_back(v);
  }
  for (std::size_t n : {std::size_t{1}, text.size() / 2, text.size() - 1}) variants.push_back(text.substr(0, n));
  for (const char* tail : {" ", "x", "0"}) variants.push_back(text + tail);
  variants.push_back(text + std::string(1, '\0'));
  // One bundle of all variants, written with the shared codec in the bundle layout.
  std::string bytes("WKBUNDLE", 8);
  le::put<std::uint32_t>(bytes, kBundleVersion);
  le::put<std::uint64_t>(bytes, 1);
  le::put<std::uint64_t>(bytes, real->cubin->size());
  bytes += *real->cubin;
  le::put<std::uint64_t>(bytes, variants.size());
  for (const std::string& v : variants) {
    le::put_string32(bytes, v);
    le::put_string32(bytes, real->lowered_name);
    le::put<std::uint64_t>(bytes, 0);
  }
  le::put<std::uint64_t>(bytes, XXH3_64bits(bytes.data(), bytes.size()));
  const fs::path file = dir.path() / "variants.wkbundle";
  std::ofstream(file, std::ios::binary) << bytes;

  RuntimeOptions o;
  o.cache_dir = std::filesystem::path();
  o.mode = MonitorMode::error;
  o.load_modules = false;
  JitRuntime rt(o);
  EXPECT_EQ(rt.import_bundle(file), variants.size());
  rt.monitor().activate();
  int served = 0;
  try {
    rt.get(bound, Phase::runtime);
    served = 1;
  } catch (const RuntimeCompileError&) {
  }
  EXPECT_EQ(served, 0);
  EXPECT_EQ(rt.monitor().counters(Phase::runtime).bundle_hits, 0);
  EXPECT_EQ(rt.compiler().programs_compiled(), 0);
}

}  // namespace jit_key_sensitivity_test
}  // namespace warmkey
