// Writes a seed corpus per harness: seeded random inputs (config + runtime input bytes), kept
// when they reach a (config, JitKey) pair no earlier seed reached, plus the empty input.
//   warmkey_fuzz_corpus <fuzz/corpus> [max files per kernel]
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "equivalence/kernel_table.h"
#include "equivalence/warm_set.h"
#include "spaces/byte_draw.h"
#include "spaces/config.h"
#include "warmup/source_set.h"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  using namespace warmkey;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <corpus root> [max files per kernel]\n", argv[0]);
    return 2;
  }
  const fs::path root = argv[1];
  const std::size_t max_files = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 64;
  equivalence::WarmSetCache cache;
  for (const equivalence::KernelDescriptor* row : equivalence::rows_with_space()) {
    const spaces::InputSpace& space = *row->space;
    const Kernel* kernel = &row->contract();
    fs::path dir = root / space.kernel;
    fs::create_directories(dir);
    std::set<std::string> reached;
    std::size_t written = 0;
    auto save = [&](const std::vector<std::uint8_t>& bytes) {
      std::string name = hex_digest({reinterpret_cast<const char*>(bytes.data()), bytes.size()}).substr(0, 20);
      std::ofstream(dir / name, std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
      ++written;
    };
    save({});
    for (std::uint64_t i = 0; i < 200000 && written < max_files; ++i) {
      spaces::ByteDraw d = spaces::ByteDraw::seeded(spaces::case_seed(0x5eed, i, 0));
      d.set_labelling(false);
      ModelConfig config = spaces::draw_config(d);
      const auto& warm = cache.get(space, *kernel, config);
      if (!warm.used()) continue;
      spaces::CaseFacts f = space.run_case(*kernel, d, config, nullptr);
      if (!f.bound) continue;
      std::string id = config.name + "|" + warm.jit_key(*f.bound).digest();
      if (reached.insert(id).second) save(d.take_recorded());
    }
    std::printf("%s: %zu seed inputs in %s\n", space.kernel.c_str(), written, dir.c_str());
  }
  return 0;
}
