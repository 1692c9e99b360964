#include "pinned_lookup.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include "kvstore/chunk_chain.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/chunk_key.h"
#include "kvstore/remote_client.h"
#include "kvstore/remote_tier.h"
#include "kvstore/store_factory.h"
#include "kvstore/tiered_store.h"

namespace kvt::bench {
namespace {

double MedianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double MsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

PinnedLookupFigures MeasurePinnedLookup(const std::string& target, uint64_t prompt_tokens,
                                        uint32_t chunk_tokens, double prefill_tokens_per_s,
                                        int rounds) {
  PinnedLookupFigures f;
  f.cold_prefill_ms = 1000.0 * static_cast<double>(prompt_tokens) / prefill_tokens_per_s;
  // A one-layer, one-head layout: 256 bytes of payload per token.
  const KvLayout layout{1, 1, 64, DType::kF16, LayoutKind::kFlashAttnNHD};
  NamespaceParams p;
  p.model_id = "bench/pinned-lookup";
  p.layout = layout;
  p.chunk_tokens = chunk_tokens;
  ChunkChainEncoder chain(ComputeNamespace(p), layout);
  std::vector<std::byte> payload(layout.payload_bytes(chunk_tokens), std::byte{7});
  std::vector<std::vector<std::byte>> records;
  std::vector<ChunkKey> keys;
  for (uint64_t done = 0; done + chunk_tokens <= prompt_tokens; done += chunk_tokens) {
    std::vector<TokenId> tokens(chunk_tokens);
    for (uint32_t i = 0; i < chunk_tokens; ++i)
      tokens[i] = static_cast<TokenId>((done + i) % 32000);
    auto rec = chain.EncodeNext(tokens, payload);
    if (!rec.ok()) {
      f.error = "encode: " + rec.status().ToString();
      return f;
    }
    keys.push_back(DecodeChunkHeader(*rec)->key);
    records.push_back(std::move(*rec));
  }
  RemoteClientOptions co;
  co.target = target;
  co.deadline = std::chrono::seconds(30);
  auto client = RemoteClient::Create(co);
  if (!client.ok()) {
    f.error = "client: " + client.status().ToString();
    return f;
  }
  std::vector<std::span<const std::byte>> spans(records.begin(), records.end());
  if (absl::Status s = (*client)->Put(spans); !s.ok()) {
    f.error = "put: " + s.ToString();
    return f;
  }
  RemoteTierOptions ro;
  ro.client = co;
  auto tier = RemoteTier::Create(ro);
  if (!tier.ok()) {
    f.error = "remote tier: " + tier.status().ToString();
    return f;
  }
  RemoteTier* remote = tier->get();
  StoreOptions so;  // kvtierd's remote tier alone
  so.host.capacity_bytes = 0;
  so.lower.push_back(UseTier(std::move(*tier)));
  auto store = OpenTieredStore(so);
  if (!store.ok()) {
    f.error = "store: " + store.status().ToString();
    return f;
  }
  std::vector<double> ms, per_key_ms;
  for (int r = 0; r < rounds; ++r) {
    uint64_t before = remote->client().rpcs();
    auto t = std::chrono::steady_clock::now();
    LookupResult lr = (*store)->Lookup(keys, LookupOptions{.pin = true});
    ms.push_back(MsSince(t));
    f.rpcs = remote->client().rpcs() - before;
    f.chunks = lr.num_leading_hits;
    lr.lease.Release();
    if (lr.num_leading_hits != keys.size()) {
      f.error = "kvtierd held " + std::to_string(lr.num_leading_hits) + " of " +
                std::to_string(keys.size()) + " chunks";
      return f;
    }
    // The path before batched pins: one Stat RPC, then one pin RPC per key.
    before = remote->client().rpcs();
    t = std::chrono::steady_clock::now();
    (void)remote->Stat(keys);
    std::vector<PinHandle> pins;
    pins.reserve(keys.size());
    for (const ChunkKey& k : keys) pins.push_back(remote->Pin(k));
    per_key_ms.push_back(MsSince(t));
    f.per_key_rpcs = remote->client().rpcs() - before;
    pins.clear();
  }
  f.ms = MedianOf(ms);
  f.per_key_ms = MedianOf(per_key_ms);
  return f;
}

}  // namespace kvt::bench
