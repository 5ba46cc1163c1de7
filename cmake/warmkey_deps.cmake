# Third-party dependencies. Everything the device machine lacks is header-only or static
# (RapidCheck, GoogleTest); Google Benchmark's shared library is copied into the build tree.
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(CUDAToolkit REQUIRED)  # NVRTC and the driver headers; libcuda itself is dlopen'ed
# FindCUDAToolkit makes CUDA::nvrtc depend on CUDA::cuda_driver (the stub libcuda.so). The linker
# drops it as unneeded in plain builds, but the sanitizer runtimes link with --no-as-needed, which
# would make libcuda.so.1 a hard dependency and stop binaries on machines without a driver.
set_property(TARGET CUDA::nvrtc PROPERTY INTERFACE_LINK_LIBRARIES "")

# xxHash, header-only: every function inlined, no libxxhash at run time.
add_library(warmkey_xxhash INTERFACE)
target_compile_definitions(warmkey_xxhash INTERFACE XXH_INLINE_ALL)

find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)
add_library(warmkey_cli11 INTERFACE)
target_include_directories(warmkey_cli11 SYSTEM INTERFACE ${CLI11_INCLUDE_DIR})

if(WARMKEY_BUILD_TESTS OR WARMKEY_BUILD_FUZZ)
  find_package(GTest REQUIRED)
  find_package(rapidcheck REQUIRED)
  include(GoogleTest)
endif()

if(WARMKEY_BUILD_BENCH)
  find_package(benchmark REQUIRED)
  # The device machine has no libbenchmark: ship the resolved library next to the binaries.
  get_target_property(_wk_bench_lib benchmark::benchmark IMPORTED_LOCATION_NONE)
  if(NOT _wk_bench_lib)
    get_target_property(_wk_bench_lib benchmark::benchmark IMPORTED_LOCATION_RELEASE)
  endif()
  if(_wk_bench_lib)
    # Every name of the library (file and soname links), so the binaries' NEEDED entry resolves.
    get_filename_component(_wk_bench_dir ${_wk_bench_lib} DIRECTORY)
    file(GLOB _wk_bench_names ${_wk_bench_dir}/libbenchmark.so*)
    file(COPY ${_wk_bench_names} DESTINATION ${CMAKE_BINARY_DIR}/lib FOLLOW_SYMLINK_CHAIN)
  endif()
endif()
set(CMAKE_BUILD_RPATH "${CMAKE_BINARY_DIR}/lib;${CUDAToolkit_LIBRARY_DIR};/usr/local/cuda/lib64")
