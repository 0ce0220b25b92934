# Tests of `hzpbench run` and `hzpbench validate` (docs/run.md), included from tests/harness/CMakeLists.txt.
#   - every bad input ends with its message and exit code 2 before anything runs, and leaves no file;
#   - end-to-end runs read back with h5py (run_e2e_test.py): the schema, the step-time closure, tensor dumps,
#     the trace, divergence, a throwing rank and a stalled rank at 1 and 2 ranks, and SIGKILLed runs;
#   - the pieces (link profiles, options, summary statistics) as unit tests, the failure channel under MPI.

set(hzp_run_dir ${CMAKE_CURRENT_BINARY_DIR}/run)
file(MAKE_DIRECTORY ${hzp_run_dir})
# Every run test is bounded: two steps of tiny, a file in the build tree, so a check that fails to trigger
# costs a second and writes nothing into the source tree.
set(hzp_run_small --set model.preset=tiny --set train.steps=2 --set train.warmup_steps=0)

# hzp_add_bad_run(NAME <test> MATCH <regex> ARGS <extra args...>): `hzpbench run` exits 2 with MATCH and
# creates no results file.
function(hzp_add_bad_run)
  cmake_parse_arguments(A "" "NAME;MATCH" "ARGS" ${ARGN})
  set(out ${hzp_run_dir}/${A_NAME}.h5)
  hzp_add_cli_test(NAME ${A_NAME} ARGS run ${hzp_run_small} --out ${out} ${A_ARGS} RC 2 MATCH "${A_MATCH}"
                   NO_MATCH "step +1/|results: ")
endfunction()

# --- configuration
hzp_add_bad_run(NAME run_bad_unknown_key ARGS --set no_such.key=1
  MATCH "unknown key 'no_such\\.key'")
hzp_add_bad_run(NAME run_bad_typo_suggests ARGS --set model.layer=4
  MATCH "unknown key 'model\\.layer'.*Did you mean 'model\\.layers'")
hzp_add_bad_run(NAME run_bad_wrong_type ARGS --set train.global_batch=many
  MATCH "'many' is not an integer; train\\.global_batch takes an integer > 0")
hzp_add_bad_run(NAME run_bad_negative_size ARGS --set model.hidden=-64
  MATCH "model\\.hidden = -64 is out of range: must be > 0")
hzp_add_bad_run(NAME run_bad_zero_size ARGS --set train.micro_batch_size=0
  MATCH "train\\.micro_batch_size = 0 is out of range: must be > 0")
hzp_add_bad_run(NAME run_bad_batch_not_dividing ARGS --set train.global_batch=15
  MATCH "train\\.global_batch = 15 is not a multiple of train\\.micro_batch_size = 2")
hzp_add_bad_run(NAME run_bad_heads_kv ARGS --set model.kv_heads=3
  MATCH "model\\.heads = 4 is not divisible by model\\.kv_heads = 3")
hzp_add_bad_run(NAME run_bad_seq_len_limit ARGS --set model.seq_len=4096
  MATCH "model\\.seq_len = 4096 exceeds preset tiny's limit model\\.max_seq_len = 1024")
# A preset's warm-up longer than a short run is scaled to the preset's share of it (and says so); an
# explicit one is checked as given (run_bad_warmup_beyond_steps).
hzp_add_cli_test(NAME run_short_preset_run ARGS run --set model.preset=tiny --set train.steps=3
                 --out ${hzp_run_dir}/run_short_preset_run.h5 --force
                 MATCH "warmup_steps = 0 +# preset model\\.preset=tiny, scaled from 30 of 300 steps to train\\.steps = 3.*status: ok")
hzp_add_bad_run(NAME run_bad_warmup_beyond_steps ARGS --set train.warmup_steps=5
  MATCH "train\\.warmup_steps = 5 exceeds train\\.steps = 2")
hzp_add_bad_run(NAME run_bad_unknown_scheduler ARGS --set scheduler.name=zero9
  MATCH "scheduler\\.name = zero9 is not an allowed value.*Fix: use one of none")
if(NOT HZP_HAVE_CUDA)  # with CUDA built in, a run on a machine without a device: run_e2e_cuda_no_device
  hzp_add_bad_run(NAME run_bad_cuda_backend ARGS --set backend=cuda
    MATCH "backend = cuda: this hzpbench was built without CUDA.*Fix: .*backend = cpu")
endif()
hzp_add_bad_run(NAME run_bad_attention_fused_on_cpu ARGS --set model.attention=fused
  MATCH "model\\.attention = fused is cuDNN's kernel and runs on a GPU, but backend = cpu\\. Fix: model\\.attention = auto")
# Every scheduler runs on backend = cuda (nd too: run_e2e_cuda_no_device), pipeline stages and context parallelism
# included (docs/cuda.md, "Pipeline on the GPU", "Context parallelism on the GPU"): validate passes nd at cp = 2, and
# at pp = 2 beside cp = 2, on a CUDA build (asynchzp's: hzpbench_cuda_validates_context_parallel); without CUDA built
# in the one refusal is the build's, never pp's or cp's.
foreach(layout IN ITEMS context pipeline_and_context)
  if(layout STREQUAL "context")
    set(world 2)
    set(extra "")
  else()
    set(world 4)
    set(extra --set scheduler.pp=2)
  endif()
  if(HZP_HAVE_CUDA)
    hzp_add_cli_test(NAME validate_cuda_nd_${layout} ARGS validate --set model.preset=tiny --set backend=cuda
      --set topology.world_size=${world} --set scheduler.name=nd --set scheduler.cp=2 ${extra}
      MATCH "valid for ${world} ranks" NO_MATCH "context parallelism|pipeline parallelism")
  else()
    hzp_add_cli_test(NAME validate_cuda_nd_${layout} ARGS validate --set model.preset=tiny --set backend=cuda
      --set topology.world_size=${world} --set scheduler.name=nd --set scheduler.cp=2 ${extra} RC 2
      MATCH "backend = cuda: this hzpbench was built without CUDA" NO_MATCH "context parallelism|pipeline parallelism")
  endif()
endforeach()
hzp_add_bad_run(NAME run_bad_pool_too_small ARGS --set scheduler.name=asynchzp --set scheduler.pool_mb=0.01
  MATCH "scheduler\\.pool_mb = 0\\.01 is too small for asynchzp.*unit 1 \\(block\\.0\\).*fix: raise scheduler\\.pool_mb")
hzp_add_bad_run(NAME run_bad_link_profile ARGS --set links.profile=b200
  MATCH "links\\.profile = b200 is not an allowed value\\. Fix: use one of none, h100-dgx, paper-npu, custom")
hzp_add_bad_run(NAME run_bad_negative_flush ARGS --set output.flush_s=-1
  MATCH "output\\.flush_s = -1 is out of range: must be >= 0")
hzp_add_bad_run(NAME run_bad_debug_spec ARGS --set debug.throw_at=one:2
  MATCH "debug\\.throw_at = \"one:2\" is not \"rank:step\"")
hzp_add_bad_run(NAME run_bad_debug_rank ARGS --set debug.stall_at=3:1
  MATCH "debug\\.stall_at = \"3:1\" names rank 3 but the job has ranks 0\\.\\.0")
hzp_add_bad_run(NAME run_bad_world_size_mismatch ARGS --set topology.world_size=4
  MATCH "topology\\.world_size = 4 but the job has 1 rank.*Fix: set it to 1 or 0")
hzp_add_bad_run(NAME run_bad_dump_steps ARGS --dump-tensors 0,7
  MATCH "--dump-tensors '0,7': step 7 is beyond the run \\(train\\.steps = 2")
hzp_add_bad_run(NAME run_bad_config_missing ARGS --config /nonexistent/run.toml
  MATCH "'/nonexistent/run\\.toml' does not exist")
hzp_add_bad_run(NAME run_bad_config_malformed ARGS --config ${CMAKE_CURRENT_SOURCE_DIR}/run_inputs/malformed.toml
  MATCH "malformed\\.toml:2:9: malformed TOML")
hzp_add_bad_run(NAME run_bad_config_wrong_type ARGS --config ${CMAKE_CURRENT_SOURCE_DIR}/run_inputs/wrong_type.toml
  MATCH "wrong_type\\.toml:2:9: train\\.steps = 'three': got a string")
# --- data
hzp_add_bad_run(NAME run_bad_data_missing ARGS --set data.source=llmc --set data.path=/nonexistent/shard.bin
  MATCH "cannot open data file '/nonexistent/shard\\.bin'")
hzp_add_bad_run(NAME run_bad_data_corrupt ARGS --set data.source=llmc --set data.path=${PROJECT_SOURCE_DIR}/README.md
  MATCH "llm\\.c token file '.*README\\.md' has bad magic")
hzp_add_bad_run(NAME run_bad_data_path_for_synthetic ARGS --set data.path=${PROJECT_SOURCE_DIR}/README.md
  MATCH "data\\.path='.*README\\.md' is set but data\\.source=synthetic reads no file")
hzp_add_bad_run(NAME run_bad_nanogpt_vocab ARGS --set data.source=nanogpt --set data.path=${PROJECT_SOURCE_DIR}/README.md
                --set model.vocab=70000
  MATCH "data\\.source=nanogpt stores uint16 tokens but model\\.vocab=70000 is over 65535")
# --- output
hzp_add_cli_test(NAME run_bad_output_exists ARGS run ${hzp_run_small} --out ${CMAKE_CURRENT_SOURCE_DIR}/topology_8x2.toml
  RC 2 MATCH "topology_8x2\\.toml' already exists and is never overwritten\\. Fix: --force")
hzp_add_cli_test(NAME run_bad_output_unwritable ARGS run ${hzp_run_small} --out ${PROJECT_SOURCE_DIR}/README.md/run.h5
  RC 2 MATCH "README\\.md' is not a directory")
hzp_add_cli_test(NAME run_bad_output_is_directory ARGS run ${hzp_run_small} --out ${hzp_run_dir}
  RC 2 MATCH "output\\.path = '.*' is a directory\\. Fix: name a file")
# --- checkpoints (docs/checkpoints.md): every layout writes them (asynchzp's stages too); a run without training state
# refuses them, a missing folder, a missing checkpoint
hzp_add_cli_test(NAME validate_checkpoint_asynchzp_pp ARGS validate --set model.preset=tiny --set topology.world_size=2
  --set scheduler.name=asynchzp --set scheduler.pp=2 --set output.checkpoint_every=5 MATCH "valid for 2 ranks")
hzp_add_cli_test(NAME validate_bad_checkpoint_collective_only ARGS validate --set model.preset=tiny
  --set topology.world_size=2 --set debug.collective_only=true --set output.checkpoint_every=5 RC 2
  MATCH "output\\.checkpoint_every = 5 with debug\\.collective_only = true: the stand-in scheduler has no training state\\. Fix: debug\\.collective_only = false, or output\\.checkpoint_every = 0")
# A checkpoint on the signal only (what a sweep asks of every task) is off, with a note, where it cannot be written.
hzp_add_cli_test(NAME validate_checkpoint_on_signal_off_note ARGS validate --set model.preset=tiny
  --set topology.world_size=2 --set debug.collective_only=true --set output.checkpoint_on_signal=true
  MATCH "output\\.checkpoint_on_signal = true is off for this run: debug\\.collective_only = true")
hzp_add_bad_run(NAME run_bad_checkpoint_dir ARGS --set output.checkpoint_every=1 --set output.checkpoint_dir=${hzp_run_dir}/no_such_dir
  MATCH "output\\.checkpoint_dir = \"[^\"]*no_such_dir\" is not a folder\\. Fix: create it")
hzp_add_bad_run(NAME run_bad_resume_missing ARGS --resume ${hzp_run_dir}/no_such.ckpt.h5
  MATCH "checkpoint '[^']*no_such\\.ckpt\\.h5': no such file")
# --- world size: `none` is one rank only; the message names the registered schedulers
add_test(NAME run_bad_none_at_two_ranks
         COMMAND ${CMAKE_COMMAND} -DPROGRAM=${MPIEXEC_EXECUTABLE}
                 "-DARGS=${MPIEXEC_NUMPROC_FLAG}|2|$<TARGET_FILE:hzpbench>|run|--set|model.preset=tiny|--set|scheduler.name=none|--out|${hzp_run_dir}/none_np2.h5"
                 -DRC=2 "-DMATCH=scheduler\\.name = none is the single-rank reference and runs on 1 rank, but the job has 2 ranks\\. Registered schedulers: none"
                 "-DNO_MATCH=rank 1" -P ${CMAKE_CURRENT_SOURCE_DIR}/check_cli.cmake)
set_tests_properties(run_bad_none_at_two_ranks PROPERTIES LABELS mpi PROCESSORS 2 TIMEOUT 60)

# --- hzpbench validate: the same checks without MPI
hzp_add_cli_test(NAME validate_tiny ARGS validate --set model.preset=tiny
  MATCH "valid for 1 rank.*llama L=4 d=64.*201280 parameters.*16 sequences per step = 8 micro-batches of 2")
hzp_add_cli_test(NAME validate_embedded_default ARGS validate MATCH "valid for 1 rank.*llama L=8 d=512")
hzp_add_cli_test(NAME validate_bad_batch_for_world ARGS validate --set model.preset=tiny --set topology.world_size=3
                 --set scheduler.name=none RC 2 MATCH "scheduler\\.name = none is the single-rank reference")
hzp_add_cli_test(NAME validate_bad_pool_too_small ARGS validate --set model.preset=tiny --set topology.world_size=4
                 --set scheduler.name=asynchzp --set scheduler.pool_mb=0.01 RC 2 MATCH "scheduler\\.pool_mb = 0\\.01 is too small")
# Context parallelism: nd's and asynchzp's key only; its degree must divide W with tp and pp, and 2·cp must divide the
# sequence; asynchzp's optimizer group spans whole cp groups.
hzp_add_cli_test(NAME validate_bad_cp_not_nd ARGS validate --set model.preset=tiny --set topology.world_size=2
                 --set scheduler.name=ddp --set scheduler.cp=2 RC 2
                 MATCH "scheduler\\.cp = 2 is the context-parallel degree of nd and asynchzp, but scheduler\\.name = ddp.*Fix: scheduler\\.name = nd or asynchzp")
hzp_add_cli_test(NAME validate_bad_cp_asynchzp_z1 ARGS validate --set model.preset=tiny --set topology.world_size=8
                 --set scheduler.name=asynchzp --set scheduler.cp=4 --set scheduler.z1=2 RC 2
                 MATCH "scheduler\\.z1 = 2.*scheduler\\.cp = 4, scheduler\\.pp = 1 at world size W = 8:.*scheduler\\.z1 = 2 is not a multiple of scheduler\\.cp = 4.*fix:")
hzp_add_cli_test(NAME validate_bad_cp_asynchzp_seq_len ARGS validate --set model.preset=tiny --set topology.world_size=4
                 --set scheduler.name=asynchzp --set scheduler.cp=4 --set model.seq_len=36 RC 2
                 MATCH "model\\.seq_len = 36 must divide into 2 · scheduler\\.cp = 8 equal chunks.*Fix:")
hzp_add_cli_test(NAME validate_asynchzp_pp_cp ARGS validate --set model.preset=tiny --set topology.world_size=8
                 --set scheduler.name=asynchzp --set scheduler.pp=2 --set scheduler.cp=2 --set scheduler.z1=4
                 --set scheduler.z2=2 --set scheduler.z3=2 MATCH "valid for 8 ranks")
hzp_add_cli_test(NAME validate_bad_pp_not_nd ARGS validate --set model.preset=tiny --set topology.world_size=2
                 --set scheduler.name=zero3 --set scheduler.pp=2 RC 2
                 MATCH "the pipeline keys of nd and asynchzp, but scheduler\\.name = zero3.*Fix: scheduler\\.name = nd or asynchzp")
hzp_add_cli_test(NAME validate_bad_asynchzp_pp_z1 ARGS validate --set model.preset=tiny --set topology.world_size=4
                 --set scheduler.name=asynchzp --set scheduler.pp=2 --set scheduler.z1=4 RC 2
                 MATCH "scheduler\\.z1 = 4 does not divide the 2 ranks of a pipeline stage \\(W / pp\\) = 2.*fix:")
hzp_add_cli_test(NAME validate_asynchzp_cp ARGS validate --set model.preset=tiny --set topology.world_size=4
                 --set scheduler.name=asynchzp --set scheduler.cp=2 --set scheduler.z1=4 --set scheduler.z2=2
                 --set scheduler.z3=2 MATCH "valid for 4 ranks")
hzp_add_cli_test(NAME validate_bad_cp_world ARGS validate --set model.preset=tiny --set topology.world_size=4
                 --set scheduler.name=nd --set scheduler.cp=3 RC 2
                 MATCH "scheduler\\.cp = 3 times scheduler\\.pp = 1 = 3 does not divide the world size W = 4")
hzp_add_cli_test(NAME validate_bad_cp_seq_len ARGS validate --set model.preset=tiny --set topology.world_size=4
                 --set scheduler.name=nd --set scheduler.cp=4 --set model.seq_len=36 RC 2
                 MATCH "model\\.seq_len = 36 must divide into 2 · scheduler\\.cp = 8 equal chunks.*Fix:")
hzp_add_cli_test(NAME validate_nd_cp ARGS validate --set model.preset=tiny --set topology.world_size=8
                 --set scheduler.name=nd --set scheduler.cp=2 --set scheduler.tp=2
                 MATCH "valid for 8 ranks")
hzp_add_cli_test(NAME validate_bad_output_exists ARGS validate --out ${CMAKE_CURRENT_SOURCE_DIR}/topology_8x2.toml
                 RC 2 MATCH "already exists")

# Phantom peers' bad input (docs/phantom.md): the key, its value and the fix, exit 2 before anything runs.
hzp_add_cli_test(NAME phantom_world_size_mismatch ARGS run --set model.preset=tiny --set topology.phantom_world=4
                 --set topology.world_size=8 RC 2
                 MATCH "topology\\.phantom_world = 4 but topology\\.world_size = 8.*Fix: topology\\.world_size = 4 or 0")
hzp_add_cli_test(NAME phantom_rank_out_of_range ARGS run --set model.preset=tiny --set topology.phantom_world=4
                 --set topology.phantom_rank=4 RC 2
                 MATCH "topology\\.phantom_rank = 4 is outside the phantom world's ranks 0\\.\\.3.*Fix: a rank in 0\\.\\.3")
hzp_add_cli_test(NAME phantom_rank_without_world ARGS run --set model.preset=tiny --set topology.phantom_rank=2 RC 2
                 MATCH "topology\\.phantom_rank = 2 with topology\\.phantom_world = 0.*Fix:")
hzp_add_cli_test(NAME phantom_refuses_checkpoints ARGS run --set model.preset=tiny --set topology.phantom_world=4
                 --set scheduler.name=nd --set scheduler.pp=2 --set output.checkpoint_every=5 RC 2
                 MATCH "topology\\.phantom_world = 4 with output\\.checkpoint_every = 5.*Fix: output\\.checkpoint_every = 0")
# backend = cuda runs phantom peers (docs/phantom.md, "On the GPU"); what the GPU does not run is still refused by
# name before anything starts, the MoE layer here (a build without CUDA refuses backend = cuda itself).
hzp_add_cli_test(NAME phantom_cuda_refuses_moe ARGS run --set model.preset=tiny-moe --set topology.phantom_world=4
                 --set backend=cuda --set scheduler.name=nd RC 2
                 MATCH "(model\\.experts = [0-9]+ with backend = cuda.*Fix: backend = cpu|built without CUDA.*Fix:)")

# --- end to end, read back with h5py (the PATH python3, as for results_killed_writer above)
if(Python3_Interpreter_FOUND)
  # hzp_add_e2e_tests(SCRIPT <python script> SPECS "name|scenario|ranks|timeout" ...): one CTest per spec,
  # the script run with its scenario, the program, mpiexec, the rank count (0 = the scenario picks; two
  # processors reserved) and a work folder of its own.
  function(hzp_add_e2e_tests)
    cmake_parse_arguments(A "" "SCRIPT" "SPECS" ${ARGN})
    foreach(spec IN LISTS A_SPECS)
      string(REPLACE "|" ";" f "${spec}")
      list(GET f 0 name)
      list(GET f 1 scenario)
      list(GET f 2 ranks)
      list(GET f 3 timeout)
      add_test(NAME ${name}
               COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/${A_SCRIPT} ${scenario}
                       --hzpbench $<TARGET_FILE:hzpbench> --mpiexec ${MPIEXEC_EXECUTABLE} --ranks ${ranks}
                       --workdir ${hzp_run_dir}/${name})
      set(procs ${ranks})
      if(procs LESS 1)
        set(procs 2)
      endif()
      set_tests_properties(${name} PROPERTIES TIMEOUT ${timeout} SKIP_RETURN_CODE 77 PROCESSORS ${procs}
                           LABELS "unit;mpi" ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
    endforeach()
  endfunction()
  hzp_add_e2e_tests(SCRIPT run_e2e_test.py SPECS
    "run_e2e_none_tiny|none_tiny|1|120"
    "run_e2e_closure_every_scheduler|closure|0|300"
    "run_e2e_collective_only_np2|collective_only|2|120"
    "run_e2e_deterministic|deterministic|2|120"
    "run_e2e_mapped_buffers|mapped_buffers|2|240"
    "run_e2e_moe|moe|2|120"
    "run_e2e_diverged|diverged|1|60"
    "run_e2e_skip_nonfinite|skip_nonfinite|1|60"
    "run_e2e_throw_np1|throw|1|60"
    "run_e2e_throw_np2|throw|2|60"
    "run_e2e_stall_np1|stall|1|90"
    "run_e2e_stall_np2|stall|2|90"
    "run_e2e_stall_asynchzp_np4|stall_asynchzp|4|150"
    "run_e2e_killed|killed|1|180")
  # Phantom peers (phantom_run_test.py, docs/phantom.md): one process as rank r of W. exact_*: bytes per op and level
  # and model state equal rank r's of the real 4-rank run (ranks 0 and 3; under ep the all-to-all-v's bytes equal the
  # model's); scale: W = 64 on `small` reads back phantom; links: the emulated links hold a phantom rank's calls;
  # pipeline_wait: a phantom stage waits for its absent peer stage.
  hzp_add_e2e_tests(SCRIPT phantom_run_test.py SPECS
    "phantom_exact_zero3_np4|exact_zero3|4|240"
    "phantom_exact_hsdp_np4|exact_hsdp|4|240"
    "phantom_exact_asynchzp_np4|exact_asynchzp|4|240"
    "phantom_exact_asynchzp_inline_np4|exact_asynchzp_inline|4|240"
    "phantom_exact_asynchzp_tied_allgather_np4|exact_asynchzp_tied_allgather|4|240"
    "phantom_exact_asynchzp_tied_alltoall_np4|exact_asynchzp_tied_alltoall|4|240"
    "phantom_exact_nd_tp2_np4|exact_nd_tp2|4|240"
    "phantom_exact_nd_cp2_np4|exact_nd_cp2|4|240"
    "phantom_exact_asynchzp_cp2_np4|exact_asynchzp_cp2|4|240"
    "phantom_exact_asynchzp_cp2_tied_allgather_np4|exact_asynchzp_cp2_tied_allgather|4|240"
    "phantom_exact_asynchzp_cp2_tied_alltoall_np4|exact_asynchzp_cp2_tied_alltoall|4|240"
    "phantom_exact_nd_pp2_np4|exact_nd_pp2|4|240"
    "phantom_exact_asynchzp_pp2_np4|exact_asynchzp_pp2|4|240"
    "phantom_exact_nd_ep2_np4|exact_nd_ep2|4|240"
    "phantom_exact_nd_ep4_np4|exact_nd_ep4|4|240"
    "phantom_pipeline_wait_np4|pipeline_wait|4|300"
    "phantom_scale_w64|scale|1|300"
    "phantom_links|links|1|240")
  # Nothing lost (results_durability_test.py): --force on a live file, a failing --force run, a full disk, a
  # file replaced under the run, SIGTERM/SIGINT, a cut file, default names of simultaneous runs.
  hzp_add_e2e_tests(SCRIPT results_durability_test.py SPECS
    "results_force_live_np1|force_live|1|120"
    "results_force_live_np4|force_live|4|180"
    "results_force_failing_np1|force_failing|1|120"
    "results_force_failing_np2|force_failing|2|120"
    "results_disk_full_np1|disk_full|1|90"
    "results_disk_full_np4|disk_full|4|90"
    "results_displaced_np1|displaced|1|90"
    "results_sigterm_np1|sigterm|1|90"
    "results_sigterm_np2|sigterm|2|90"
    "results_sigterm_np4|sigterm|4|120"
    "results_sigint_np2|sigint|2|90"
    "results_short_file|short_file|1|60"
    "results_default_names|default_names|1|120")
  # Checkpoints through the run (checkpoint_run_test.py): resume equality, refusals, a signal, a kill.
  hzp_add_e2e_tests(SCRIPT checkpoint_run_test.py SPECS
    "checkpoint_run_resume_np1|resume|1|180"
    "checkpoint_run_resume_np2|resume|2|180"
    "checkpoint_run_reshard|reshard|0|180"
    "checkpoint_run_refusals_np2|refusals|2|180"
    "checkpoint_run_preempt_np2|preempt|2|180"
    "checkpoint_run_killed|killed|1|180"
    "checkpoint_run_nd_np2|nd|2|300"
    "checkpoint_run_nd_np4|nd|4|400"
    "checkpoint_run_nd_reshard|nd_reshard|0|300"
    "checkpoint_run_nd_bf16_np2|nd_bf16|2|300"
    "checkpoint_run_nd_bf16_np4|nd_bf16|4|400"
    "checkpoint_run_asynchzp_np2|asynchzp|2|400"
    "checkpoint_run_asynchzp_np4|asynchzp|4|600"
    "checkpoint_run_asynchzp_reshard|asynchzp_reshard|0|400")
  if(HZP_HAVE_CUDA)
    # backend = cuda end to end: on a GPU (label gpu, exit 77 without a device), and the one clear failure
    # on a machine without one (CI; exit 77 where a device is visible).
    foreach(spec IN ITEMS "run_e2e_cuda_tiny|cuda_tiny|gpu|300" "run_e2e_cuda_no_device|cuda_no_device|unit|60")
      string(REPLACE "|" ";" f "${spec}")
      list(GET f 0 name)
      list(GET f 1 scenario)
      list(GET f 2 label)
      list(GET f 3 timeout)
      add_test(NAME ${name}
               COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/run_e2e_test.py ${scenario}
                       --hzpbench $<TARGET_FILE:hzpbench> --workdir ${hzp_run_dir}/${name})
      set_tests_properties(${name} PROPERTIES TIMEOUT ${timeout} SKIP_RETURN_CODE 77 LABELS ${label}
                           ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
      if(label STREQUAL "gpu")
        set_tests_properties(${name} PROPERTIES RESOURCE_GROUPS "gpus:1")  # as hzp_add_gpu_test
      endif()
    endforeach()
    # Phantom peers on the GPU (phantom_run_test.py cuda_exact_*): W = 8, rank 3, backend = cuda against the CPU
    # phantom run of the same layout, bytes and model state equal.
    foreach(layout IN ITEMS zero3 asynchzp nd_pp2 nd_cp2 nd_tp2)
      add_test(NAME phantom_cuda_exact_${layout}
               COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/phantom_run_test.py cuda_exact_${layout}
                       --hzpbench $<TARGET_FILE:hzpbench> --workdir ${hzp_run_dir}/phantom_cuda_exact_${layout})
      set_tests_properties(phantom_cuda_exact_${layout} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS gpu
                           RESOURCE_GROUPS "gpus:1" ENVIRONMENT "OPENBLAS_NUM_THREADS=1")
    endforeach()
  endif()
endif()

# --- the pieces: options, link profiles, summary statistics (unit); the failure channel (MPI)
hzp_add_unit_test(NAME test_run_pieces SOURCES test_run_pieces.cpp LIBS hzp_harness)
target_include_directories(test_run_pieces PRIVATE ${PROJECT_SOURCE_DIR}/harness/src)
# --- exposed communication timed on the device: stalls split by phase, the stall clock, StepMeter (unit; the GPU's
# figures are test_cuda_engines' CudaExposedComm)
hzp_add_unit_test(NAME test_exposed_on_device SOURCES test_exposed_on_device.cpp LIBS hzp_harness)
target_include_directories(test_exposed_on_device PRIVATE ${PROJECT_SOURCE_DIR}/harness/src)
hzp_add_unit_test(NAME test_signal_stop SOURCES test_signal_stop.cpp LIBS hzp_harness)
target_include_directories(test_signal_stop PRIVATE ${PROJECT_SOURCE_DIR}/harness/src)
add_executable(test_failure_channel_mpi test_failure_channel_mpi.cpp)
target_link_libraries(test_failure_channel_mpi PRIVATE hzp_harness hzp_mpi_test_main hzp_options)
target_include_directories(test_failure_channel_mpi PRIVATE ${PROJECT_SOURCE_DIR}/harness/src)
set_target_properties(test_failure_channel_mpi PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
hzp_add_mpi_test(NAME test_failure_channel_mpi TARGET test_failure_channel_mpi RANKS 2 4 TIMEOUT 60)
