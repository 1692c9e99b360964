# libFuzzer targets (tests/fuzz/, docs/testing.md). Enabled with -DKVT_BUILD_FUZZERS=ON,
# which needs clang (Debian's clang-14 + libclang-rt-14-dev): the `fuzz` preset sets it,
# together with KVT_SANITIZE=address,undefined,fuzzer-no-link so every project target
# carries coverage instrumentation and ASan+UBSan.
#
# kvt_add_fuzzer(NAME name SOURCES a.cc ... [LIBS ...] [CORPUS dir])
# Builds one libFuzzer executable and registers a ctest test (label `fuzz`) that replays
# its seed corpus once (tests/fuzz/corpus/<name>/): a cheap regression check for every
# input that ever crashed it. scripts/fuzz.sh runs the fuzzers for a fixed time.
function(kvt_add_fuzzer)
  cmake_parse_arguments(F "" "NAME" "SOURCES;LIBS" ${ARGN})
  add_executable(${F_NAME} ${F_SOURCES})
  kvt_target_defaults(${F_NAME})
  target_compile_options(${F_NAME} PRIVATE -fsanitize=fuzzer-no-link)
  target_link_options(${F_NAME} PRIVATE -fsanitize=fuzzer)
  target_link_libraries(${F_NAME} PRIVATE ${F_LIBS})
  set(corpus ${PROJECT_SOURCE_DIR}/tests/fuzz/corpus/${F_NAME})
  add_test(NAME ${F_NAME}_corpus COMMAND ${F_NAME} -runs=0 ${corpus})
  set_tests_properties(${F_NAME}_corpus PROPERTIES LABELS fuzz TIMEOUT 300)
endfunction()

