// libFuzzer target: every kvtierd request handler (daemon/src/service*.cc), in process.
//
// One KvtierServer (host + disk tier in a temp dir, two tenants, shared memory on, small
// limits) is started once; each input is one call on it through a generic gRPC stub, so
// the request bytes reach the server unparsed (malformed protobuf included):
//
//   byte 0: method (mod 9: Lookup Put Get Evict List Stats Health ShmAttach ShmDetach)
//   byte 1: bits 0-1 credentials (none, tenant a, tenant b, a malformed header);
//           bit 2: in Put messages that start a record, fix its checksums
//           (docs/chunk-format.md) so mutated records get past VerifyChunk.
//   rest:   messages, each a u16 little-endian length then that many bytes.
//
// Properties: the server never crashes (ASan/UBSan report in its threads), every call
// ends before its deadline (a hang aborts), and the server still answers Health as
// serving afterwards.
#include <unistd.h>
#include <xxhash.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "daemon/config.h"
#include "daemon/server.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/kvtier.grpc.pb.h"

namespace {

namespace pb = ::kvtier::v1;

constexpr const char* kMethods[] = {
    "/kvtier.v1.KvTier/Lookup", "/kvtier.v1.KvTier/Put",       "/kvtier.v1.KvTier/Get",
    "/kvtier.v1.KvTier/Evict",  "/kvtier.v1.KvTier/List",      "/kvtier.v1.KvTier/Stats",
    "/kvtier.v1.KvTier/Health", "/kvtier.v1.KvTier/ShmAttach", "/kvtier.v1.KvTier/ShmDetach"};
constexpr int kNumMethods = 9;
constexpr auto kDeadline = std::chrono::seconds(20);

struct Fixture {
  std::string dir;
  std::unique_ptr<kvt::daemon::KvtierServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<grpc::GenericStub> stub;
};

Fixture* g = nullptr;

void RemoveDir() {
  if (g != nullptr) {
    std::error_code ec;
    std::filesystem::remove_all(g->dir, ec);
  }
}

void Start() {
  g = new Fixture;  // lives until exit: the server is never shut down mid-run
  char tmpl[] = "/tmp/kvt-fuzz-rpc-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) std::abort();
  g->dir = tmpl;
  std::atexit(RemoveDir);
  kvt::daemon::DaemonConfig c = kvt::daemon::DefaultDaemonConfig();
  c.listen = {"unix://" + g->dir + "/kvtierd.sock"};
  c.data_dir = g->dir + "/data";
  c.host.capacity_bytes = 8ull << 20;
  c.disk.capacity_bytes = 32ull << 20;
  c.disk.file_bytes = 8ull << 20;
  c.disk.direct_io = false;
  c.durability = kvt::daemon::Durability::kAsync;
  c.workers = 2;
  c.max_record_bytes = 4ull << 20;
  c.max_inflight_bytes = 16ull << 20;
  c.shm_max_region_bytes = 4ull << 20;
  c.shm_max_regions = 4;
  c.shm_stall_timeout_ms = 20;
  c.shm_first_region_id =
      1;  // the seeds name region 1  // a fuzzed progressive Put nobody writes fails fast
  c.metrics_listen = "";
  c.log_level = "off";
  c.tenants = {{"a", {"tenant-a-token"}}, {"b", {"tenant-b-token"}}};
  auto server = kvt::daemon::KvtierServer::Start(c);
  if (!server.ok()) {
    std::fprintf(stderr, "fuzz_daemon_rpc: %s\n", server.status().ToString().c_str());
    std::abort();
  }
  g->server = *std::move(server);
  g->channel = grpc::CreateChannel(c.listen[0], grpc::InsecureChannelCredentials());
  g->stub = std::make_unique<grpc::GenericStub>(g->channel);
}

// Rewrites the payload and header checksums of a record at the start of `data`.
void FixRecord(std::string* data) {
  if (data->size() < 128) return;
  char* b = data->data();
  uint64_t payload_bytes;
  std::memcpy(&payload_bytes, b + 80, 8);
  const uint64_t n = std::min<uint64_t>(payload_bytes, data->size() - 128);
  const uint64_t pcsum = XXH3_64bits(b + 128, n);
  std::memcpy(b + 88, &pcsum, 8);
  const uint64_t hcsum = XXH3_64bits(b, 120);
  std::memcpy(b + 120, &hcsum, 8);
}

grpc::ByteBuffer ToBuffer(const std::string& s) {
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}

bool Next(grpc::CompletionQueue* cq, void* want) {
  void* tag = nullptr;
  bool ok = false;
  const auto deadline = std::chrono::system_clock::now() + kDeadline + std::chrono::seconds(5);
  if (cq->AsyncNext(&tag, &ok, deadline) != grpc::CompletionQueue::NextStatus::GOT_EVENT) {
    std::fprintf(stderr, "fuzz_daemon_rpc: call did not complete: the daemon hangs\n");
    std::abort();
  }
  if (tag != want) std::abort();
  return ok;
}

// One generic streaming call: write every message, half-close, read every reply.
grpc::Status Call(int method, uint8_t flags, const std::vector<std::string>& messages) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kDeadline);
  switch (flags & 3) {
    case 1:
      ctx.AddMetadata("authorization", "Bearer tenant-a-token");
      break;
    case 2:
      ctx.AddMetadata("authorization", "Bearer tenant-b-token");
      break;
    case 3:
      ctx.AddMetadata("authorization", "tenant-a-token");
      break;
    default:
      break;
  }
  grpc::CompletionQueue cq;
  auto call = g->stub->PrepareCall(&ctx, kMethods[method], &cq);
  int tag = 0;
  call->StartCall(&tag);
  bool ok = Next(&cq, &tag);
  for (const std::string& m : messages) {
    if (!ok) break;
    call->Write(ToBuffer(m), &tag);
    ok = Next(&cq, &tag);
  }
  if (ok) {
    call->WritesDone(&tag);
    ok = Next(&cq, &tag);
  }
  for (int reads = 0; reads < 100000; ++reads) {
    grpc::ByteBuffer reply;
    call->Read(&reply, &tag);
    if (!Next(&cq, &tag)) break;
  }
  grpc::Status status;
  call->Finish(&status, &tag);
  Next(&cq, &tag);
  cq.Shutdown();
  void* t;
  bool o;
  while (cq.Next(&t, &o)) {
  }
  return status;
}

void CheckHealthy() {
  pb::HealthRequest req;
  req.set_protocol_version(1);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kDeadline);
  ctx.AddMetadata("authorization", "Bearer tenant-a-token");
  pb::HealthResponse resp;
  auto stub = pb::KvTier::NewStub(g->channel);
  grpc::Status s = stub->Health(&ctx, req, &resp);
  if (!s.ok() || !resp.serving()) {
    std::fprintf(stderr, "fuzz_daemon_rpc: daemon unhealthy after the call: %s %s\n",
                 s.error_message().c_str(), resp.detail().c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (g == nullptr) Start();
  if (size < 2) return 0;
  const int method = data[0] % kNumMethods;
  const uint8_t flags = data[1];
  std::vector<std::string> messages;
  size_t at = 2;
  while (at + 2 <= size && messages.size() < 64) {
    const size_t len = std::min<size_t>(data[at] | (size_t{data[at + 1]} << 8), size - at - 2);
    messages.emplace_back(reinterpret_cast<const char*>(data + at + 2), len);
    at += 2 + len;
  }
  if (messages.empty()) messages.emplace_back();
  if (method == 1 && (flags & 4)) {
    for (std::string& m : messages) {
      pb::PutRequest req;
      if (!req.ParseFromString(m) || req.record_bytes() == 0) continue;
      std::string d = req.data();
      FixRecord(&d);
      req.set_data(d);
      m = req.SerializeAsString();
    }
  }
  (void)Call(method, flags, messages);
  CheckHealthy();
  return 0;
}
