# Runs the warmkey binary once and checks its exit status, output and JSON (script mode).
#   -DWARMKEY=<binary> -DARGS=<arguments separated by |> -DEXPECT=ok|fail
#   [-DMATCH=<text that stdout+stderr must contain>] [-DJSON_NONEMPTY=<member of the stdout JSON
#   object that must be a non-empty array or object>] [-DJSON_EQ=<member.path=value|...>]
#   [-DCLEAN=<folder removed before the run>] [-DENV=<NAME=value|NAME=value...>]
string(REPLACE "|" ";" args "${ARGS}")
if(CLEAN)
  file(REMOVE_RECURSE "${CLEAN}")
endif()
set(env_cmd)
if(ENV)
  string(REPLACE "|" ";" env_list "${ENV}")
  set(env_cmd ${CMAKE_COMMAND} -E env ${env_list})
endif()
execute_process(COMMAND ${env_cmd} ${WARMKEY} ${args}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(shown "warmkey ${args}\n--- exit status: ${rc}\n--- stdout:\n${out}\n--- stderr:\n${err}")

# A sanitizer report fails the test even when the exit status was expected to be non-zero.
string(REGEX MATCH "(AddressSanitizer|LeakSanitizer|ThreadSanitizer|UndefinedBehaviorSanitizer|runtime error:)" san "${err}")
if(san)
  message(FATAL_ERROR "sanitizer report (${san})\n${shown}")
endif()

if(EXPECT STREQUAL "ok" AND NOT rc EQUAL 0)
  message(FATAL_ERROR "expected exit status 0\n${shown}")
elseif(EXPECT STREQUAL "fail" AND (rc EQUAL 0 OR NOT rc MATCHES "^[0-9]+$"))
  message(FATAL_ERROR "expected a non-zero exit status (and no crash)\n${shown}")
endif()

if(DEFINED MATCH)
  string(FIND "${out}${err}" "${MATCH}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "output does not contain '${MATCH}'\n${shown}")
  endif()
endif()

if(DEFINED JSON_NONEMPTY)
  string(JSON n ERROR_VARIABLE json_err LENGTH "${out}" ${JSON_NONEMPTY})
  if(json_err)
    message(FATAL_ERROR "stdout is not a JSON object with '${JSON_NONEMPTY}': ${json_err}\n${shown}")
  endif()
  if(n EQUAL 0)
    message(FATAL_ERROR "'${JSON_NONEMPTY}' is empty\n${shown}")
  endif()
endif()

if(DEFINED JSON_EQ)
  string(REPLACE "|" ";" pairs "${JSON_EQ}")
  foreach(pair IN LISTS pairs)
    string(REGEX MATCH "^([^=]+)=(.*)$" _ "${pair}")
    set(member "${CMAKE_MATCH_1}")
    set(want "${CMAKE_MATCH_2}")
    string(REPLACE "." ";" path "${member}")  # config.name -> config;name
    string(JSON got ERROR_VARIABLE json_err GET "${out}" ${path})
    if(json_err)
      message(FATAL_ERROR "stdout JSON has no '${member}': ${json_err}\n${shown}")
    endif()
    if(NOT got STREQUAL want)
      message(FATAL_ERROR "'${member}' is '${got}', expected '${want}'\n${shown}")
    endif()
  endforeach()
endif()
