# warmkey_add_test(NAME <target> LABELS <labels...> SOURCES <files...> [LIBS <targets...>])
# One helper registers every gtest binary: each test case becomes a ctest entry carrying the
# labels, and a test that calls GTEST_SKIP (a gpu test without a device) reports "Skipped".
function(warmkey_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "LABELS;SOURCES;LIBS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} warmkey_test_support GTest::gtest GTest::gtest_main
                                          rapidcheck Threads::Threads)
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  # Suites named *Concurrency (single flight, cross-process locks, concurrent writers) also carry
  # the label `concurrency`, so CI can run just them under the tsan preset. Discovery writes one
  # label per test; a small ctest include file adds the second one to the listed tests.
  set(props SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]" TIMEOUT ${T_TIMEOUT}
            ENVIRONMENT "WARMKEY_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
  gtest_discover_tests(${T_NAME} DISCOVERY_MODE POST_BUILD DISCOVERY_TIMEOUT 60 TEST_FILTER "-*Concurrency.*"
                       PROPERTIES LABELS "${T_LABELS}" ${props})
  gtest_discover_tests(${T_NAME} DISCOVERY_MODE POST_BUILD DISCOVERY_TIMEOUT 60 TEST_FILTER "*Concurrency.*"
                       TEST_LIST ${T_NAME}_concurrency_tests PROPERTIES LABELS "${T_LABELS}" ${props})
  set(labels_file ${CMAKE_CURRENT_BINARY_DIR}/${T_NAME}_concurrency_labels.cmake)
  file(WRITE ${labels_file} "if(${T_NAME}_concurrency_tests)\n  set_tests_properties(\${${T_NAME}_concurrency_tests} "
                            "PROPERTIES LABELS \"${T_LABELS};concurrency\")\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${labels_file})
endfunction()
