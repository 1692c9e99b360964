// kvtier-cli-fill: test/demo helper that stores the full chunks of a token file (records
// built with kvt::ChunkChainEncoder, payload a deterministic pattern) into kvtierd or a disk
// tier directory, the way an engine's connector would. Used for docs/cli.md's sessions.
//   kvtier-cli-fill --daemon unix:///tmp/k.sock --token T --tokens p.txt --model m ...
//   kvtier-cli-fill --disk-dir /var/tmp/kv --tokens p.txt --model m ... [--chunks 3]
#include <iostream>

#include "CLI/CLI.hpp"
#include "cli_common.h"
#include "kvstore/chunk_chain.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/disk_tier.h"
#include "kvstore/remote_client.h"
#include "prompt_file.h"

int main(int argc, char** argv) {
  CLI::App app{"Store the chunks of a token file into kvtierd or a disk tier directory"};
  kvt::cli::NamespaceFlags ns;
  std::string daemon, token, disk_dir, tokens_file;
  size_t max_chunks = 0;
  app.add_option("--daemon", daemon, "kvtierd address");
  app.add_option("--token", token, "tenant token");
  app.add_option("--disk-dir", disk_dir, "disk tier directory (created if missing)");
  app.add_option("--tokens", tokens_file, "token id file")->required();
  app.add_option("--chunks", max_chunks, "store only the first N chunks (0 = all)");
  app.add_option("--model", ns.model_id)->required();
  app.add_option("--layers", ns.layers)->required();
  app.add_option("--kv-heads", ns.kv_heads)->required();
  app.add_option("--head-dim", ns.head_dim)->required();
  app.add_option("--dtype", ns.dtype);
  app.add_option("--layout", ns.layout);
  app.add_option("--chunk-tokens", ns.chunk_tokens);
  app.add_option("--tenant", ns.tenant);
  CLI11_PARSE(app, argc, argv);

  auto params = ns.Params();
  if (!params.ok()) {
    std::cerr << params.status() << "\n";
    return 2;
  }
  auto tokens = kvt::cli::ReadTokenFile(tokens_file);
  if (!tokens.ok()) {
    std::cerr << tokens.status() << "\n";
    return 2;
  }
  const kvt::NamespaceId id = kvt::ComputeNamespace(*params);
  kvt::ChunkKeyOptions ko;
  ko.chunk_tokens = params->chunk_tokens;
  std::vector<kvt::ChunkKey> keys = kvt::ComputeChunkKeys(id, *tokens, ko);
  if (max_chunks != 0 && keys.size() > max_chunks) keys.resize(max_chunks);

  std::unique_ptr<kvt::RemoteClient> client;
  std::unique_ptr<kvt::DiskTier> disk;
  if (!daemon.empty()) {
    kvt::RemoteClientOptions o;
    o.target = daemon;
    o.token = token;
    o.deadline = std::chrono::milliseconds(10000);
    auto c = kvt::RemoteClient::Create(o);
    if (!c.ok()) {
      std::cerr << c.status() << "\n";
      return 1;
    }
    client = std::move(*c);
  } else if (!disk_dir.empty()) {
    kvt::DiskTierOptions o;
    o.dir = disk_dir;
    o.capacity_bytes = 1ull << 30;
    o.file_bytes = 256ull << 20;
    auto d = kvt::DiskTier::Open(o);
    if (!d.ok()) {
      std::cerr << d.status() << "\n";
      return 1;
    }
    disk = std::move(*d);
  } else {
    std::cerr << "give --daemon or --disk-dir\n";
    return 2;
  }
  kvt::ChunkChainEncoder chain(id, params->layout);
  for (const kvt::ChunkKey& key : keys) {
    std::vector<std::byte> payload(params->layout.payload_bytes(params->chunk_tokens));
    for (size_t i = 0; i < payload.size(); ++i)
      payload[i] = static_cast<std::byte>((key.lo >> (i % 8 * 8)) + i);
    auto rec = chain.EncodeNext(key, params->chunk_tokens, payload);
    if (!rec.ok()) {
      std::cerr << rec.status() << "\n";
      return 1;
    }
    absl::Status s = client ? client->Put(*rec) : disk->Put(*rec);
    if (!s.ok()) {
      std::cerr << s << "\n";
      return 1;
    }
  }
  std::cout << "stored " << keys.size() << " chunks under namespace " << id.ToHex() << "\n";
  return 0;
}
