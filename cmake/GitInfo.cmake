# Run at build time (cmake -P) so the recorded git SHA and dirty flag follow every commit, not only
# the last configure. configure_file rewrites the output only when it changes, so nothing rebuilds
# needlessly. Inputs: SRC_DIR, IN_FILE, OUT_FILE.
execute_process(COMMAND git rev-parse HEAD WORKING_DIRECTORY ${SRC_DIR}
                OUTPUT_VARIABLE HZP_GIT_SHA OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
                RESULT_VARIABLE _sha_rc)
if(NOT _sha_rc EQUAL 0 OR NOT HZP_GIT_SHA)
  set(HZP_GIT_SHA "unknown")
endif()
execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${SRC_DIR}
                OUTPUT_VARIABLE _status OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
                RESULT_VARIABLE _st_rc)
if(_st_rc EQUAL 0 AND _status STREQUAL "")
  set(HZP_GIT_DIRTY false)
else()
  set(HZP_GIT_DIRTY true)
endif()
configure_file(${IN_FILE} ${OUT_FILE} @ONLY)
