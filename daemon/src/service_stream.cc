// The streaming RPCs of KvTierService: Put (client streaming) and Get (server streaming).
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/remote_client.h"
#include "record_buffers.h"
#include "service.h"
#include "spdlog/spdlog.h"

namespace kvt::daemon {

namespace pb = ::kvtier::v1;

namespace {

struct AlignedFree {
  void operator()(std::byte* p) const { GiveRecordBuffer(p); }
};
using AlignedBuf = std::unique_ptr<std::byte, AlignedFree>;

// A Get record buffer, shared by the reactor and the gRPC slices that still point into it
// (the transport may hold a slice after OnWriteDone; each slice owns one reference).
using SharedBuf = std::shared_ptr<std::byte>;
void UnrefSharedBuf(void* user_data) { delete static_cast<SharedBuf*>(user_data); }

// Appends the protobuf varint encoding of `v`.
void AppendVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// Uninitialised 4096-aligned buffer (the disk tier reads/writes O_DIRECT without a bounce),
// reused across calls (record_buffers.h).
AlignedBuf AllocRecord(uint64_t bytes) { return AlignedBuf(TakeRecordBuffer(bytes)); }

// ---------------------------------------------------------------------------------------
class PutReactor final : public grpc::ServerReadReactor<pb::PutRequest> {
 public:
  PutReactor(KvTierService* svc, grpc::CallbackServerContext* ctx, pb::PutResponse* resp)
      : svc_(svc), ctx_(ctx), resp_(resp), start_(std::chrono::steady_clock::now()) {
    svc_->CallStarted();
    if (svc_->draining()) {
      Done(absl::UnavailableError("kvtierd is shutting down"));
      return;
    }
    auto tenant = svc_->Authenticate(ctx);
    if (!tenant.ok()) {
      Done(tenant.status());
      return;
    }
    tenant_ = *tenant;
    StartRead(&req_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // client half-closed (or the call broke)
      if (expected_ > 0)
        Done(absl::InvalidArgumentError(absl::StrFormat(
            "data: stream ended inside a record (%d of %d bytes received)", received_, expected_)));
      else
        Done(absl::OkStatus());
      return;
    }
    absl::Status s = Consume();
    if (!s.ok()) {
      Done(s);
      return;
    }
    if (expected_ > 0 && received_ == expected_) {
      Submit();
    } else {
      StartRead(&req_);
    }
  }

  void OnDone() override {
    Release();
    svc_->CallDone();
    delete this;
  }

 private:
  absl::Status Consume() {
    const DaemonConfig& c = *svc_->deps().config;
    if (absl::Status s = CheckVersion(req_.protocol_version()); !s.ok()) return s;
    if (req_.record_bytes() != 0) {
      if (expected_ > 0)
        return absl::InvalidArgumentError(absl::StrFormat(
            "record_bytes: a new record started after %d of %d bytes of the previous one",
            received_, expected_));
      if (req_.record_bytes() < kChunkHeaderBytes || req_.record_bytes() > c.max_record_bytes)
        return absl::InvalidArgumentError(absl::StrFormat("record_bytes: %d, expected %d..%d",
                                                          req_.record_bytes(), kChunkHeaderBytes,
                                                          c.max_record_bytes));
      if (req_.has_shm()) {
        if (!req_.data().empty())
          return absl::InvalidArgumentError("data: must be empty when shm is set");
        const auto& sl = req_.shm();
        if (sl.length() != req_.record_bytes())
          return absl::InvalidArgumentError(absl::StrFormat(
              "shm.length: %d, expected record_bytes (%d)", sl.length(), req_.record_bytes()));
        region_ = svc_->FindRegion(sl.region_id(), tenant_);
        if (region_ == nullptr)
          return absl::InvalidArgumentError(
              absl::StrFormat("shm.region_id: %d is not attached", sl.region_id()));
        if (!region_->Contains(sl.offset(), sl.length()))
          return absl::InvalidArgumentError(
              absl::StrFormat("shm.offset/length: [%d, +%d) outside the %d-byte region",
                              sl.offset(), sl.length(), region_->size()));
        if (absl::Status s = KvTierService::CheckProgressBlock(*region_, sl); !s.ok()) return s;
        // Progressive: the client writes the record after this message; the worker copies
        // each piece as it is published (StoreShmRecord).
        if (sl.progressive()) progress_.emplace(region_->data() + sl.progress_offset());
        // The record is copied into daemon memory (tier 0) before it is checked: count it.
        const uint64_t before = svc_->inflight_bytes().fetch_add(sl.length());
        reserved_ = sl.length();
        if (before + sl.length() > c.max_inflight_bytes)
          return absl::ResourceExhaustedError(
              "record_bytes: too many bytes in flight at the daemon; retry later");
        shm_offset_ = sl.offset();
        expected_ = received_ = sl.length();
        return absl::OkStatus();
      }
      const uint64_t before = svc_->inflight_bytes().fetch_add(req_.record_bytes());
      reserved_ = req_.record_bytes();
      if (before + req_.record_bytes() > c.max_inflight_bytes)
        return absl::ResourceExhaustedError(
            "record_bytes: too many bytes in flight at the daemon; retry later");
      buf_ = AllocRecord(req_.record_bytes());
      if (buf_ == nullptr)
        return absl::ResourceExhaustedError("record_bytes: cannot allocate the record buffer");
      expected_ = req_.record_bytes();
      received_ = 0;
    } else if (req_.has_shm()) {
      return absl::InvalidArgumentError("shm: set without record_bytes");
    }
    if (req_.data().empty()) {
      if (expected_ == 0)
        return absl::InvalidArgumentError("record_bytes: data sent before a record was started");
      return absl::OkStatus();
    }
    if (expected_ == 0)
      return absl::InvalidArgumentError("record_bytes: data sent before a record was started");
    if (req_.data().size() > expected_ - received_)
      return absl::InvalidArgumentError(
          absl::StrFormat("data: %d bytes more than record_bytes (%d)",
                          received_ + req_.data().size() - expected_, expected_));
    std::memcpy(buf_.get() + received_, req_.data().data(), req_.data().size());
    received_ += req_.data().size();
    return absl::OkStatus();
  }

  void Submit() {
    svc_->deps().pool->Submit(
        [this] {
          const bool shm = region_ != nullptr;
          ChunkKey key;
          absl::Status s =
              shm ? svc_->StoreShmRecord(
                        std::span<const std::byte>(region_->data() + shm_offset_, expected_),
                        tenant_, &key, progress_ ? &*progress_ : nullptr, shm_offset_)
                  : svc_->StoreRecord(std::span<const std::byte>(buf_.get(), expected_), tenant_,
                                      &key);
          if (s.ok()) {
            svc_->deps().metrics->AddBytesIn(shm, expected_);
            resp_->set_records_stored(resp_->records_stored() + 1);
            pb::Key128* k = resp_->add_keys();
            k->set_lo(key.lo);
            k->set_hi(key.hi);
          }
          Release();
          if (!s.ok()) {
            Done(s);
            return;
          }
          StartRead(&req_);
        },
        [this](const absl::Status& s) { Done(s); });
  }

  void Release() {
    buf_.reset();
    progress_.reset();  // before the region it points into
    region_.reset();
    if (reserved_ > 0) svc_->inflight_bytes().fetch_sub(reserved_);
    reserved_ = 0;
    expected_ = received_ = 0;
  }

  // Records are stored one by one: a failure leaves the ones before it stored. Their
  // count travels in trailing metadata (and in the message), OK or not.
  void Done(const absl::Status& s) {
    Release();
    svc_->deps().metrics->RecordRpc(Rpc::kPut, static_cast<int>(s.code()),
                                    std::chrono::steady_clock::now() - start_);
    const uint32_t stored = resp_->records_stored();
    ctx_->AddTrailingMetadata(kKvtierRecordsStoredKey, std::to_string(stored));
    if (s.ok()) {
      Finish(grpc::Status::OK);
      return;
    }
    Finish(ToGrpcStatus(absl::Status(
        s.code(),
        absl::StrFormat("%s [%d records of this stream stored before it]", s.message(), stored))));
  }

  KvTierService* const svc_;
  grpc::CallbackServerContext* const ctx_;
  pb::PutResponse* const resp_;
  const std::chrono::steady_clock::time_point start_;
  std::string tenant_;
  pb::PutRequest req_;
  AlignedBuf buf_;
  std::shared_ptr<ShmRegion> region_;
  std::optional<ShmProgress> progress_;  // a progressive shm Put's control block
  uint64_t shm_offset_ = 0;
  uint64_t expected_ = 0, received_ = 0, reserved_ = 0;
};

// ---------------------------------------------------------------------------------------
//
// Raw method: the request arrives as bytes and is parsed here; each response message is
// written as a grpc::ByteBuffer of two slices, the serialised GetResponse fields other
// than `data` followed by the `data` field's tag and length (a small copied slice), then
// a slice that points into the record itself. Field order does not matter to a
// protobuf parser, so any GetResponse parser reads these messages. A record in the host
// tier (tier 0) is sent from the arena without a copy (TieredStore::View: a reader count
// keeps it there until the last slice is dropped); any other record is copied once
// (tier -> buffer) and sent from the buffer.
class GetReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  GetReactor(KvTierService* svc, grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw)
      : svc_(svc), start_(std::chrono::steady_clock::now()) {
    svc_->CallStarted();
    absl::Status s =
        svc_->draining() ? absl::UnavailableError("kvtierd is shutting down") : Parse(raw);
    if (s.ok()) s = Init(ctx);
    if (!s.ok()) {
      Done(s);
      return;
    }
    svc_->deps().pool->Submit([this] { Fetch(); }, [this](const absl::Status& s) { Done(s); });
  }

  void OnWriteDone(bool ok) override {
    if (progressive_.load(std::memory_order_acquire)) {
      write_ok_ = ok;  // read by whichever of the two finishes second (Step)
      Step();
      return;
    }
    if (!ok) {
      Done(absl::CancelledError("client went away"));
      return;
    }
    if (sent_ < record_bytes_ && buf_ != nullptr) {
      SendPart(false);
      return;
    }
    buf_.reset();
    if (++index_ >= keys_.size()) {
      Done(absl::OkStatus());
      return;
    }
    svc_->deps().pool->Submit([this] { Fetch(); }, [this](const absl::Status& s) { Done(s); });
  }

  void OnDone() override {
    svc_->CallDone();
    delete this;
  }

 private:
  absl::Status Parse(const grpc::ByteBuffer* raw) {
    grpc::ByteBuffer copy(*raw);  // shares the slices
    grpc::Status st = grpc::SerializationTraits<pb::GetRequest>::Deserialize(&copy, &req_storage_);
    if (!st.ok())
      return absl::InvalidArgumentError("GetRequest: cannot parse the request: " +
                                        st.error_message());
    return absl::OkStatus();
  }

  absl::Status Init(grpc::CallbackServerContext* ctx) {
    auto tenant = svc_->Authenticate(ctx);
    if (!tenant.ok()) return tenant.status();
    tenant_ = *tenant;
    lease_id_ = req_->lease_id();  // its keys are done with in Done, whatever the outcome
    if (absl::Status s = CheckVersion(req_->protocol_version()); !s.ok()) return s;
    auto keys = KeysFromProto(req_->keys(), "keys");
    if (!keys.ok()) return keys.status();
    keys_ = std::move(*keys);
    if (req_->max_part_bytes() > kKvtierMaxPartBytes ||
        (req_->max_part_bytes() != 0 && req_->max_part_bytes() < 4096))
      return absl::InvalidArgumentError(
          absl::StrFormat("max_part_bytes: %d, expected 0 or 4096..%d", req_->max_part_bytes(),
                          kKvtierMaxPartBytes));
    part_ =
        req_->max_part_bytes() != 0 ? req_->max_part_bytes() : svc_->deps().config->get_part_bytes;
    if (req_->has_shm()) {
      const auto& sl = req_->shm();
      region_ = svc_->FindRegion(sl.region_id(), tenant_);
      if (region_ == nullptr)
        return absl::InvalidArgumentError(
            absl::StrFormat("shm.region_id: %d is not attached", sl.region_id()));
      if (!region_->Contains(sl.offset(), sl.length()))
        return absl::InvalidArgumentError(
            absl::StrFormat("shm.offset/length: [%d, +%d) outside the %d-byte region", sl.offset(),
                            sl.length(), region_->size()));
      if (absl::Status s = KvTierService::CheckProgressBlock(*region_, sl); !s.ok()) return s;
      if (sl.progressive()) progress_.emplace(region_->data() + sl.progress_offset());
      shm_next_ = sl.offset();
      shm_end_ = sl.offset() + sl.length();
    }
    return absl::OkStatus();
  }

  // Record size of `key` in the fastest tier holding it (0 = miss).
  uint64_t SizeOf(const ChunkKey& key) {
    LookupResult r =
        svc_->deps().store->Lookup(std::span<const ChunkKey>(&key, 1), {.per_key = true});
    return r.record_bytes.empty() ? 0 : r.record_bytes[0];
  }

  // On a worker: reads the record of keys_[index_] and starts writing it.
  void Fetch() {
    const ChunkKey key = keys_[index_];
    TieredStore& store = *svc_->deps().store;
    Catalog& catalog = *svc_->deps().catalog;
    resp_.Clear();
    resp_.set_index(static_cast<uint32_t>(index_));
    resp_.set_header(true);
    record_bytes_ = sent_ = 0;
    GetInfo info;
    bool found = false;
    bool store_asked = false;  // a store Get counts its own hit or miss
    if (catalog.KeyVisible(key, tenant_)) {
      for (int attempt = 0; attempt < 3 && !found; ++attempt) {
        const uint64_t size = SizeOf(key);
        if (size == 0) break;
        if (region_ == nullptr && !req_->peek()) {
          // Tier 0 lends the record in place: it is sent from there without a copy.
          absl::StatusOr<RecordView> view = store.View(key, &info);
          if (view.ok()) {
            store_asked = true;  // View counted the hit
            found = Lend(key, std::move(*view));
            break;
          }
        }
        if (progress_ && !req_->peek()) {
          // Tier 0 lends the record in place; it is copied into the slice piece by piece
          // while the client copies it out (SendProgressive).
          absl::StatusOr<RecordView> view = store.View(key, &info);
          if (view.ok()) {
            store_asked = true;                         // View counted the hit
            auto h = DecodeChunkHeader(view->bytes());  // defence in depth, as in Lend
            if (!h.ok() || h->key != key || !catalog.NsVisible(h->ns, tenant_)) break;
            SendProgressive(std::move(*view), info);
            return;
          }
        }
        std::span<std::byte> dest;
        if (region_ != nullptr) {
          const uint64_t at = (shm_next_ + 63) & ~uint64_t{63};
          if (at > shm_end_ || size > shm_end_ - at) {
            resp_.set_found(true);
            resp_.set_shm_overflow(true);
            resp_.set_record_bytes(size);
            resp_.mutable_shm()->set_region_id(req_->shm().region_id());
            Write(0);
            return;
          }
          dest = std::span<std::byte>(region_->data() + at, size);
          shm_at_ = at;
        } else {
          buf_ = SharedBuf(AllocRecord(size).release(), AlignedFree());
          if (buf_ == nullptr) break;
          dest = std::span<std::byte>(buf_.get(), size);
        }
        auto n = store.Get(key, dest, &info, GetOptions{.peek = req_->peek()});
        store_asked = true;
        if (n.ok()) {
          // Defence in depth: the record's own namespace must be the caller's.
          auto h = DecodeChunkHeader(dest.first(*n));
          if (h.ok() && h->key == key && catalog.NsVisible(h->ns, tenant_)) {
            found = true;
            record_bytes_ = *n;
          } else {
            std::memset(dest.data(), 0, dest.size());
            break;
          }
        } else if (n.status().code() != absl::StatusCode::kOutOfRange) {
          break;  // miss (or a record that failed verification: counted by the store)
        }
      }
    }
    if (!found) {
      if (!store_asked && !req_->peek()) svc_->CountUnservedMiss();
      buf_.reset();
      if (SizeOf(key) == 0) catalog.ForgetKey(key);
      resp_.set_found(false);
      resp_.set_tier(pb::TIER_NONE);
      Write(0);
      return;
    }
    resp_.set_found(true);
    resp_.set_record_bytes(record_bytes_);
    resp_.set_tier(TierToProto(info.tier_kind));
    if (region_ != nullptr) {
      auto* sl = resp_.mutable_shm();
      sl->set_region_id(req_->shm().region_id());
      sl->set_offset(shm_at_);
      sl->set_length(record_bytes_);
      shm_next_ = shm_at_ + record_bytes_;
      sent_ = record_bytes_;
      svc_->deps().metrics->AddBytesOut(true, record_bytes_);
      Write(0);
      return;
    }
    svc_->deps().metrics->AddBytesOut(false, record_bytes_);
    SendPart(true);
  }

  // On a worker: answers keys_[index_] with the message first, then copies the record
  // from tier 0 into the slice, publishing each piece (kvstore/shm_progress.h). The next
  // key is fetched once both the copy and the message's write are done (Step).
  void SendProgressive(RecordView view, const GetInfo& info) {
    const uint64_t size = view.bytes().size();
    const uint64_t at = (shm_next_ + 63) & ~uint64_t{63};
    resp_.set_found(true);
    resp_.set_record_bytes(size);
    auto* sl = resp_.mutable_shm();
    sl->set_region_id(req_->shm().region_id());
    if (at > shm_end_ || size > shm_end_ - at) {
      resp_.set_shm_overflow(true);
      Write(0);
      return;
    }
    resp_.set_tier(TierToProto(info.tier_kind));
    sl->set_offset(at);
    sl->set_length(size);
    sl->set_progressive(true);
    sl->set_progress_offset(req_->shm().progress_offset());
    shm_next_ = at + size;
    record_bytes_ = sent_ = size;
    svc_->deps().metrics->AddBytesOut(true, size);
    pending_.store(2, std::memory_order_relaxed);
    write_ok_ = true;
    progressive_.store(true, std::memory_order_release);
    Write(0);
    CopyPublishing(view.bytes(), region_->data() + at, at, *progress_);
    view.Release();
    Step();
  }

  // One of a progressive record's two parts (the copy, the message's write) is done;
  // the second goes on with the next key.
  void Step() {
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    progressive_.store(false, std::memory_order_relaxed);
    if (!write_ok_) {
      Done(absl::CancelledError("client went away"));
      return;
    }
    if (++index_ >= keys_.size()) {
      Done(absl::OkStatus());
      return;
    }
    svc_->deps().pool->Submit([this] { Fetch(); }, [this](const absl::Status& s) { Done(s); });
  }

  // Makes buf_ the view's bytes (held until gRPC drops the last slice into them) when the
  // record is the caller's; false (view released) otherwise.
  bool Lend(const ChunkKey& key, RecordView view) {
    auto h = DecodeChunkHeader(view.bytes());  // defence in depth, as for a copied record
    if (!h.ok() || h->key != key || !svc_->deps().catalog->NsVisible(h->ns, tenant_)) return false;
    record_bytes_ = view.bytes().size();
    auto* data = const_cast<std::byte*>(view.bytes().data());  // only ever read (slices)
    auto held = std::make_shared<RecordView>(std::move(view));
    NoteRecordViewTaken();
    buf_ = SharedBuf(data, [held](std::byte*) {
      held->Release();
      NoteRecordViewReleased();
    });
    return true;
  }

  void SendPart(bool first) {
    if (!first) {
      resp_.Clear();
    }
    const uint64_t n = std::min<uint64_t>(part_, record_bytes_ - sent_);
    Write(n);
  }

  // Writes resp_ (which has no `data`) followed by a `data` field holding the next n
  // record bytes (none when n == 0), without copying them.
  void Write(uint64_t n) {
    std::string head = resp_.SerializeAsString();
    if (n == 0) {
      grpc::Slice s(head);
      out_ = grpc::ByteBuffer(&s, 1);
    } else {
      head.push_back(static_cast<char>((4 << 3) | 2));  // field 4 (data), length-delimited
      AppendVarint(&head, n);
      grpc::Slice parts[2] = {
          grpc::Slice(head),
          grpc::Slice(buf_.get() + sent_, n, &UnrefSharedBuf, new SharedBuf(buf_)),
      };
      out_ = grpc::ByteBuffer(parts, 2);
      sent_ += n;
    }
    StartWrite(&out_);
  }

  void Done(const absl::Status& s) {
    buf_.reset();
    if (lease_id_ != 0) svc_->leases().Release(std::exchange(lease_id_, 0), keys_, tenant_);
    svc_->deps().metrics->RecordRpc(Rpc::kGet, static_cast<int>(s.code()),
                                    std::chrono::steady_clock::now() - start_);
    Finish(ToGrpcStatus(s));
  }

  KvTierService* const svc_;
  pb::GetRequest req_storage_;
  const pb::GetRequest* const req_ = &req_storage_;
  const std::chrono::steady_clock::time_point start_;
  std::string tenant_;
  uint64_t lease_id_ = 0;  // GetRequest.lease_id, once the caller is authenticated
  std::vector<ChunkKey> keys_;
  size_t index_ = 0;
  uint32_t part_ = 4u << 20;
  pb::GetResponse resp_;  // fields of the next message other than `data`
  grpc::ByteBuffer out_;  // the message being written
  SharedBuf buf_;
  uint64_t record_bytes_ = 0, sent_ = 0;
  std::shared_ptr<ShmRegion> region_;
  std::optional<ShmProgress> progress_;  // the request's control block, when progressive
  uint64_t shm_next_ = 0, shm_end_ = 0, shm_at_ = 0;
  // A progressive record in flight: its copy and its message's write both end in Step.
  std::atomic<bool> progressive_{false};
  std::atomic<int> pending_{0};
  bool write_ok_ = true;  // written before, read after pending_'s acq_rel decrement
};

}  // namespace

grpc::ServerReadReactor<pb::PutRequest>* KvTierService::Put(grpc::CallbackServerContext* ctx,
                                                            pb::PutResponse* resp) {
  return new PutReactor(this, ctx, resp);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* KvTierService::Get(grpc::CallbackServerContext* ctx,
                                                               const grpc::ByteBuffer* req) {
  return new GetReactor(this, ctx, req);
}

}  // namespace kvt::daemon
