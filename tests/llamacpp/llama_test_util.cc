#include "llama_test_util.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#ifdef KVT_LLAMACPP_HAVE_CONNECTOR
#include "kvstore/disk_tier.h"
#include "kvstore/host_tier.h"
#include "kvstore/store_factory.h"
#endif
#include "llamacpp/gguf_generator.h"

namespace kvt::llamacpp::testing {

namespace {
// Removes every directory MakeTempDir made when the test process exits normally (models,
// disk tiers, server logs: hundreds of MB a run), unless KVT_KEEP_TEST_DIRS is set.
class TempDirRegistry {
 public:
  void Add(const std::filesystem::path& dir) {
    std::lock_guard<std::mutex> lock(mu_);
    dirs_.push_back(dir);
  }
  ~TempDirRegistry() {
    if (std::getenv("KVT_KEEP_TEST_DIRS") != nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& dir : dirs_) {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  }

 private:
  std::mutex mu_;
  std::vector<std::filesystem::path> dirs_;
};

TempDirRegistry& Registry() {
  static TempDirRegistry registry;
  return registry;
}
}  // namespace

std::string MakeTempDir(const std::string& tag) {
  static std::atomic<int> counter{0};
  TempDirRegistry& registry = Registry();  // constructed first, so destroyed after users
  const char* base = std::getenv("TEST_TMPDIR");
  std::filesystem::path root = base != nullptr ? base : std::filesystem::temp_directory_path();
  std::filesystem::path dir =
      root / absl::StrCat("kvt-llama-", tag, "-", getpid(), "-", counter.fetch_add(1));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  registry.Add(dir);
  return dir.string();
}

std::string TinyModelPath(uint64_t seed) {
  static std::mutex mu;
  static std::map<uint64_t, std::string> paths;
  std::lock_guard<std::mutex> lock(mu);
  auto it = paths.find(seed);
  if (it != paths.end()) return it->second;
  const std::string dir = MakeTempDir("model");
  const std::string path = absl::StrCat(dir, "/tiny-", seed, ".gguf");
  auto spec = SyntheticModelPreset("tiny", DefaultVocabPath());
  if (!spec.ok()) std::abort();
  spec->seed = seed;
  if (absl::Status s = WriteSyntheticModel(*spec, path); !s.ok()) {
    std::fprintf(stderr, "cannot write tiny model: %s\n", s.ToString().c_str());
    std::abort();
  }
  paths[seed] = path;
  return path;
}

EngineOptions TinyEngineOptions(bool flash_attn, const std::string& model_path) {
  EngineOptions o;
  o.model_path = model_path;
  o.n_ctx = 2048;
  o.n_batch = kTestChunkTokens;  // batches = chunks (needed for bit-identity with flash attention)
  o.n_threads = kTestThreads;
  o.flash_attn = flash_attn;
  return o;
}

#ifdef KVT_LLAMACPP_HAVE_CONNECTOR
absl::StatusOr<std::shared_ptr<TieredStore>> MakeStore(const std::string& disk_dir,
                                                       bool with_host) {
  StoreOptions so;
  so.host.capacity_bytes = with_host ? 64ull << 20 : 0;
  if (!disk_dir.empty()) {
    DiskTierOptions& disk = so.disk.emplace();
    disk.dir = disk_dir;
    disk.capacity_bytes = 256ull << 20;
    disk.file_bytes = 64ull << 20;
  }
  auto store = OpenTieredStore(so);
  if (!store.ok()) return store.status();
  return std::shared_ptr<TieredStore>(std::move(*store));
}

absl::StatusOr<std::shared_ptr<KVConnector>> MakeConnector(const LlamaEngine& engine,
                                                           std::shared_ptr<TieredStore> store,
                                                           uint32_t chunk_tokens) {
  ConnectorOptions o;
  o.ns = engine.MakeNamespaceParams(chunk_tokens);
  o.use_cost_model = false;
  o.async_store = true;
  auto c = KVConnector::Create(o, std::move(store));
  if (!c.ok()) return c.status();
  return std::shared_ptr<KVConnector>(std::move(*c));
}

#endif

std::vector<TokenId> RandomTokens(uint64_t seed, size_t n, int32_t n_vocab) {
  std::mt19937_64 rng(seed);
  std::vector<TokenId> t(n);
  for (auto& x : t) x = static_cast<TokenId>(3 + rng() % static_cast<uint64_t>(n_vocab - 3));
  return t;
}

}  // namespace kvt::llamacpp::testing
