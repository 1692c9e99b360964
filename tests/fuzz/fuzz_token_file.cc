// libFuzzer target: the kvtier CLI's token-id files (daemon/cli/prompt_file.cc).
//
// Input: file text. ParseTokenIds must return a status for any text; on success every
// id is in [0, 2^31), the list is not empty, and printing the ids back (space-separated,
// and as a JSON array) parses to the same list.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "prompt_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto ids = kvt::cli::ParseTokenIds(text, "fuzz.txt");
  if (!ids.ok()) return 0;
  if (ids->empty()) std::abort();
  std::string plain, json = "[";
  for (size_t i = 0; i < ids->size(); ++i) {
    const int64_t id = static_cast<int64_t>((*ids)[i]);
    if (id < 0 || id >= (int64_t{1} << 31)) std::abort();
    plain += std::to_string(id) + (i % 7 == 6 ? "\n" : " ");
    json += (i ? "," : "") + std::to_string(id);
  }
  json += "]";
  auto again = kvt::cli::ParseTokenIds(plain, "plain");
  auto again_json = kvt::cli::ParseTokenIds(json, "json");
  if (!again.ok() || *again != *ids || !again_json.ok() || *again_json != *ids) std::abort();
  return 0;
}
