# Helper functions shared by every part of kvtier.

# Warnings and sanitizers for project targets only.
function(kvt_target_defaults target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror -Wno-missing-field-initializers>)
  if(KVT_THREAD_SAFETY)
    # Clang checks ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED (the thread-safety
    # preset, scripts/check-thread-safety.sh). -Werror above makes a finding fail the build.
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wthread-safety>)
  endif()
  if(KVT_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=${KVT_SANITIZE} -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=${KVT_SANITIZE})
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      # GCC 12's -Wmaybe-uninitialized misfires under -fsanitize at -O1 (std::function
      # inside std::optional<DiskTierOptions>, kvtier_c.cc); the release build keeps it.
      target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-maybe-uninitialized>)
    endif()
    get_target_property(type ${target} TYPE)
    if(KVT_SANITIZE MATCHES "thread" AND type STREQUAL "EXECUTABLE")
      kvt_tsan_absl_shim(${target})
    endif()
  endif()
endfunction()

# TSan only: interposes Debian's (uninstrumented) absl::Mutex so TSan sees its locking;
# see tests/sanitizers/tsan_absl_mutex.cc.
function(kvt_tsan_absl_shim target)
  target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/tests/sanitizers/tsan_absl_mutex.cc)
  target_link_libraries(${target} PRIVATE absl::synchronization ${CMAKE_DL_LIBS})
endfunction()

# kvt_add_test(NAME name SOURCES a.cc ... [LIBS ...] [LABELS ...] [TIMEOUT s])
# One GoogleTest executable registered as one ctest test (gtest runs its cases).
function(kvt_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  kvt_target_defaults(${T_NAME})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gmock GTest::gtest_main)
  # Shared test helpers (store_test_util.h, disk_test_util.h) for every suite.
  target_include_directories(${T_NAME} PRIVATE ${PROJECT_SOURCE_DIR}/tests/kvstore)
  add_test(NAME ${T_NAME} COMMAND ${T_NAME} --gtest_color=no)
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set(labels ${T_LABELS})
  if(NOT labels)
    set(labels unit)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${labels}" TIMEOUT ${T_TIMEOUT})
endfunction()
