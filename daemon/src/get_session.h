// GetSession: one server-streaming Get call, registered raw: the request arrives as bytes
// and is parsed here; each response message is written as a grpc::ByteBuffer of two
// slices, the serialised GetResponse fields other than `data` followed by the `data`
// field's tag and length (a small copied slice), then a slice that points into the
// record itself. Field order does not matter to a protobuf parser, so any GetResponse
// parser reads these messages. A record in the host tier (tier 0) is sent from the arena
// without a copy (TieredStore::View: a reader count keeps it there until the last slice
// is dropped); any other record is copied once (tier -> buffer) and sent from the
// buffer. With a `shm` slice the records are copied into the client's region instead
// (progressively from tier 0 when the client asked for it). Keys are answered one after
// another, each as the caller's tenant sees it (Tenancy). Deletes itself when gRPC is
// done with it.
#ifndef KVT_DAEMON_GET_SESSION_H_
#define KVT_DAEMON_GET_SESSION_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvstore/shm_progress.h"
#include "proto/kvtier.grpc.pb.h"
#include "stream_deps.h"

namespace kvt::daemon {

class GetSession final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  // `raw`: a serialised GetRequest.
  GetSession(const StreamDeps& deps, grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw);

  void OnWriteDone(bool ok) override;
  void OnDone() override;

 private:
  // A Get record buffer, shared by the session and the gRPC slices that still point into
  // it (the transport may hold a slice after OnWriteDone; each slice owns one reference).
  using SharedBuf = std::shared_ptr<std::byte>;

  absl::Status Parse(const grpc::ByteBuffer* raw);
  absl::Status Init(grpc::CallbackServerContext* ctx);
  // On a worker: reads the record of keys_[index_] and starts writing it.
  void Fetch();
  void FetchNext();
  // Answers keys_[index_] as not found.
  void Miss(bool store_asked);
  // On a worker: answers keys_[index_] with the message first, then copies the record
  // from tier 0 into the slice, publishing each piece (kvstore/shm_progress.h). The next
  // key is fetched once both the copy and the message's write are done (Step).
  void SendProgressive(RecordView view, const GetInfo& info);
  // One of a progressive record's two parts (the copy, the message's write) is done;
  // the second goes on with the next key.
  void Step();
  // Makes buf_ the view's bytes (held until gRPC drops the last slice into them) when the
  // record is the caller's; false (view released) otherwise.
  bool Lend(const ChunkKey& key, RecordView view);
  void SendPart(bool first);
  // Writes resp_ (which has no `data`) followed by a `data` field holding the next n
  // record bytes (none when n == 0), without copying them.
  void Write(uint64_t n);
  void Done(const absl::Status& s);

  const StreamDeps d_;
  ::kvtier::v1::GetRequest req_storage_;
  const ::kvtier::v1::GetRequest* const req_ = &req_storage_;
  const std::chrono::steady_clock::time_point start_;
  std::string tenant_;
  uint64_t lease_id_ = 0;  // GetRequest.lease_id, once the caller is authenticated
  std::vector<ChunkKey> keys_;
  size_t index_ = 0;
  uint32_t part_ = 4u << 20;
  ::kvtier::v1::GetResponse resp_;  // fields of the next message other than `data`
  grpc::ByteBuffer out_;            // the message being written
  SharedBuf buf_;
  uint64_t record_bytes_ = 0, sent_ = 0;
  std::optional<ShmSliceRef> slice_;     // the request's shm slice
  std::optional<ShmProgress> progress_;  // its control block, when progressive
  uint64_t shm_next_ = 0, shm_end_ = 0, shm_at_ = 0;
  // A progressive record in flight: its copy and its message's write both end in Step.
  std::atomic<bool> progressive_{false};
  std::atomic<int> pending_{0};
  bool write_ok_ = true;  // written before, read after pending_'s acq_rel decrement
};

}  // namespace kvt::daemon

#endif  // KVT_DAEMON_GET_SESSION_H_
