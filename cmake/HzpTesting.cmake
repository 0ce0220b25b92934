# Test and benchmark registration helpers (CTest drives every test and benchmark; docs/architecture.md,
# Conventions). CTest labels are fixed project-wide:
#   mpi, tsan, gpu, slurm, bench, long. The README test command runs everything but `long`.
# Exit code 77 means "skipped" everywhere (no GPU, all MPI tests skipped).

set(HZP_MPI_TEST_TIMEOUT 300 CACHE STRING "Default CTest timeout (s) of one MPI test")

# hzp_add_unit_test(NAME <target> SOURCES ... [LIBS ...] [LABELS ...])
# A serial GoogleTest binary; each TEST becomes a CTest test through gtest_discover_tests.
function(hzp_add_unit_test)
  cmake_parse_arguments(A "" "NAME" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${A_NAME} ${A_SOURCES})
  target_link_libraries(${A_NAME} PRIVATE ${A_LIBS} GTest::gtest GTest::gtest_main hzp_options)
  set_target_properties(${A_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  include(GoogleTest)
  gtest_discover_tests(${A_NAME} DISCOVERY_TIMEOUT 60
                       PROPERTIES TIMEOUT 120 LABELS "unit;${A_LABELS}")
endfunction()

# hzp_add_mpi_test(NAME <name> TARGET <target> RANKS 2 4 8 [TIMEOUT s] [LABELS ...] [ARGS ...] [ENV ...])
# One CTest test per rank count, named <name>_np<N>, run through mpiexec (never gtest_discover_tests:
# an MPI binary must be started by mpiexec as a whole).
function(hzp_add_mpi_test)
  cmake_parse_arguments(A "" "NAME;TARGET;TIMEOUT" "RANKS;LABELS;ARGS;ENV" ${ARGN})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT ${HZP_MPI_TEST_TIMEOUT})
  endif()
  if(HZP_TSAN)
    # A whole-build TSan run: MPICH/UCX's mmap hooks crash TSan processes (docs/environment.md,
    # ThreadSanitizer with MPICH).
    list(APPEND A_ENV "UCX_MEM_MMAP_HOOK_MODE=none")
  endif()
  foreach(n IN LISTS A_RANKS)
    add_test(NAME ${A_NAME}_np${n}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${n} ${MPIEXEC_PREFLAGS}
                     $<TARGET_FILE:${A_TARGET}> ${MPIEXEC_POSTFLAGS} ${A_ARGS})
    # OPENBLAS_NUM_THREADS=1: ranks already oversubscribe the cores (docs/environment.md, MPI on
    # oversubscribed cores).
    set_tests_properties(${A_NAME}_np${n} PROPERTIES PROCESSORS ${n} TIMEOUT ${A_TIMEOUT}
                         LABELS "mpi;${A_LABELS}" SKIP_RETURN_CODE 77
                         ENVIRONMENT "OPENBLAS_NUM_THREADS=1;${A_ENV}")
  endforeach()
endfunction()

# hzp_add_gpu_test(NAME <target> SOURCES ... [LIBS ...])
# A GPU test binary exits 77 when no device is usable (its main is tests/support/gpu_test_main.cpp), so
# the skip is visible in CTest. Built in every configuration: without CUDA it always skips.
function(hzp_add_gpu_test)
  cmake_parse_arguments(A "" "NAME" "SOURCES;LIBS" ${ARGN})
  add_executable(${A_NAME} ${A_SOURCES})
  target_link_libraries(${A_NAME} PRIVATE ${A_LIBS} hzp_gpu_test_main GTest::gtest hzp_options)
  set_target_properties(${A_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME ${A_NAME} COMMAND ${A_NAME})
  set_tests_properties(${A_NAME} PROPERTIES LABELS "gpu" SKIP_RETURN_CODE 77 TIMEOUT 600
                       RESOURCE_GROUPS "gpus:1")
endfunction()

# hzp_add_bench(NAME <target> SOURCES ... [LIBS ...] [ARGS ...] [MPI_RANKS n] [GPU])
# Each benchmark binary runs once in CTest with a tiny min time (label bench), so it at least runs in CI.
# GPU: labels bench;gpu and exit code 77 (no usable device) is a skip.
function(hzp_add_bench)
  cmake_parse_arguments(A "GPU" "NAME;MPI_RANKS" "SOURCES;LIBS;ARGS" ${ARGN})
  add_executable(${A_NAME} ${A_SOURCES})
  target_link_libraries(${A_NAME} PRIVATE ${A_LIBS} benchmark::benchmark hzp_options)
  set(_args --benchmark_min_time=0.01 ${A_ARGS})
  if(A_MPI_RANKS)
    add_test(NAME ${A_NAME}_np${A_MPI_RANKS}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${A_MPI_RANKS} ${MPIEXEC_PREFLAGS}
                     $<TARGET_FILE:${A_NAME}> ${MPIEXEC_POSTFLAGS} ${_args})
    set_tests_properties(${A_NAME}_np${A_MPI_RANKS} PROPERTIES LABELS "bench;mpi" TIMEOUT 300
                         PROCESSORS ${A_MPI_RANKS} ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
  else()
    add_test(NAME ${A_NAME} COMMAND ${A_NAME} ${_args})
    set_tests_properties(${A_NAME} PROPERTIES LABELS "bench" TIMEOUT 300)
    if(A_GPU)
      set_tests_properties(${A_NAME} PROPERTIES LABELS "bench;gpu" SKIP_RETURN_CODE 77 RESOURCE_GROUPS "gpus:1"
                           TIMEOUT 900)
    endif()
  endif()
endfunction()

# hzp_add_tsan_mpi_test(NAME <name> SOURCES <test sources> TARGETS <hzp library targets> RANKS <n>
#                       [TIMEOUT s] [ENV ...])
# A ThreadSanitizer copy of an MPI test inside the normal build: the test sources and every source of
# the listed hzpbench targets (read from their SOURCES and SOURCE_DIR, so no list is duplicated) are
# compiled again into one executable with -fsanitize=thread, each with the COMPILE_OPTIONS its own folder gave it
# (-ffp-contract=off, -Wno-psabi: source properties are per directory); the targets' include directories and
# their non-hzpbench link libraries (MPI, GTest, ...) are reused. Registered as <name>_np<N> with
# labels mpi;tsan. UCX_MEM_MMAP_HOOK_MODE=none: MPICH/UCX's mmap hooks crash a TSan process
# (docs/environment.md, ThreadSanitizer with MPICH); halt_on_error=1: any report fails the test.
function(hzp_add_tsan_mpi_test)
  cmake_parse_arguments(A "" "NAME;TIMEOUT" "SOURCES;TARGETS;RANKS;ENV" ${ARGN})
  set(_srcs ${A_SOURCES})
  set(_opts_of "")  # pairs "source|options" to apply once the executable exists
  set(_incs "")
  set(_libs "")
  foreach(t IN LISTS A_TARGETS)
    get_target_property(_tsrc ${t} SOURCES)
    get_target_property(_tdir ${t} SOURCE_DIR)
    foreach(s IN LISTS _tsrc)
      if(s MATCHES "\\.(h|hpp|cuh|in)$")
        continue()
      endif()
      if(NOT IS_ABSOLUTE "${s}")
        set(s "${_tdir}/${s}")
      endif()
      get_source_file_property(_sopts "${s}" DIRECTORY "${_tdir}" COMPILE_OPTIONS)
      list(APPEND _srcs "${s}")
      if(_sopts)
        string(REPLACE ";" "," _sopts "${_sopts}")
        list(APPEND _opts_of "${s}|${_sopts}")
      endif()
    endforeach()
    get_target_property(_tinc ${t} INCLUDE_DIRECTORIES)
    if(_tinc)
      list(APPEND _incs ${_tinc})
    endif()
    get_target_property(_tlib ${t} LINK_LIBRARIES)
    if(_tlib)
      list(APPEND _libs ${_tlib})
    endif()
  endforeach()
  # The listed targets are compiled in; linking them too would bring uninstrumented duplicates.
  list(REMOVE_ITEM _libs ${A_TARGETS})
  list(REMOVE_DUPLICATES _libs)
  list(REMOVE_DUPLICATES _incs)
  add_executable(${A_NAME} ${_srcs})
  foreach(p IN LISTS _opts_of)
    string(REPLACE "|" ";" p "${p}")
    list(GET p 0 _src)
    list(GET p 1 _o)
    string(REPLACE "," ";" _o "${_o}")
    set_source_files_properties("${_src}" TARGET_DIRECTORY ${A_NAME} PROPERTIES COMPILE_OPTIONS "${_o}")
  endforeach()
  # Generated sources (build_info.cpp) come from the original targets' custom commands.
  add_dependencies(${A_NAME} ${A_TARGETS})
  target_include_directories(${A_NAME} PRIVATE ${_incs})
  target_link_libraries(${A_NAME} PRIVATE ${_libs} hzp_options)
  target_compile_options(${A_NAME} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=thread -g -O1>)
  target_link_options(${A_NAME} PRIVATE -fsanitize=thread)
  set_target_properties(${A_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT ${HZP_MPI_TEST_TIMEOUT})
  endif()
  hzp_add_mpi_test(NAME ${A_NAME} TARGET ${A_NAME} RANKS ${A_RANKS} TIMEOUT ${A_TIMEOUT} LABELS tsan
                   ENV "UCX_MEM_MMAP_HOOK_MODE=none;TSAN_OPTIONS=halt_on_error=1 second_deadlock_stack=1;${A_ENV}")
endfunction()

# hzp_add_pytest(NAME <test> PATH <test file or folder> [LABELS ...] [PROCESSORS n] [TIMEOUT s] [ENV ...])
# pytest under the PATH python3 (the one scripts/bootstrap installs pytest, h5py and numpy into; chosen
# in tests/harness and cached), from the repository root, with HZPBENCH naming the program and its
# temporary files under the build tree. Not registered (with a note) when there is no python3.
function(hzp_add_pytest)
  cmake_parse_arguments(A "" "NAME;PATH;PROCESSORS;TIMEOUT" "LABELS;ENV" ${ARGN})
  find_package(Python3 COMPONENTS Interpreter)
  if(NOT Python3_Interpreter_FOUND)
    message(STATUS "python3 not found: ${A_NAME} (pytest) not registered")
    return()
  endif()
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 180)
  endif()
  if(NOT A_PROCESSORS)
    set(A_PROCESSORS 1)
  endif()
  add_test(NAME ${A_NAME}
           COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider
                   --basetemp=${CMAKE_CURRENT_BINARY_DIR}/${A_NAME} ${A_PATH}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(${A_NAME} PROPERTIES LABELS "${A_LABELS}" TIMEOUT ${A_TIMEOUT} PROCESSORS ${A_PROCESSORS}
                       ENVIRONMENT "HZPBENCH=$<TARGET_FILE:hzpbench>;PYTHONDONTWRITEBYTECODE=1;OPENBLAS_NUM_THREADS=1;${A_ENV}")
endfunction()
