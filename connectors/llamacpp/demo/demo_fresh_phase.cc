// kvtier-demo's fresh-process phase (see demo_support.h).
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
#include "demo_support.h"
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
#ifdef KVT_DEMO_HAVE_REMOTE
#endif
#include "workload.h"

namespace kvt::llamacpp::demo {

using json = nlohmann::json;

// A fresh-process phase (plan["tier"] = "disk" or "kvtierd"): loads, from that tier
// alone, the same prefix lengths the host phase loaded, and checks the logits against
// the parent's recompute logits.
int FreshPhase(const Flags& flags) {
  std::ifstream in(flags.fresh_phase);
  const json plan = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (plan.is_discarded() || !plan.contains("tier") || !plan.contains("model") ||
      !plan.contains("caps") || !plan.contains("out")) {
    std::fprintf(stderr, "kvtier-demo: bad plan file %s\n", flags.fresh_phase.c_str());
    return 2;
  }
  const std::string tier = plan["tier"].get<std::string>();
  auto engine = LlamaEngine::Create(MakeEngineOptions(flags, plan["model"].get<std::string>()));
  if (!engine.ok()) {
    std::fprintf(stderr, "kvtier-demo: %s\n", engine.status().ToString().c_str());
    return 1;
  }
  WorkloadOptions wo;
  wo.data_dir = flags.data_dir;
  auto requests = BuildWorkloads(**engine, wo);
  if (!requests.ok()) {
    std::fprintf(stderr, "kvtier-demo: %s\n", requests.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<std::shared_ptr<TieredStore>> store =
      absl::InvalidArgumentError("plan tier '" + tier + "'");
  if (tier == "disk") {
    store = OpenStore(flags, /*host=*/false);
#ifdef KVT_DEMO_HAVE_REMOTE
  } else if (tier == "kvtierd") {
    store = OpenRemoteStore(plan["target"].get<std::string>());
#endif
  }
  if (!store.ok()) {
    std::fprintf(stderr, "kvtier-demo: %s\n", store.status().ToString().c_str());
    return 1;
  }
  auto connector = OpenConnector(**engine, flags, *store);
  if (!connector.ok()) {
    std::fprintf(stderr, "kvtier-demo: %s\n", connector.status().ToString().c_str());
    return 1;
  }
  auto adapter = LlamaKvAdapter::Create(engine->get(), *connector);
  if (!adapter.ok()) return 1;
  json results = json::array();
  for (size_t i = 0; i < requests->size(); ++i) {
    const Request& rq = (*requests)[i];
    RunOptions o;
    o.store = false;
    o.max_load_tokens = plan["caps"][i].get<uint64_t>();
    o.progress = MakeProgress(absl::StrFormat("%s %s #%d", tier, rq.workload, rq.index), 1024);
    auto r = (*adapter)->Run(rq.tokens, o);
    if (!r.ok()) {
      std::fprintf(stderr, "kvtier-demo: %s\n", r.status().ToString().c_str());
      return 1;
    }
    const std::vector<float> ref = ReadFloats(absl::StrFormat("%s/ref-%d.bin", RunDir(flags), i));
    results.push_back({{"ttft_s", r->ttft_s},
                       {"loaded", r->loaded_tokens},
                       {"identical", SameBits(r->logits, ref)}});
  }
  std::ofstream out(plan["out"].get<std::string>());
  out << results.dump();
  return out.good() ? 0 : 1;
}

}  // namespace kvt::llamacpp::demo
