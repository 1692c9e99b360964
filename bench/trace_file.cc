#include "trace_file.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace kvt::bench {

namespace {
uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

ChunkKey TraceBlockKey(uint32_t id) { return ChunkKey{Mix(id), Mix(~uint64_t{id})}; }

absl::StatusOr<Trace> LoadTrace(const std::string& path, const std::string& name,
                                size_t max_requests) {
  if (!std::filesystem::exists(path)) {
    return absl::NotFoundError(absl::StrCat("trace file ", path, " does not exist"));
  }
  // gzopen reads plain files too.
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return absl::NotFoundError(absl::StrCat("cannot open trace ", path));
  gzbuffer(f, 1 << 20);
  Trace trace;
  trace.name = name;
  absl::flat_hash_map<int64_t, uint32_t> ids;
  std::string line;
  char buf[1 << 16];
  size_t line_no = 0;
  absl::Status status;
  auto parse = [&](const std::string& text) -> absl::Status {
    ++line_no;
    if (text.empty()) return absl::OkStatus();
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("hash_ids") ||
        !j["hash_ids"].is_array() || !j.contains("input_length")) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", line_no, ": expected an object with hash_ids (array) and input_length"));
    }
    TraceRequest r;
    r.timestamp_ms = j.value("timestamp", int64_t{0});
    r.input_tokens = j["input_length"].get<uint64_t>();
    for (const auto& h : j["hash_ids"]) {
      auto [it, inserted] = ids.try_emplace(h.get<int64_t>(), static_cast<uint32_t>(ids.size()));
      r.blocks.push_back(it->second);
    }
    trace.total_tokens += r.input_tokens;
    trace.total_blocks += r.blocks.size();
    trace.requests.push_back(std::move(r));
    return absl::OkStatus();
  };
  while (gzgets(f, buf, sizeof(buf)) != nullptr) {
    line += buf;
    if (line.back() != '\n') continue;  // a line longer than the buffer: read on
    line.pop_back();
    status = parse(line);
    line.clear();
    if (!status.ok()) break;
    if (max_requests > 0 && trace.requests.size() >= max_requests) break;
  }
  int err = 0;
  const char* msg = gzerror(f, &err);
  const bool bad = err != Z_OK && err != Z_STREAM_END;
  const std::string err_text = bad ? msg : "";
  gzclose(f);
  if (!status.ok()) return status;
  if (bad) return absl::DataLossError(absl::StrCat("trace ", path, ": ", err_text));
  if (!line.empty() && (max_requests == 0 || trace.requests.size() < max_requests)) {
    if (absl::Status s = parse(line); !s.ok()) return s;
  }
  trace.distinct_blocks = static_cast<uint32_t>(ids.size());
  return trace;
}

}  // namespace kvt::bench
