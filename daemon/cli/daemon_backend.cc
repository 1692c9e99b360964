#include "daemon_backend.h"

#include <chrono>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "proto/kvtier.grpc.pb.h"

namespace kvt::cli {

namespace {

namespace pb = ::kvtier::v1;
constexpr uint32_t kProtocolVersion = 1;
constexpr size_t kMaxKeysPerRequest = 4096;

void ToProto(const ChunkKey& k, pb::Key128* out) {
  out->set_lo(k.lo);
  out->set_hi(k.hi);
}
void ToProto(const NamespaceId& k, pb::Key128* out) {
  out->set_lo(k.lo);
  out->set_hi(k.hi);
}
template <typename H>
H FromProto(const pb::Key128& k) {
  return H{k.lo(), k.hi()};
}

std::optional<TierKind> TierFromProto(pb::TierKind t) {
  switch (t) {
    case pb::TIER_HOST: return TierKind::kHost;
    case pb::TIER_DISK: return TierKind::kDisk;
    case pb::TIER_REMOTE: return TierKind::kRemote;
    default: return std::nullopt;
  }
}

class DaemonBackend final : public CacheBackend {
 public:
  DaemonBackend(DaemonBackendOptions options, std::shared_ptr<grpc::Channel> channel)
      : options_(std::move(options)), channel_(std::move(channel)), stub_(pb::KvTier::NewStub(channel_)) {}

  std::string Describe() const override { return absl::StrCat("kvtierd ", options_.address); }

  // The one place grpc::Status becomes absl::Status.
  absl::Status Convert(const grpc::Status& s, const char* rpc) const {
    if (s.ok()) return absl::OkStatus();
    const std::string msg = absl::StrCat(rpc, " on kvtierd ", options_.address, ": ", s.error_message());
    switch (s.error_code()) {
      case grpc::StatusCode::UNAVAILABLE:
        return absl::UnavailableError(absl::StrCat("no kvtierd reachable at ", options_.address, " (", rpc,
                                                   ": ", s.error_message(), ")"));
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        return absl::DeadlineExceededError(
            absl::StrCat(rpc, ": kvtierd at ", options_.address, " did not answer within ",
                         options_.timeout_ms, " ms (--timeout)"));
      case grpc::StatusCode::UNAUTHENTICATED:
        return absl::UnauthenticatedError(absl::StrCat(
            msg, " (give the tenant's token with --token or KVTIER_TOKEN)"));
      case grpc::StatusCode::PERMISSION_DENIED: return absl::PermissionDeniedError(msg);
      case grpc::StatusCode::INVALID_ARGUMENT: return absl::InvalidArgumentError(msg);
      case grpc::StatusCode::NOT_FOUND: return absl::NotFoundError(msg);
      case grpc::StatusCode::FAILED_PRECONDITION: return absl::FailedPreconditionError(msg);
      case grpc::StatusCode::RESOURCE_EXHAUSTED: return absl::ResourceExhaustedError(msg);
      case grpc::StatusCode::OUT_OF_RANGE: return absl::OutOfRangeError(msg);
      case grpc::StatusCode::DATA_LOSS: return absl::DataLossError(msg);
      case grpc::StatusCode::UNIMPLEMENTED: return absl::UnimplementedError(msg);
      default: return absl::InternalError(msg);
    }
  }

  void Prepare(grpc::ClientContext* ctx) const {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(options_.timeout_ms));
    if (!options_.token.empty()) ctx->AddMetadata("authorization", absl::StrCat("Bearer ", options_.token));
  }

  absl::Status Health() {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    pb::HealthRequest req;
    req.set_protocol_version(kProtocolVersion);
    pb::HealthResponse resp;
    return Convert(stub_->Health(&ctx, req, &resp), "Health");
  }

  absl::StatusOr<StatsSnapshot> Stats() override {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    pb::StatsRequest req;
    req.set_protocol_version(kProtocolVersion);
    pb::StatsResponse resp;
    if (absl::Status s = Convert(stub_->Stats(&ctx, req, &resp), "Stats"); !s.ok()) return s;
    StatsSnapshot out;
    out.source = Describe();
    if (!resp.tenant().empty()) absl::StrAppend(&out.source, " (tenant ", resp.tenant(), ")");
    for (const auto& t : resp.tiers()) {
      TierSummary ts;
      ts.name = t.name();
      ts.kind = TierFromProto(t.kind()).value_or(TierKind::kRemote);
      ts.stats.capacity_bytes = t.capacity_bytes();
      ts.stats.used_bytes = t.used_bytes();
      ts.stats.chunks = t.chunks();
      ts.stats.hits = t.hits();
      ts.stats.misses = t.misses();
      ts.stats.evictions = t.evictions();
      ts.stats.integrity_errors = t.integrity_errors();
      ts.stats.pinned_bytes = t.pinned_bytes();
      ts.stats.bytes_in = t.bytes_in();
      ts.stats.bytes_out = t.bytes_out();
      ts.stats.puts = t.puts();
      out.pinned_bytes += t.pinned_bytes();
      out.tiers.push_back(std::move(ts));
    }
    out.store_hits = resp.hits();
    out.store_misses = resp.misses();
    out.integrity_errors = resp.integrity_errors();
    return out;
  }

  absl::StatusOr<ChunkListPage> List(const ChunkListRequest& request) override {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    pb::ListRequest req;
    req.set_protocol_version(kProtocolVersion);
    if (request.ns) ToProto(*request.ns, req.mutable_ns());
    req.set_page_token(request.page_token);
    req.set_page_size(static_cast<uint32_t>(std::min<size_t>(request.page_size, 10000)));
    pb::ListResponse resp;
    if (absl::Status s = Convert(stub_->List(&ctx, req, &resp), "List"); !s.ok()) return s;
    ChunkListPage out;
    out.next_page_token = resp.next_page_token();
    for (const auto& c : resp.chunks()) {
      ListedChunk lc;
      lc.info.key = FromProto<ChunkKey>(c.key());
      lc.info.ns = FromProto<NamespaceId>(c.ns());
      lc.info.parent = FromProto<ChunkKey>(c.parent());
      lc.info.token_count = c.token_count();
      lc.info.record_bytes = c.bytes();
      lc.info.last_access_unix_ms = c.last_access_unix_ms();
      lc.tier = TierFromProto(c.tier()).value_or(TierKind::kRemote);
      out.chunks.push_back(lc);
    }
    return out;
  }

  absl::StatusOr<std::vector<std::optional<TierKind>>> Locate(std::span<const ChunkKey> keys) override {
    std::vector<std::optional<TierKind>> out;
    out.reserve(keys.size());
    for (size_t at = 0; at < keys.size(); at += kMaxKeysPerRequest) {
      const size_t n = std::min(kMaxKeysPerRequest, keys.size() - at);
      grpc::ClientContext ctx;
      Prepare(&ctx);
      pb::LookupRequest req;
      req.set_protocol_version(kProtocolVersion);
      req.set_per_key(true);
      for (size_t i = 0; i < n; ++i) ToProto(keys[at + i], req.add_keys());
      pb::LookupResponse resp;
      if (absl::Status s = Convert(stub_->Lookup(&ctx, req, &resp), "Lookup"); !s.ok()) return s;
      if (static_cast<size_t>(resp.tier_size()) != n) {
        return absl::InternalError(absl::StrCat("Lookup on kvtierd ", options_.address, ": ", resp.tier_size(),
                                                " tiers for ", n, " keys with per_key"));
      }
      for (size_t i = 0; i < n; ++i) out.push_back(TierFromProto(resp.tier(static_cast<int>(i))));
    }
    return out;
  }

  absl::StatusOr<ChunkHeader> ReadHeader(const ChunkKey& key) override {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    pb::GetRequest req;
    req.set_protocol_version(kProtocolVersion);
    ToProto(key, req.add_keys());
    req.set_max_part_bytes(64 * 1024);
    auto reader = stub_->Get(&ctx, req);
    pb::GetResponse resp;
    std::string head;
    bool found = false;
    while (head.size() < kChunkHeaderBytes && reader->Read(&resp)) {
      if (resp.header()) found = resp.found();
      if (!found) break;
      head += resp.data();
    }
    ctx.TryCancel();  // only the header is needed
    grpc::Status st = reader->Finish();
    if (!found) {
      if (!st.ok() && st.error_code() != grpc::StatusCode::CANCELLED) return Convert(st, "Get");
      return absl::NotFoundError(absl::StrCat("key ", key.ToHex(), " is not cached in ", Describe()));
    }
    if (head.size() < kChunkHeaderBytes) {
      return absl::DataLossError(absl::StrCat("Get ", key.ToHex(), ": record shorter than its header"));
    }
    return DecodeChunkHeader(std::as_bytes(std::span<const char>(head.data(), kChunkHeaderBytes)));
  }

  absl::Status Erase(const ChunkKey& key) override {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    pb::EvictRequest req;
    req.set_protocol_version(kProtocolVersion);
    ToProto(key, req.mutable_keys()->add_keys());
    pb::EvictResponse resp;
    return Convert(stub_->Evict(&ctx, req, &resp), "Evict");
  }

 private:
  DaemonBackendOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::KvTier::Stub> stub_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CacheBackend>> OpenDaemonBackend(const DaemonBackendOptions& options) {
  if (options.address.empty()) return absl::InvalidArgumentError("--daemon: empty address");
  if (options.timeout_ms <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("--timeout: expected > 0, got ", options.timeout_ms, " ms"));
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(16 << 20);
  auto channel = grpc::CreateCustomChannel(options.address, grpc::InsecureChannelCredentials(), args);
  const auto deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(options.timeout_ms);
  if (!channel->WaitForConnected(deadline)) {
    return absl::UnavailableError(absl::StrCat(
        "no kvtierd reachable at ", options.address, " (nothing accepted a connection within ",
        options.timeout_ms, " ms; is kvtierd running and is this its --listen address?)"));
  }
  auto backend = std::make_unique<DaemonBackend>(options, std::move(channel));
  if (absl::Status s = backend->Health(); !s.ok()) return s;
  return std::unique_ptr<CacheBackend>(std::move(backend));
}

}  // namespace kvt::cli
