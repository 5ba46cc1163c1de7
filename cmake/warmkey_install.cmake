# `cmake --install` makes a CMake package: find_package(warmkey) gives the namespaced targets
#   warmkey::runtime       warmup/: tensors, the contract API (contract.h, binder, JitKey), the NVRTC
#                          compiler, caches, monitor, device loader, registry, orchestrator, configs
#   warmkey::contract      what a kernel's contract compiles against: the runtime library itself
#                          (the contract and the runtime that runs it are one layer, warmup/)
#   warmkey::kernels       the built-in kernels' contracts and their embedded device sources
#   warmkey::reference     the built-in kernels' Eigen references
#   warmkey::spaces        the input spaces, the Draw implementations, the config generator
#   warmkey::verify        equivalence/: properties P1-P7, certificates, oracles, host tensors and
#                          case folders, mutants, the kernel table types (KernelDescriptor, kernel_row)
#   warmkey::replay        the main job's replay and pipeline (replay/)
#   warmkey::test_support  tests/support: gtest helpers (temp dirs, seeds, test runtimes, planted mutants)
# and warmkey_embed_sources() (cmake/warmkey_embed.cmake) for a project's own device sources.
# Headers go to <prefix>/include/warmkey/<layer>/..., so "warmup/contract.h" and the other
# project include paths stay valid with <prefix>/include/warmkey on the include path.
include(CMakePackageConfigHelpers)
include(GNUInstallDirs)

set(WARMKEY_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/warmkey)
set(_wk_exported warmkey_warmup warmkey_contract warmkey_kernels warmkey_reference warmkey_spaces
                 warmkey_equivalence warmkey_replay warmkey_xxhash)
set_target_properties(warmkey_warmup PROPERTIES EXPORT_NAME runtime)
set_target_properties(warmkey_contract PROPERTIES EXPORT_NAME contract)
set_target_properties(warmkey_kernels PROPERTIES EXPORT_NAME kernels)
set_target_properties(warmkey_reference PROPERTIES EXPORT_NAME reference)
set_target_properties(warmkey_spaces PROPERTIES EXPORT_NAME spaces)
set_target_properties(warmkey_equivalence PROPERTIES EXPORT_NAME verify)
set_target_properties(warmkey_replay PROPERTIES EXPORT_NAME replay)
set_target_properties(warmkey_xxhash PROPERTIES EXPORT_NAME xxhash)
set(WARMKEY_PACKAGE_HAS_TEST_SUPPORT OFF)
if(TARGET warmkey_test_support)
  set_target_properties(warmkey_test_support PROPERTIES EXPORT_NAME test_support)
  list(APPEND _wk_exported warmkey_test_support)
  set(WARMKEY_PACKAGE_HAS_TEST_SUPPORT ON)
endif()
set(WARMKEY_PACKAGE_HAS_RAPIDCHECK OFF)
if(TARGET rapidcheck)
  set(WARMKEY_PACKAGE_HAS_RAPIDCHECK ON)
endif()

install(TARGETS ${_wk_exported} EXPORT warmkeyTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/warmkey)
if(TARGET warmkey)
  install(TARGETS warmkey RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
foreach(layer warmup kernels reference spaces equivalence replay)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${layer} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/warmkey
          FILES_MATCHING PATTERN "*.h" PATTERN "*.cuh")
endforeach()
if(WARMKEY_PACKAGE_HAS_TEST_SUPPORT)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/tests/support DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/warmkey/tests
          FILES_MATCHING PATTERN "*.h")
endif()

install(EXPORT warmkeyTargets NAMESPACE warmkey:: DESTINATION ${WARMKEY_INSTALL_CMAKEDIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/warmkeyConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/warmkeyConfig.cmake
                              INSTALL_DESTINATION ${WARMKEY_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/warmkeyConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/warmkeyConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/warmkeyConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/warmkey_embed.cmake ${PROJECT_SOURCE_DIR}/cmake/warmkey_embed_run.cmake
        DESTINATION ${WARMKEY_INSTALL_CMAKEDIR})
