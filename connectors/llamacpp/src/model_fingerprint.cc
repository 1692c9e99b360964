// XXH3-128 fingerprint of a model file (see LlamaEngine::model_fingerprint).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gguf.h"
#include "llamacpp/llama_engine.h"
#include "xxhash.h"

namespace kvt::llamacpp {
namespace {
struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
struct StateFree {
  void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
};
constexpr uint64_t kWholeFileLimit = 4ull << 30;
constexpr uint64_t kSampleBytes = 1ull << 20;
constexpr int kSamples = 256;
}  // namespace

absl::StatusOr<std::string> FingerprintModelFile(const std::string& path) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrFormat("model file '%s': %s", path, ec.message()));
  std::unique_ptr<FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) return absl::NotFoundError(absl::StrFormat("cannot open model file '%s'", path));
  std::unique_ptr<XXH3_state_t, StateFree> st(XXH3_createState());
  XXH3_128bits_reset(st.get());
  XXH3_128bits_update(st.get(), &size, sizeof(size));
  std::vector<char> buf(8u << 20);
  auto hash_range = [&](uint64_t offset, uint64_t len) -> absl::Status {
    if (std::fseek(f.get(), static_cast<long>(offset), SEEK_SET) != 0) {
      return absl::InternalError(absl::StrFormat("seek in '%s' failed", path));
    }
    while (len > 0) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(len, buf.size()));
      const size_t got = std::fread(buf.data(), 1, want, f.get());
      if (got != want) return absl::InternalError(absl::StrFormat("short read of '%s'", path));
      XXH3_128bits_update(st.get(), buf.data(), got);
      len -= got;
    }
    return absl::OkStatus();
  };
  if (size <= kWholeFileLimit) {
    if (absl::Status s = hash_range(0, size); !s.ok()) return s;
  } else {
    // Large files: the GGUF metadata (every key and tensor descriptor) plus samples.
    gguf_init_params params = {/*no_alloc=*/true, /*ctx=*/nullptr};
    gguf_context* g = gguf_init_from_file(path.c_str(), params);
    const uint64_t meta = g ? gguf_get_data_offset(g) : std::min<uint64_t>(size, 64ull << 20);
    if (g) gguf_free(g);
    if (absl::Status s = hash_range(0, std::min(meta, size)); !s.ok()) return s;
    for (int i = 0; i < kSamples; ++i) {
      const uint64_t off = (size - kSampleBytes) / (kSamples - 1) * i;
      if (absl::Status s = hash_range(off, kSampleBytes); !s.ok()) return s;
    }
  }
  const XXH128_hash_t h = XXH3_128bits_digest(st.get());
  return absl::StrFormat("%016x%016x", h.high64, h.low64);
}

}  // namespace kvt::llamacpp
