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
  gtest_discover_tests(${T_NAME}
    DISCOVERY_MODE POST_BUILD
    DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS "${T_LABELS}" SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]" TIMEOUT ${T_TIMEOUT}
               ENVIRONMENT "WARMKEY_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()
