# hzp_options: the one INTERFACE target carrying language standard, warnings and sanitizer flags.
# Every hzpbench target links it, so a flag is set in exactly one place.
add_library(hzp_options INTERFACE)
target_compile_features(hzp_options INTERFACE cxx_std_20)
target_compile_options(hzp_options INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-unused-parameter>
  $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall>)
if(HZP_TSAN)
  target_compile_options(hzp_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=thread -g -O1>)
  target_link_options(hzp_options INTERFACE -fsanitize=thread)
endif()
