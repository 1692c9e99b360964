// libFuzzer target: the kvtier CLI's GGUF metadata reader (daemon/cli/gguf_shape.cc), the
// one path that reads a model file the user names (`plan --gguf`, and `--tokenizer`, which
// is checked here before llama.cpp is handed the file).
//
// Input: file bytes. CheckGgufBytes must return a status for any bytes, never read past
// them, and never allocate what a declared length claims without reading it.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "gguf_shape.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)kvt::cli::CheckGgufBytes(std::string_view(reinterpret_cast<const char*>(data), size),
                                 "fuzz.gguf");
  return 0;
}
