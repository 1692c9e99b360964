// Support code of kvtier-demo (the llama.cpp adapter demo): its flags, the model, the
// engine options, and the stores each phase opens. Split from kvtier_demo.cc by concept.
#ifndef KVT_LLAMACPP_DEMO_DEMO_SUPPORT_H_
#define KVT_LLAMACPP_DEMO_DEMO_SUPPORT_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "connectors/kv_connector.h"
#include "kvstore/disk_tier.h"
#include "kvstore/tiered_store.h"
#include "llamacpp/kv_adapter.h"
#include "llamacpp/llama_engine.h"
#ifdef KVT_DEMO_HAVE_REMOTE
#include "kvstore/remote_tier.h"
#endif

namespace kvt::llamacpp::demo {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string model;
  bool small = false;
  int threads = 2;
  std::string dir = ".kvtier-demo";
  std::string data_dir;  // "" = ResolveDataDir's search
  bool json_out = false;
  bool flash_attn = false;
  uint32_t chunk_tokens = 256;
#ifdef KVT_DEMO_KVTIERD
  std::string kvtierd = KVT_DEMO_KVTIERD;
#else
  std::string kvtierd;
#endif
  std::string fresh_phase;  // internal: plan file of a fresh-process phase (disk or kvtierd)
};

// Seconds since t0.
double Seconds(Clock::time_point t0);
// One-thread memcpy bandwidth of this machine now, bytes/s.
double MeasureMemcpyBandwidth();
PrefillProgress MakeProgress(const std::string& label, uint64_t min_tokens);
bool SameBits(const std::vector<float>& a, const std::vector<float>& b);
absl::Status WriteFloats(const std::string& path, const std::vector<float>& v);
std::vector<float> ReadFloats(const std::string& path);
// The demo model (generated on first run unless --model is given).
absl::StatusOr<std::string> EnsureModel(const Flags& flags);
EngineOptions MakeEngineOptions(const Flags& flags, const std::string& model);
DiskTierOptions DemoDiskTierOptions(const Flags& flags);
// Host (when `host`) over the demo's disk tier.
absl::StatusOr<std::shared_ptr<TieredStore>> OpenStore(const Flags& flags, bool host);
absl::StatusOr<std::shared_ptr<KVConnector>> OpenConnector(const LlamaEngine& engine,
                                                           const Flags& flags,
                                                           std::shared_ptr<TieredStore> store);
std::string RunDir(const Flags& flags);
// A fresh-process phase (flags.fresh_phase names its plan): loads from one tier alone
// and checks the logits against the parent's recompute logits. Returns the exit code.
int FreshPhase(const Flags& flags);
#ifdef KVT_DEMO_HAVE_REMOTE
RemoteTierOptions DemoRemoteTierOptions(const std::string& target);
// A store whose only tier is kvtierd's remote tier, connected (Health) before it returns.
absl::StatusOr<std::shared_ptr<TieredStore>> OpenRemoteStore(const std::string& target);
#endif

}  // namespace kvt::llamacpp::demo

#endif  // KVT_LLAMACPP_DEMO_DEMO_SUPPORT_H_
