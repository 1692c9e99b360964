#include "service.h"

#include <chrono>

#include "absl/strings/str_format.h"
#include "get_session.h"
#include "kvstore/remote_client.h"
#include "put_session.h"
#include "wire.h"

namespace kvt::daemon {

namespace pb = ::kvtier::v1;

KvTierService::KvTierService(const ServiceDeps& deps)
    : deps_(deps),
      auth_(*deps.config, deps.metrics),
      gate_(deps.config->max_inflight_bytes),
      tenancy_(deps.catalog, deps.store),
      shm_(*deps.config),
      leases_(deps.store, deps.config->lease_timeout),
      writer_(deps.config, deps.store, &tenancy_, deps.metrics, deps.clock),
      unary_({.store = deps.store,
              .tenancy = &tenancy_,
              .leases = &leases_,
              .shm = &shm_,
              .writer = &writer_,
              .metrics = deps.metrics}),
      streams_({.config = deps.config,
                .pool = deps.pool,
                .metrics = deps.metrics,
                .auth = &auth_,
                .gate = &gate_,
                .shm = &shm_,
                .writer = &writer_,
                .store = deps.store,
                .tenancy = &tenancy_,
                .leases = &leases_}) {}

KvTierService::~KvTierService() = default;

bool KvTierService::Healthy(std::string* detail) const {
  std::string d;
  if (!deps_.store->stats().healthy) d += "store write-back thread died; ";
  if (deps_.pool->alive() != deps_.pool->size())
    d +=
        absl::StrFormat("%d of %d worker threads alive; ", deps_.pool->alive(), deps_.pool->size());
  if (deps_.lookup_pool != nullptr && deps_.lookup_pool->alive() != deps_.lookup_pool->size())
    d += absl::StrFormat("%d of %d lookup threads alive; ", deps_.lookup_pool->alive(),
                         deps_.lookup_pool->size());
  if (std::string threads; deps_.health != nullptr && !deps_.health->Healthy(&threads))
    d += threads;
  if (detail != nullptr) *detail = d;
  return d.empty();
}

grpc::ServerUnaryReactor* KvTierService::RunUnary(
    grpc::CallbackServerContext* ctx, Rpc rpc, uint32_t version,
    std::function<absl::Status(const std::string&)> fn) {
  const auto start = std::chrono::steady_clock::now();
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  auto finish = [this, reactor, rpc, start](const absl::Status& s) {
    deps_.metrics->RecordRpc(rpc, static_cast<int>(s.code()),
                             std::chrono::steady_clock::now() - start);
    reactor->Finish(ToGrpcStatus(s));
    gate_.Done();
  };
  if (absl::Status s = gate_.Enter(); !s.ok()) {
    finish(s);
    return reactor;
  }
  auto tenant = auth_.Authenticate(*ctx);
  if (!tenant.ok()) {
    finish(tenant.status());
    return reactor;
  }
  if (absl::Status s = CheckVersion(version); !s.ok()) {
    finish(s);
    return reactor;
  }
  WorkerPool* pool =
      rpc == Rpc::kLookup && deps_.lookup_pool != nullptr ? deps_.lookup_pool : deps_.pool;
  pool->Submit([fn = std::move(fn), finish, t = *tenant] { finish(fn(t)); }, finish);
  return reactor;
}

grpc::ServerUnaryReactor* KvTierService::Lookup(grpc::CallbackServerContext* ctx,
                                                const pb::LookupRequest* req,
                                                pb::LookupResponse* resp) {
  return RunUnary(ctx, Rpc::kLookup, req->protocol_version(),
                  [this, req, resp](const std::string& t) { return unary_.Lookup(*req, resp, t); });
}

grpc::ServerUnaryReactor* KvTierService::List(grpc::CallbackServerContext* ctx,
                                              const pb::ListRequest* req, pb::ListResponse* resp) {
  return RunUnary(ctx, Rpc::kList, req->protocol_version(),
                  [this, req, resp](const std::string& t) { return unary_.List(*req, resp, t); });
}

grpc::ServerUnaryReactor* KvTierService::Evict(grpc::CallbackServerContext* ctx,
                                               const pb::EvictRequest* req,
                                               pb::EvictResponse* resp) {
  return RunUnary(ctx, Rpc::kEvict, req->protocol_version(),
                  [this, req, resp](const std::string& t) { return unary_.Evict(*req, resp, t); });
}

grpc::ServerUnaryReactor* KvTierService::Stats(grpc::CallbackServerContext* ctx,
                                               const pb::StatsRequest* req,
                                               pb::StatsResponse* resp) {
  return RunUnary(ctx, Rpc::kStats, req->protocol_version(),
                  [this, resp](const std::string& t) { return unary_.Stats(resp, t); });
}

grpc::ServerUnaryReactor* KvTierService::ShmAttach(grpc::CallbackServerContext* ctx,
                                                   const pb::ShmAttachRequest* req,
                                                   pb::ShmAttachResponse* resp) {
  return RunUnary(
      ctx, Rpc::kShmAttach, req->protocol_version(),
      [this, req, resp](const std::string& t) { return unary_.ShmAttach(*req, resp, t); });
}

grpc::ServerUnaryReactor* KvTierService::ShmDetach(grpc::CallbackServerContext* ctx,
                                                   const pb::ShmDetachRequest* req,
                                                   pb::ShmDetachResponse*) {
  return RunUnary(ctx, Rpc::kShmDetach, req->protocol_version(),
                  [this, req](const std::string& t) { return unary_.ShmDetach(*req, t); });
}

grpc::ServerUnaryReactor* KvTierService::Health(grpc::CallbackServerContext* ctx,
                                                const pb::HealthRequest* req,
                                                pb::HealthResponse* resp) {
  // Answered on the gRPC thread (no I/O), so a saturated worker pool still answers.
  const auto start = std::chrono::steady_clock::now();
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::Status s = auth_.Authenticate(*ctx).status();
  if (s.ok()) s = CheckVersion(req->protocol_version());
  if (s.ok()) {
    std::string detail;
    resp->set_serving(Healthy(&detail));
    resp->set_detail(detail);
    resp->set_protocol_version(kKvtierProtocolVersion);
    resp->set_version("kvtierd 0.1.0");
    resp->set_shm_available(deps_.config->shm_enabled);
  }
  deps_.metrics->RecordRpc(Rpc::kHealth, static_cast<int>(s.code()),
                           std::chrono::steady_clock::now() - start);
  reactor->Finish(ToGrpcStatus(s));
  return reactor;
}

grpc::ServerReadReactor<pb::PutRequest>* KvTierService::Put(grpc::CallbackServerContext* ctx,
                                                            pb::PutResponse* resp) {
  return new PutSession(streams_, ctx, resp);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* KvTierService::Get(grpc::CallbackServerContext* ctx,
                                                               const grpc::ByteBuffer* req) {
  return new GetSession(streams_, ctx, req);
}

}  // namespace kvt::daemon
