# How kvtier obtains llama.cpp (issue 4).
#
# llama.cpp comes from a registry package with a pinned version: the PyPI sdist of
# llama-cpp-python carries the whole llama.cpp source under vendor/llama.cpp. We
# download that sdist once (hash-checked) into the build directory and build its
# llama.cpp as part of this CMake build: static libraries, CPU only, no curl, no
# tools/tests/examples. Nothing Python runs at build or test time.
#
#   llama-cpp-python 0.3.36  ->  llama.cpp commit 0c1e57098 (ggml 0.25.3)
#   (from the sdist's CHANGELOG.md: "update llama.cpp to ggml-org/llama.cpp@0c1e57098")
#
# Offline / air-gapped builds: pass -DKVT_LLAMACPP_SDIST=/path/to/llama_cpp_python-0.3.36.tar.gz
# (e.g. fetched with `pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36`).
# The hash is checked either way. A configured build directory keeps the download under
# <build>/_deps/, so re-configuring never downloads again.
#
# CPU code paths: GGML_NATIVE is OFF and AVX/AVX2/FMA/F16C/BMI2 are enabled explicitly
# (x86-64-v3); AMX and AVX-512 stay off, so the binary runs on any AVX2 machine and never
# reaches ggml's AMX code (which crashed with SIGILL on some of this project's CPUs; see
# docs/llamacpp.md). -DKVT_LLAMACPP_NATIVE=ON builds for the host CPU instead.
#
# Provides: targets `llama` and `ggml` (static), and the variables
#   KVT_LLAMACPP_VERSION      "0.3.36"      (llama-cpp-python package version)
#   KVT_LLAMACPP_COMMIT       "0c1e57098"   (llama.cpp commit it carries)
#   KVT_LLAMACPP_SOURCE_DIR   path of the llama.cpp source tree (models/ggml-vocab-*.gguf live there)

include_guard(GLOBAL)
include(FetchContent)

set(KVT_LLAMACPP_VERSION "0.3.36")
set(KVT_LLAMACPP_COMMIT "0c1e57098")
set(KVT_LLAMACPP_SHA256 "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e")
set(KVT_LLAMACPP_SDIST "" CACHE FILEPATH
    "Local llama_cpp_python-${KVT_LLAMACPP_VERSION}.tar.gz (sdist) to use instead of downloading it")
option(KVT_LLAMACPP_NATIVE "Build llama.cpp for the host CPU (-march=native) instead of x86-64-v3" OFF)

if(KVT_LLAMACPP_SDIST)
  set(_kvt_llama_url "${KVT_LLAMACPP_SDIST}")
else()
  # Fetched with pip, the registry's own client, once per build directory.
  set(_kvt_sdist_dir "${CMAKE_BINARY_DIR}/_deps/llamacpp-sdist")
  set(_kvt_llama_url "${_kvt_sdist_dir}/llama_cpp_python-${KVT_LLAMACPP_VERSION}.tar.gz")
  if(NOT EXISTS "${_kvt_llama_url}")
    find_package(Python3 COMPONENTS Interpreter REQUIRED)
    message(STATUS "kvtier: fetching llama-cpp-python==${KVT_LLAMACPP_VERSION} sdist with pip")
    execute_process(
      COMMAND "${Python3_EXECUTABLE}" -m pip download --quiet --no-deps --no-binary :all:
              "llama-cpp-python==${KVT_LLAMACPP_VERSION}" -d "${_kvt_sdist_dir}"
      RESULT_VARIABLE _kvt_pip_rc)
    if(NOT _kvt_pip_rc EQUAL 0 OR NOT EXISTS "${_kvt_llama_url}")
      message(FATAL_ERROR "kvtier: 'pip download llama-cpp-python==${KVT_LLAMACPP_VERSION}' failed "
                          "(rc ${_kvt_pip_rc}); pass -DKVT_LLAMACPP_SDIST=/path/to/the/sdist "
                          "or -DKVT_BUILD_LLAMACPP=OFF")
    endif()
  endif()
endif()

# The one patch to llama.cpp's own files (tools/server: the kvtier hooks at prompt_save,
# after a prompt is processed and before n_past is computed; the logic lives in
# connectors/llamacpp/server/). Applied at configure time with GNU patch; the applied copy
# is kept beside the source so a changed patch is reversed and re-applied. If the patch no
# longer applies (a different llama.cpp), configuring fails and says so.
set(KVT_LLAMACPP_SERVER_PATCH "${PROJECT_SOURCE_DIR}/connectors/llamacpp/server/llama-server.patch")
function(kvt_llamacpp_apply_patch src)
  set(applied "${src}/.kvtier-applied.patch")
  file(READ "${KVT_LLAMACPP_SERVER_PATCH}" want)
  if(want STREQUAL "")
    return()
  endif()
  if(EXISTS "${applied}")
    file(READ "${applied}" have)
    if(have STREQUAL want)
      return()
    endif()
    execute_process(COMMAND patch -p1 -R --batch --silent -i "${applied}"
                    WORKING_DIRECTORY "${src}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "kvtier: could not reverse the previously applied ${applied} in ${src}:\n${out}"
                          "Delete the build directory's _deps/llamacpp_py-* and configure again.")
    endif()
    file(REMOVE "${applied}")
  endif()
  execute_process(COMMAND patch -p1 --forward --batch --dry-run -i "${KVT_LLAMACPP_SERVER_PATCH}"
                  WORKING_DIRECTORY "${src}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "kvtier: ${KVT_LLAMACPP_SERVER_PATCH} no longer applies to llama.cpp "
                        "${KVT_LLAMACPP_COMMIT} in ${src} (patch rc ${rc}):\n${out}"
                        "Update the patch for this llama.cpp, or configure with -DKVT_BUILD_LLAMA_SERVER=OFF.")
  endif()
  execute_process(COMMAND patch -p1 --forward --batch --silent -i "${KVT_LLAMACPP_SERVER_PATCH}"
                  WORKING_DIRECTORY "${src}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "kvtier: applying ${KVT_LLAMACPP_SERVER_PATCH} failed:\n${out}")
  endif()
  file(WRITE "${applied}" "${want}")
  message(STATUS "kvtier: applied ${KVT_LLAMACPP_SERVER_PATCH}")
endfunction()

FetchContent_Declare(llamacpp_py
  URL "${_kvt_llama_url}"
  URL_HASH SHA256=${KVT_LLAMACPP_SHA256}
  DOWNLOAD_NO_PROGRESS TRUE
  SOURCE_SUBDIR vendor/llama.cpp)

# llama.cpp / ggml options (CMP0077: plain variables override their option()s).
set(BUILD_SHARED_LIBS OFF)
set(LLAMA_BUILD_TESTS OFF)
set(LLAMA_BUILD_EXAMPLES OFF)
set(LLAMA_BUILD_APP OFF)
# llama-server (kvtier-llama-server, docs/llama-server.md): common + tools/server, no web UI
# (its assets are fetched or built with npm; neither is reachable offline). The other tools
# are defined but left out of `all` (see below); only what the server links is built.
option(KVT_BUILD_LLAMA_SERVER "Build kvtier-llama-server (llama.cpp's llama-server with kvtier)" ON)
if(KVT_BUILD_LLAMA_SERVER)
  set(LLAMA_BUILD_COMMON ON)
  set(LLAMA_BUILD_TOOLS ON)
  set(LLAMA_BUILD_SERVER ON)
else()
  set(LLAMA_BUILD_COMMON OFF)
  set(LLAMA_BUILD_TOOLS OFF)
  set(LLAMA_BUILD_SERVER OFF)
endif()
set(LLAMA_BUILD_UI OFF)
set(LLAMA_USE_PREBUILT_UI OFF)
set(LLAMA_CURL OFF)
set(LLAMA_OPENSSL OFF)
set(LLAMA_ALL_WARNINGS OFF)
set(GGML_ALL_WARNINGS OFF)
set(GGML_BUILD_TESTS OFF)
set(GGML_BUILD_EXAMPLES OFF)
set(GGML_CCACHE OFF)
set(GGML_CUDA OFF)
set(GGML_METAL OFF)
set(GGML_VULKAN OFF)
set(GGML_BACKEND_DL OFF)
# ggml's own thread pool: no libgomp, and forked test helpers never inherit an OpenMP runtime.
set(GGML_OPENMP OFF)
if(KVT_LLAMACPP_NATIVE)
  set(GGML_NATIVE ON)
else()
  set(GGML_NATIVE OFF)
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64")
    set(GGML_AVX ON)
    set(GGML_AVX2 ON)
    set(GGML_FMA ON)
    set(GGML_F16C ON)
    set(GGML_BMI2 ON)
    set(GGML_AVX512 OFF)
    set(GGML_AMX_TILE OFF)
    set(GGML_AMX_INT8 OFF)
    set(GGML_AMX_BF16 OFF)
  endif()
endif()

# llama.cpp is C++17 code; kvtier's global C++20 setting must not leak into it.
set(_kvt_saved_cxx_std ${CMAKE_CXX_STANDARD})
set(CMAKE_CXX_STANDARD 17)
FetchContent_GetProperties(llamacpp_py)
if(NOT llamacpp_py_POPULATED)
  FetchContent_Populate(llamacpp_py)
endif()
set(KVT_LLAMACPP_SOURCE_DIR "${llamacpp_py_SOURCE_DIR}/vendor/llama.cpp")
if(KVT_BUILD_LLAMA_SERVER)
  kvt_llamacpp_apply_patch("${KVT_LLAMACPP_SOURCE_DIR}")
endif()
add_subdirectory("${KVT_LLAMACPP_SOURCE_DIR}" "${llamacpp_py_BINARY_DIR}")
set(CMAKE_CXX_STANDARD ${_kvt_saved_cxx_std})
if(KVT_BUILD_LLAMA_SERVER)
  # Only what kvtier-llama-server links is built: the other tools stay out of `all`.
  set_property(DIRECTORY "${KVT_LLAMACPP_SOURCE_DIR}/tools" PROPERTY EXCLUDE_FROM_ALL TRUE)
  if(NOT TARGET llama-server-impl OR NOT TARGET server-context)
    message(FATAL_ERROR "kvtier: llama.cpp's tools/server did not define llama-server-impl/server-context")
  endif()
endif()
if(NOT TARGET llama OR NOT TARGET ggml)
  message(FATAL_ERROR "kvtier: llama.cpp from ${_kvt_llama_url} did not define targets llama/ggml")
endif()
# The engine is built the way upstream ships it: -O3 (CMake's Release flags), whatever
# kvtier's own build type. Measured here (docs/llamacpp.md): -O2 (RelWithDebInfo) prefills
# ~2x slower than -O3 on the same CPU flags. Debug builds keep -O2 so engine tests stay usable.
if(CMAKE_BUILD_TYPE STREQUAL "Debug")
  set(_kvt_engine_opt -O2)
else()
  set(_kvt_engine_opt -O3)
endif()
foreach(t ggml-base ggml-cpu ggml llama llama-common mtmd server-context llama-server-impl)
  if(TARGET ${t})
    target_compile_options(${t} PRIVATE ${_kvt_engine_opt})
  endif()
endforeach()
message(STATUS "kvtier: llama.cpp ${KVT_LLAMACPP_COMMIT} from llama-cpp-python ${KVT_LLAMACPP_VERSION} "
               "(${KVT_LLAMACPP_SOURCE_DIR}); native=${KVT_LLAMACPP_NATIVE}")
