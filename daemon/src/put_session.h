// PutSession: one client-streaming Put call (proto/kvtier.proto PutRequest): assembles
// each record from its `data` parts into a daemon buffer, or takes it from a `shm` slice
// (progressive or not), within max_inflight_bytes, and stores it on a worker
// (RecordWriter), one record after another. Deletes itself when gRPC is done with it.
#ifndef KVT_DAEMON_PUT_SESSION_H_
#define KVT_DAEMON_PUT_SESSION_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <optional>
#include <string>

#include "kvstore/shm_progress.h"
#include "proto/kvtier.grpc.pb.h"
#include "record_buffers.h"
#include "stream_deps.h"

namespace kvt::daemon {

class PutSession final : public grpc::ServerReadReactor<::kvtier::v1::PutRequest> {
 public:
  PutSession(const StreamDeps& deps, grpc::CallbackServerContext* ctx,
             ::kvtier::v1::PutResponse* resp);

  void OnReadDone(bool ok) override;
  void OnDone() override;

 private:
  // Takes in the message just read: the start of a record, or more of its bytes.
  absl::Status Consume();
  absl::Status StartShmRecord(const ::kvtier::v1::ShmSlice& slice);
  // On a worker: stores the complete record, then reads on.
  void Submit();
  void Release();
  // Records are stored one by one: a failure leaves the ones before it stored. Their
  // count travels in trailing metadata (and in the message), OK or not.
  void Done(const absl::Status& s);

  const StreamDeps d_;
  grpc::CallbackServerContext* const ctx_;
  ::kvtier::v1::PutResponse* const resp_;
  const std::chrono::steady_clock::time_point start_;
  std::string tenant_;
  ::kvtier::v1::PutRequest req_;
  OwnedRecordBuffer buf_;
  std::optional<ShmSliceRef> slice_;     // a shm Put's record
  std::optional<ShmProgress> progress_;  // a progressive shm Put's control block
  uint64_t expected_ = 0, received_ = 0, reserved_ = 0;
};

}  // namespace kvt::daemon

#endif  // KVT_DAEMON_PUT_SESSION_H_
