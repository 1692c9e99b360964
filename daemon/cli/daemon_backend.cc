#include "daemon_backend.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kvstore/daemon_address.h"
#include "kvstore/remote_client.h"

namespace kvt::cli {

namespace {

class DaemonBackend final : public CacheBackend {
 public:
  DaemonBackend(DaemonBackendOptions options, std::unique_ptr<RemoteClient> client)
      : options_(std::move(options)), client_(std::move(client)) {}

  std::string Describe() const override { return absl::StrCat("kvtierd ", options_.address); }

  // Adds the address and a hint to the client's errors where the code alone is unclear.
  absl::Status Explain(const absl::Status& s, const char* what) const {
    switch (s.code()) {
      case absl::StatusCode::kDeadlineExceeded:
        return absl::Status(
            s.code(),
            absl::StrCat("no kvtierd reachable at ", options_.address, ": nothing answered within ",
                         Seconds(), " s (--timeout) (", what, ": ", s.message(),
                         "; is kvtierd running and not paused, and is this its listen address?)"));
      case absl::StatusCode::kUnavailable:
        return absl::Status(
            s.code(),
            absl::StrCat("no kvtierd reachable at ", options_.address, " (", what, ": ",
                         s.message(), "; is kvtierd running, and is this its listen address?)"));
      case absl::StatusCode::kUnauthenticated:
        return absl::UnauthenticatedError(
            absl::StrCat(what, " on kvtierd ", options_.address, ": ", s.message(),
                         " (give the tenant's token with --token or KVTIER_TOKEN)"));
      default:
        return absl::Status(
            s.code(), absl::StrCat(what, " on kvtierd ", options_.address, ": ", s.message()));
    }
  }

  // --timeout as the user wrote it, e.g. "5" or "0.5".
  std::string Seconds() const { return absl::StrFormat("%g", options_.timeout_ms / 1000.0); }

  absl::Status Health() {
    auto h = client_->Health();
    if (!h.ok()) return Explain(h.status(), "Health");
    return absl::OkStatus();
  }

  absl::StatusOr<StatsSnapshot> Stats() override {
    auto r = client_->Stats();
    if (!r.ok()) return Explain(r.status(), "Stats");
    StatsSnapshot out;
    out.source = Describe();
    if (!r->tenant.empty()) absl::StrAppend(&out.source, " (tenant ", r->tenant, ")");
    for (const auto& t : r->tiers) {
      out.tiers.push_back(TierSummary{t.name, t.kind, t.stats});
      out.pinned_bytes += t.stats.pinned_bytes;
    }
    out.store_hits = r->hits;
    out.store_misses = r->misses;
    out.integrity_errors = r->integrity_errors;
    out.explicit_evictions = r->explicit_evictions;
    out.leases = StatsSnapshot::Leases{r->leases_granted, r->leases_released, r->leases_expired,
                                       r->leases_active};
    return out;
  }

  absl::StatusOr<ChunkListPage> List(const ChunkListRequest& request) override {
    auto r = client_->List(request.ns, request.page_token,
                           static_cast<uint32_t>(std::min<size_t>(request.page_size, 10000)));
    if (!r.ok()) return Explain(r.status(), "List");
    ChunkListPage out;
    out.next_page_token = r->next_page_token;
    out.chunks.reserve(r->chunks.size());
    for (const auto& c : r->chunks) out.chunks.push_back(ListedChunk{c.info, c.tier});
    return out;
  }

  absl::StatusOr<std::vector<Located>> Locate(std::span<const ChunkKey> keys) override {
    std::vector<Located> out;
    out.reserve(keys.size());
    for (size_t at = 0; at < keys.size(); at += kKvtierMaxBatchKeys) {
      const size_t n = std::min<size_t>(kKvtierMaxBatchKeys, keys.size() - at);
      auto r = client_->Inspect(keys.subspan(at, n));
      if (!r.ok()) return Explain(r.status(), "Lookup");
      if (r->tier.size() != n || (r->explained && r->absence.size() != n)) {
        return absl::InternalError(absl::StrCat("Lookup on kvtierd ", options_.address, ": ",
                                                r->tier.size(), " answers for ", n, " keys"));
      }
      for (size_t i = 0; i < n; ++i) {
        Located l{.tier = r->tier[i]};
        if (!l.tier && r->explained) l.why = r->absence[i];
        out.push_back(l);
      }
    }
    return out;
  }

  absl::StatusOr<ChunkHeader> ReadHeader(const ChunkKey& key) override {
    auto r = client_->Peek(key);
    if (!r.ok()) return Explain(r.status(), "Get");
    return DecodeChunkHeader(*r);
  }

  absl::StatusOr<EvictResult> Evict(const EvictSelector& selector, bool dry_run) override {
    auto r = client_->Evict(selector, dry_run);
    if (!r.ok()) return Explain(r.status(), "Evict");
    return r;
  }

 private:
  DaemonBackendOptions options_;
  std::unique_ptr<RemoteClient> client_;
};

// Why nothing can answer at the unix socket `path`, found without waiting: the file is
// missing or not a socket, or connect() is refused. "" when a daemon may be there (the
// connect went through or would block: gRPC then waits up to --timeout, e.g. for a
// paused kvtierd). A path too long for sockaddr_un is left to gRPC.
std::string UnixSocketProblem(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return "the socket file does not exist";
    if (errno == ENOTDIR) return "the socket file does not exist (part of its path is a file)";
    return absl::StrCat("the socket file cannot be reached: ", std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) return "it is a directory, not a socket";
  if (!S_ISSOCK(st.st_mode)) return "the file is not a socket";
  sockaddr_un a{};
  if (path.size() >= sizeof(a.sun_path)) return "";
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), path.size());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a));
  const int err = errno;
  ::close(fd);
  if (rc == 0 || err == EAGAIN || err == EINPROGRESS || err == EINTR) return "";
  if (err == ECONNREFUSED) {
    return "nothing listens on the socket (connection refused; a kvtierd that stopped "
           "without cleaning up leaves its socket file behind)";
  }
  if (err == EACCES || err == EPERM) {
    return "permission denied on the socket (kvtierd may run as another user; the CLI needs "
           "write permission on the socket file)";
  }
  return absl::StrCat("cannot connect to the socket: ", std::strerror(err));
}

}  // namespace

absl::StatusOr<std::unique_ptr<CacheBackend>> OpenDaemonBackend(
    const DaemonBackendOptions& options) {
  absl::StatusOr<DaemonAddress> a = ParseDaemonAddress(options.address);
  if (!a.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.address_source, " ", a.status().message()));
  }
  if (options.timeout_ms <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timeout: expected > 0, got ", options.timeout_ms, " ms"));
  }
  if (options.timeout_ms > 600'000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timeout: expected at most 600 s, got ", options.timeout_ms / 1000.0, " s"));
  }
  if (a->kind == DaemonAddress::Kind::kUnix) {
    if (std::string why = UnixSocketProblem(a->unix_path); !why.empty()) {
      const std::string from = options.address_source == "--daemon"
                                   ? ""
                                   : absl::StrCat(" (", options.address_source, ")");
      return absl::UnavailableError(
          absl::StrCat("no kvtierd at ", options.address, from, ": ", why,
                       "; is kvtierd running, and is this its listen address?"));
    }
  }
  RemoteClientOptions o;
  o.target = options.address;
  o.token = options.token;
  o.deadline = std::chrono::milliseconds(options.timeout_ms);
  // --timeout is how long the user waits: a daemon that is starting or paused gets all of
  // it (the engine-side default fails fast instead).
  o.wait_for_connection = true;
  auto client = RemoteClient::Create(o);
  if (!client.ok()) {
    return absl::Status(client.status().code(), absl::StrCat("--daemon ", options.address, ": ",
                                                             client.status().message()));
  }
  auto backend = std::make_unique<DaemonBackend>(options, std::move(*client));
  if (absl::Status s = backend->Health(); !s.ok()) return s;
  return std::unique_ptr<CacheBackend>(std::move(backend));
}

}  // namespace kvt::cli
