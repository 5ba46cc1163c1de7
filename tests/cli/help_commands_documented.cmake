# Every command that `warmkey --help` lists is named ("warmkey <command>") in each given document
# (script mode).
#   -DWARMKEY=<binary> -DDOCS=<document|document...>
#   [-DHELP_FILE=<file>]: read the help text from this file instead of running the binary (to check
#   this script by hand against a made-up help text)
if(DEFINED HELP_FILE)
  file(READ "${HELP_FILE}" help)
else()
  execute_process(COMMAND ${WARMKEY} --help RESULT_VARIABLE rc OUTPUT_VARIABLE help ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "warmkey --help exited with status ${rc}\n--- stdout:\n${help}\n--- stderr:\n${err}")
  endif()
endif()

# CLI11 prints the commands under a "Subcommands:" heading (upper case in later CLI11 versions),
# one per line as two spaces, the name, the description; a wrapped description continues on lines
# indented further, and a blank line ends the list.
string(TOLOWER "${help}" lower)
string(FIND "${lower}" "\nsubcommands:\n" at)
if(at EQUAL -1)
  message(FATAL_ERROR "no 'Subcommands:' heading in warmkey --help:\n${help}")
endif()
math(EXPR at "${at} + 13")  # the newline that ends the heading
string(SUBSTRING "${help}" ${at} -1 section)
string(FIND "${section}" "\n\n" end)
if(NOT end EQUAL -1)
  string(SUBSTRING "${section}" 0 ${end} section)
endif()
string(REGEX MATCHALL "\n  [a-z][a-z0-9_-]*" entries "${section}")
set(commands)
foreach(entry IN LISTS entries)
  string(STRIP "${entry}" name)
  list(APPEND commands "${name}")
endforeach()
if(NOT commands)
  message(FATAL_ERROR "no command found under 'Subcommands:' in warmkey --help:\n${help}")
endif()

string(REPLACE "|" ";" docs "${DOCS}")
set(missing)
foreach(doc IN LISTS docs)
  file(READ "${doc}" text)
  foreach(name IN LISTS commands)
    string(REGEX MATCH "warmkey ${name}([^a-zA-Z0-9_-]|$)" found "${text}")
    if(NOT found)
      string(APPEND missing "\n  ${doc}: no 'warmkey ${name}'")
    endif()
  endforeach()
endforeach()
if(missing)
  message(FATAL_ERROR "commands of warmkey --help missing from the documentation:${missing}")
endif()
list(JOIN commands ", " shown)
message(STATUS "every command of warmkey --help is documented (${shown})")
