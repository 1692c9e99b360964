// Private to kvt::kvstore_remote: RemoteClient::Impl (channel, stub, retries and the
// circuit breaker) and the proto <-> kvtier conversions, shared by remote_client.cc
// (control calls), remote_client_get.cc (record reads) and remote_client_shm.cc (the
// shared-memory fast path).
#ifndef KVSTORE_REMOTE_SRC_REMOTE_CLIENT_IMPL_H_
#define KVSTORE_REMOTE_SRC_REMOTE_CLIENT_IMPL_H_

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <thread>

#include "absl/random/random.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "kvstore/remote_client.h"
#include "proto/kvtier.grpc.pb.h"

namespace kvt {

namespace pb = ::kvtier::v1;

inline void ToProto(const Hash128<ChunkKeyTag>& k, pb::Key128* out) {
  out->set_lo(k.lo);
  out->set_hi(k.hi);
}
inline void ToProto(const NamespaceId& k, pb::Key128* out) {
  out->set_lo(k.lo);
  out->set_hi(k.hi);
}
inline ChunkKey KeyFromProto(const pb::Key128& k) { return ChunkKey{k.lo(), k.hi()}; }
inline NamespaceId NsFromProto(const pb::Key128& k) { return NamespaceId{k.lo(), k.hi()}; }

inline std::optional<TierKind> TierFromProto(int t) {
  switch (t) {
    case pb::TIER_HOST:
      return TierKind::kHost;
    case pb::TIER_DISK:
      return TierKind::kDisk;
    case pb::TIER_REMOTE:
      return TierKind::kRemote;
    default:
      return std::nullopt;
  }
}

inline void StatsFromProto(const pb::TierStatsProto& p, TierStats* s) {
  s->capacity_bytes = p.capacity_bytes();
  s->used_bytes = p.used_bytes();
  s->chunks = p.chunks();
  s->hits = p.hits();
  s->misses = p.misses();
  s->evictions = p.evictions();
  s->integrity_errors = p.integrity_errors();
  s->pinned_bytes = p.pinned_bytes();
  s->bytes_in = p.bytes_in();
  s->bytes_out = p.bytes_out();
  s->puts = p.puts();
  s->copy_bytes = p.copy_bytes();
  s->admission_rejects = p.admission_rejects();
  s->ttl_expired = p.ttl_expired();
}

// gRPC's deadlines are real (system_clock) time; the retry budget, backoff and cool-down
// run on options.clock (kvstore/clock.h).
using GrpcClock = std::chrono::system_clock;

// Reads one record's GetResponse messages from `reader`: the header message gives the
// record size, `dest(size)` supplies where the bytes go (its error ends the read), then
// the data parts (or the shm slice) fill it. *result = record bytes or the error.
// Defined in remote_client_get.cc; used by Get and the shm Gets. `on_shm(offset,
// record_bytes, progressive)`, when given, is called for a record answered in the shm
// slice (its error becomes *result and cancels the call).
using ShmAnswerFn = std::function<absl::Status(uint64_t offset, uint64_t bytes, bool progressive)>;
grpc::Status ReadOneRecord(
    grpc::ClientReader<grpc::ByteBuffer>* reader, grpc::ClientContext& ctx,
    const std::function<absl::StatusOr<std::span<std::byte>>(uint64_t)>& dest,
    absl::StatusOr<uint64_t>* result, const ShmAnswerFn& on_shm = nullptr);

class RemoteClient::Impl {
 public:
  Impl(const RemoteClientOptions& options, std::string client_id)
      : options_(options),
        clock_(options.clock != nullptr ? options.clock : SystemClock()),
        client_id_(std::move(client_id)) {
    Rebuild();
  }

  std::shared_ptr<pb::KvTier::Stub> stub() {
    absl::MutexLock lock(&mu_);
    return stub_;
  }

  void Rebuild() {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(kKvtierMaxMessageBytes);
    args.SetMaxSendMessageSize(kKvtierMaxMessageBytes);
    const int max_backoff_ms = static_cast<int>(options_.max_backoff.count());
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, max_backoff_ms);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, std::min(100, max_backoff_ms));
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, std::min(100, max_backoff_ms));
    // A private subchannel per client so one client's reconnect state is its own.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto channel =
        grpc::CreateCustomChannel(options_.target, grpc::InsecureChannelCredentials(), args);
    auto stub = std::make_shared<pb::KvTier::Stub>(channel);
    absl::MutexLock lock(&mu_);
    stub_ = std::move(stub);
    channel_ = std::move(channel);
  }

  // The channel of the current stub (for the raw Get call).
  std::shared_ptr<grpc::Channel> channel() {
    absl::MutexLock lock(&mu_);
    return channel_;
  }

  // Starts a Get call that reads each GetResponse as raw bytes (see ReadOneRecord).
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> StartRawGet(grpc::ClientContext& ctx,
                                                                    const pb::GetRequest& req) {
    std::shared_ptr<grpc::Channel> ch = channel();
    const grpc::internal::RpcMethod method("/kvtier.v1.KvTier/Get",
                                           grpc::internal::RpcMethod::SERVER_STREAMING, ch);
    return std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>>(
        grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(ch.get(), method, &ctx, req));
  }

  // The gRPC deadline of an attempt ending at `deadline` on clock_.
  GrpcClock::time_point RealDeadline(Clock::TimePoint deadline) const {
    return GrpcClock::now() + std::chrono::duration_cast<GrpcClock::duration>(
                                  std::max(deadline - clock_->Now(), Clock::Duration::zero()));
  }

  void Setup(grpc::ClientContext& ctx, Clock::TimePoint deadline) const {
    ctx.set_deadline(RealDeadline(deadline));
    if (!options_.token.empty()) ctx.AddMetadata("authorization", "Bearer " + options_.token);
    ctx.AddMetadata("kvtier-client-id", client_id_);
  }

  // Runs `attempt` until it succeeds, fails with something other than UNAVAILABLE, runs
  // out of attempts or the call's deadline passes. The first attempt fails fast when the
  // channel is not connected; retries wait for the (re)connection for at most
  // 2 x max_backoff each. After `rebuild_after_failures` consecutive failed calls the
  // channel is rebuilt and, for a cool-down of 4 x max_backoff, calls fail at once
  // (one probe call per cool-down goes through), so a dead daemon costs engines
  // nothing but a miss.
  // RPC attempts sent (retries included) since creation.
  uint64_t rpcs() const { return rpcs_.load(std::memory_order_relaxed); }

  absl::Status Call(
      const std::function<grpc::Status(pb::KvTier::Stub&, grpc::ClientContext&)>& attempt) {
    const Clock::TimePoint deadline = clock_->Now() + options_.deadline;
    {
      absl::MutexLock lock(&mu_);
      if (failures_ >= options_.rebuild_after_failures && clock_->Now() < circuit_open_until_) {
        return absl::UnavailableError(
            "kvtierd unreachable (recent calls failed; retrying after a cool-down)");
      }
      if (failures_ >= options_.rebuild_after_failures)
        circuit_open_until_ = clock_->Now() + options_.max_backoff * 4;
    }
    auto backoff = options_.initial_backoff;
    absl::Status last;
    for (int i = 1; i <= options_.max_attempts; ++i) {
      auto s = stub();
      grpc::ClientContext ctx;
      Setup(ctx, deadline);
      if (options_.wait_for_connection) {
        ctx.set_wait_for_ready(true);  // the whole deadline (set by Setup)
      } else if (i > 1) {
        ctx.set_wait_for_ready(true);
        ctx.set_deadline(
            RealDeadline(std::min(deadline, clock_->Now() + options_.max_backoff * 2)));
      }
      rpcs_.fetch_add(1, std::memory_order_relaxed);
      last = FromGrpcStatus(attempt(*s, ctx));
      if (last.ok() || (last.code() != absl::StatusCode::kUnavailable &&
                        last.code() != absl::StatusCode::kDeadlineExceeded)) {
        absl::MutexLock lock(&mu_);
        failures_ = 0;
        return last;
      }
      if (clock_->Now() >= deadline) {
        last = absl::DeadlineExceededError("kvtierd did not answer within the deadline: " +
                                           last.ToString());
        break;
      }
      if (last.code() == absl::StatusCode::kDeadlineExceeded && i == 1)
        break;  // hung daemon: no retry
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_->Now());
      if (i == options_.max_attempts || left <= backoff) break;
      clock_->SleepFor(backoff);
      backoff = std::min(backoff * 2, options_.max_backoff);
    }
    bool rebuild = false;
    {
      absl::MutexLock lock(&mu_);
      rebuild = ++failures_ == options_.rebuild_after_failures;
      if (failures_ >= options_.rebuild_after_failures)
        circuit_open_until_ = clock_->Now() + options_.max_backoff * 4;
    }
    if (rebuild) Rebuild();
    return last;
  }

  const RemoteClientOptions options_;
  const std::shared_ptr<Clock> clock_;
  const std::string client_id_;
  absl::Mutex mu_;
  std::shared_ptr<pb::KvTier::Stub> stub_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<grpc::Channel> channel_ ABSL_GUARDED_BY(mu_);
  int failures_ ABSL_GUARDED_BY(mu_) = 0;
  Clock::TimePoint circuit_open_until_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> rpcs_{0};
};

}  // namespace kvt

#endif  // KVSTORE_REMOTE_SRC_REMOTE_CLIENT_IMPL_H_
