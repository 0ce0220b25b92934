# options_doc_up_to_date: docs/options.md must equal `hzpbench list --markdown` byte for byte.
execute_process(COMMAND "${PROGRAM}" list --markdown RESULT_VARIABLE rc OUTPUT_VARIABLE generated
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "`${PROGRAM} list --markdown` failed (${rc}):\n${err}")
endif()
set(fix "Regenerate it from the source tree with:\n  ${PROGRAM} list --markdown > ${DOC}")
if(NOT EXISTS "${DOC}")
  message(FATAL_ERROR "${DOC} is missing. ${fix}")
endif()
file(READ "${DOC}" checked_in)
if(NOT checked_in STREQUAL generated)
  message(FATAL_ERROR "${DOC} is out of date with the option table (harness/src/option_keys.cpp). ${fix}")
endif()
