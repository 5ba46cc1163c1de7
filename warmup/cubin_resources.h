// What a cubin says each of its kernels uses: registers per thread, the local-memory frame (spills
// and local arrays) and its shared-memory section, read from the ELF without a GPU (ptxas writes them
// as attributes of the cubin's global .nv.info section). For tools that choose launch bounds or
// tiles on a CPU machine (bench/nvrtc_breakdown's regs and frame columns).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace warmkey {

struct KernelResources {
  std::string name;              // the function's (mangled) symbol name
  std::int64_t registers = -1;   // per thread; -1 when the cubin does not say
  std::int64_t frame_bytes = 0;  // local memory per thread (stack frame: spills, local arrays)
  // The function's .nv.shared section: its static __shared__ bytes plus the block's reserved shared
  // memory (1 KiB with NVRTC 13.0 for sm_90, once the kernel uses shared memory); 0 without one.
  // Dynamic shared memory is the launch's.
  std::int64_t shared_section = 0;
};

// One section of a cubin: its name, ELF type, size and bytes (a view into the cubin it was read
// from; empty for SHT_NOBITS sections such as .nv.shared.*, whose size only the header holds).
struct CubinSection {
  std::string name;
  std::uint32_t type = 0;
  std::uint32_t link = 0;  // sh_link: for .symtab, the index of its string table
  std::uint64_t size = 0;
  std::string_view bytes;
};

// The sections of `cubin`, in index order. Throws Error naming the offset when the bytes are not a
// well-formed 64-bit little-endian ELF: a truncated or foreign file never reads out of bounds.
std::vector<CubinSection> cubin_sections(std::string_view cubin);

// The kernels (functions with a .text section) of `cubin`, in section order. Throws Error naming
// the offset when the bytes are not a well-formed 64-bit little-endian ELF: a truncated or foreign
// file never reads out of bounds.
std::vector<KernelResources> cubin_resources(std::string_view cubin);

}  // namespace warmkey
