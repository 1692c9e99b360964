// kvtier-demo support code (see demo_support.h).
#include "demo_support.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "connectors/kv_connector.h"
#include "kvstore/disk_tier.h"
#include "kvstore/host_tier.h"
#include "kvstore/store_factory.h"
#include "kvstore/tiered_store.h"
#include "kvtierd_process.h"
#include "llamacpp/gguf_generator.h"
#include "llamacpp/kv_adapter.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"
#include "workload.h"
#ifdef KVT_DEMO_HAVE_REMOTE
#include "kvstore/remote_tier.h"
#endif

namespace kvt::llamacpp::demo {

double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Single-thread memcpy bandwidth (bytes/s), best of 5 copies of 256 MiB.
double MeasureMemcpyBandwidth() {
  const size_t n = 256u << 20;
  std::vector<char> a(n, 1), b(n, 2);
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), n);
    const double s = Seconds(t0);
    best = std::max(best, static_cast<double>(n) / s);
    a[static_cast<size_t>(i)] = b[static_cast<size_t>(n - 1 - i)];
  }
  return best;
}

PrefillProgress MakeProgress(const std::string& label, uint64_t min_tokens) {
  if (!isatty(2)) return nullptr;
  return [label, min_tokens](uint64_t done, uint64_t total) {
    if (total < min_tokens) return;
    std::fprintf(stderr, "\r  %-24s prefill %5llu / %llu tokens", label.c_str(),
                 static_cast<unsigned long long>(done), static_cast<unsigned long long>(total));
    if (done == total) std::fprintf(stderr, "\r%70s\r", "");
  };
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return !a.empty() && a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

absl::Status WriteFloats(const std::string& path, const std::vector<float>& v) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(v.data()),
          static_cast<std::streamsize>(v.size() * sizeof(float)));
  return f.good() ? absl::OkStatus() : absl::InternalError("cannot write " + path);
}
std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), {});
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

absl::StatusOr<std::string> EnsureModel(const Flags& flags) {
  if (!flags.model.empty()) return flags.model;
  const std::string size = flags.small ? "tiny" : "demo";
  const std::string path = absl::StrFormat("%s/models/kvtier-%s.gguf", flags.dir, size);
  if (std::filesystem::exists(path)) return path;
  absl::StatusOr<SyntheticModelSpec> spec = SyntheticModelPreset(size, DefaultVocabPath());
  if (!spec.ok()) return spec.status();
  std::fprintf(stderr,
               "kvtier-demo: generating the %s model (%s, seeded random weights) at %s ...\n",
               size.c_str(), spec->name.c_str(), path.c_str());
  const auto t0 = Clock::now();
  if (absl::Status s = WriteSyntheticModel(*spec, path); !s.ok()) return s;
  std::fprintf(stderr, "kvtier-demo: model written in %.1f s\n", Seconds(t0));
  return path;
}

EngineOptions MakeEngineOptions(const Flags& flags, const std::string& model) {
  EngineOptions o;
  o.model_path = model;
  o.n_ctx = 8192;
  o.n_batch = flags.chunk_tokens;  // batches = chunks: see docs/llamacpp.md (flash attention)
  o.n_threads = flags.threads;
  o.flash_attn = flags.flash_attn;
  return o;
}

DiskTierOptions DemoDiskTierOptions(const Flags& flags) {
  DiskTierOptions d;
  d.dir = flags.dir + "/cache/disk";
  d.capacity_bytes = 8ull << 30;
  d.file_bytes = 256ull << 20;
  return d;
}

absl::StatusOr<std::shared_ptr<TieredStore>> OpenStore(const Flags& flags, bool host) {
  StoreOptions so;
  so.host.capacity_bytes = host ? 2ull << 30 : 0;
  so.disk = DemoDiskTierOptions(flags);
  auto store = OpenTieredStore(so);
  if (!store.ok()) return store.status();
  return std::shared_ptr<TieredStore>(std::move(*store));
}

absl::StatusOr<std::shared_ptr<KVConnector>> OpenConnector(const LlamaEngine& engine,
                                                           const Flags& flags,
                                                           std::shared_ptr<TieredStore> store) {
  ConnectorOptions o;
  o.ns = engine.MakeNamespaceParams(flags.chunk_tokens);
  auto c = KVConnector::Create(o, std::move(store));
  if (!c.ok()) return c.status();
  return std::shared_ptr<KVConnector>(std::move(*c));
}

std::string RunDir(const Flags& flags) { return flags.dir + "/run"; }

#ifdef KVT_DEMO_HAVE_REMOTE
RemoteTierOptions DemoRemoteTierOptions(const std::string& target) {
  RemoteTierOptions o;
  o.client.target = target;
  o.client.deadline = std::chrono::milliseconds(30000);  // a loaded machine, records of MiBs
  return o;
}

// A store whose only tier is kvtierd's remote tier; the channel is connected (Health)
// before it is returned so the first request's TTFT does not include the connect.
absl::StatusOr<std::shared_ptr<TieredStore>> OpenRemoteStore(const std::string& target) {
  auto remote = RemoteTier::Create(DemoRemoteTierOptions(target));
  if (!remote.ok()) return remote.status();
  if (auto h = (*remote)->client().Health(); !h.ok()) return h.status();
  StoreOptions so;
  so.host.capacity_bytes = 0;
  so.lower.push_back(UseTier(std::move(*remote)));
  auto store = OpenTieredStore(so);
  if (!store.ok()) return store.status();
  return std::shared_ptr<TieredStore>(std::move(*store));
}
#endif

}  // namespace kvt::llamacpp::demo
