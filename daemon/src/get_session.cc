#include "get_session.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/remote_client.h"
#include "kvstore/shm_copy.h"
#include "record_buffers.h"
#include "wire.h"

namespace kvt::daemon {

namespace pb = ::kvtier::v1;

namespace {

void UnrefSharedBuf(void* user_data) { delete static_cast<std::shared_ptr<std::byte>*>(user_data); }

// Appends the protobuf varint encoding of `v`.
void AppendVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

}  // namespace

GetSession::GetSession(const StreamDeps& deps, grpc::CallbackServerContext* ctx,
                       const grpc::ByteBuffer* raw)
    : d_(deps), start_(std::chrono::steady_clock::now()) {
  absl::Status s = d_.gate->Enter();
  if (s.ok()) s = Parse(raw);
  if (s.ok()) s = Init(ctx);
  if (!s.ok()) {
    Done(s);
    return;
  }
  FetchNext();
}

void GetSession::OnWriteDone(bool ok) {
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
  FetchNext();
}

void GetSession::OnDone() {
  d_.gate->Done();
  delete this;
}

absl::Status GetSession::Parse(const grpc::ByteBuffer* raw) {
  grpc::ByteBuffer copy(*raw);  // shares the slices
  grpc::Status st = grpc::SerializationTraits<pb::GetRequest>::Deserialize(&copy, &req_storage_);
  if (!st.ok())
    return absl::InvalidArgumentError("GetRequest: cannot parse the request: " +
                                      st.error_message());
  return absl::OkStatus();
}

absl::Status GetSession::Init(grpc::CallbackServerContext* ctx) {
  auto tenant = d_.auth->Authenticate(*ctx);
  if (!tenant.ok()) return tenant.status();
  tenant_ = *tenant;
  lease_id_ = req_->lease_id();  // its keys are done with in Done, whatever the outcome
  if (absl::Status s = CheckVersion(req_->protocol_version()); !s.ok()) return s;
  auto keys = KeysFromProto(req_->keys(), "keys");
  if (!keys.ok()) return keys.status();
  keys_ = std::move(*keys);
  if (req_->max_part_bytes() > kKvtierMaxPartBytes ||
      (req_->max_part_bytes() != 0 && req_->max_part_bytes() < 4096))
    return absl::InvalidArgumentError(absl::StrFormat("max_part_bytes: %d, expected 0 or 4096..%d",
                                                      req_->max_part_bytes(), kKvtierMaxPartBytes));
  part_ = req_->max_part_bytes() != 0 ? req_->max_part_bytes() : d_.config->get_part_bytes;
  if (req_->has_shm()) {
    absl::StatusOr<ShmSliceRef> slice = d_.shm->Resolve(req_->shm(), tenant_);
    if (!slice.ok()) return slice.status();
    slice_ = std::move(*slice);
    if (slice_->progressive) progress_.emplace(slice_->progress_block());
    shm_next_ = slice_->offset;
    shm_end_ = slice_->offset + slice_->length;
  }
  return absl::OkStatus();
}

void GetSession::FetchNext() {
  d_.pool->Submit([this] { Fetch(); }, [this](const absl::Status& s) { Done(s); });
}

void GetSession::Fetch() {
  const ChunkKey key = keys_[index_];
  TieredStore& store = *d_.store;
  const Tenancy& tenancy = *d_.tenancy;
  resp_.Clear();
  resp_.set_index(static_cast<uint32_t>(index_));
  resp_.set_header(true);
  record_bytes_ = sent_ = 0;
  GetInfo info;
  bool store_asked = false;  // a store Get counts its own hit or miss
  for (int attempt = 0; attempt < 3; ++attempt) {
    // 0: in no tier, or another tenant's (the store is not asked for its bytes).
    const uint64_t size = tenancy.VisibleSize(key, tenant_);
    if (size == 0) break;
    if (!slice_ && !req_->peek()) {
      // Tier 0 lends the record in place: it is sent from there without a copy.
      absl::StatusOr<RecordView> view = store.View(key, &info);
      if (view.ok()) {
        store_asked = true;  // View counted the hit
        if (!Lend(key, std::move(*view))) break;
        d_.metrics->AddBytesOut(false, record_bytes_);
        resp_.set_found(true);
        resp_.set_record_bytes(record_bytes_);
        resp_.set_tier(TierToProto(info.tier_kind));
        SendPart(true);
        return;
      }
    }
    if (progress_ && !req_->peek()) {
      // Tier 0 lends the record in place; it is copied into the slice piece by piece
      // while the client copies it out (SendProgressive).
      absl::StatusOr<RecordView> view = store.View(key, &info);
      if (view.ok()) {
        store_asked = true;                                              // View counted the hit
        if (!tenancy.RecordVisible(view->bytes(), key, tenant_)) break;  // as in Lend
        SendProgressive(std::move(*view), info);
        return;
      }
    }
    std::span<std::byte> dest;
    if (slice_) {
      const uint64_t at = (shm_next_ + 63) & ~uint64_t{63};
      if (at > shm_end_ || size > shm_end_ - at) {
        resp_.set_found(true);
        resp_.set_shm_overflow(true);
        resp_.set_record_bytes(size);
        resp_.mutable_shm()->set_region_id(req_->shm().region_id());
        Write(0);
        return;
      }
      dest = std::span<std::byte>(slice_->region->data() + at, size);
      shm_at_ = at;
    } else {
      buf_ = SharedBuf(TakeRecordBuffer(size), RecordBufferGiver());
      if (buf_ == nullptr) break;
      dest = std::span<std::byte>(buf_.get(), size);
    }
    auto n = store.Get(key, dest, &info, GetOptions{.peek = req_->peek()});
    store_asked = true;
    if (n.ok()) {
      // Defence in depth: the record's own namespace must be the caller's.
      if (!tenancy.RecordVisible(dest.first(*n), key, tenant_)) {
        std::memset(dest.data(), 0, dest.size());
        break;
      }
      record_bytes_ = *n;
      resp_.set_found(true);
      resp_.set_record_bytes(record_bytes_);
      resp_.set_tier(TierToProto(info.tier_kind));
      if (slice_) {
        auto* sl = resp_.mutable_shm();
        sl->set_region_id(req_->shm().region_id());
        sl->set_offset(shm_at_);
        sl->set_length(record_bytes_);
        shm_next_ = shm_at_ + record_bytes_;
        sent_ = record_bytes_;
        d_.metrics->AddBytesOut(true, record_bytes_);
        Write(0);
        return;
      }
      d_.metrics->AddBytesOut(false, record_bytes_);
      SendPart(true);
      return;
    }
    // OutOfRange: the record grew since its size was read; try again. Otherwise a miss
    // (or a record that failed verification: counted by the store).
    if (n.status().code() != absl::StatusCode::kOutOfRange) break;
  }
  Miss(store_asked);
}

void GetSession::Miss(bool store_asked) {
  if (!store_asked && !req_->peek()) d_.metrics->AddUnservedMiss();
  buf_.reset();
  record_bytes_ = sent_ = 0;
  resp_.set_found(false);
  resp_.set_tier(pb::TIER_NONE);
  Write(0);
}

void GetSession::SendProgressive(RecordView view, const GetInfo& info) {
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
  d_.metrics->AddBytesOut(true, size);
  pending_.store(2, std::memory_order_relaxed);
  write_ok_ = true;
  progressive_.store(true, std::memory_order_release);
  Write(0);
  CopyPublishing(view.bytes(), slice_->region->data() + at, at, *progress_);
  view.Release();
  Step();
}

void GetSession::Step() {
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
  FetchNext();
}

bool GetSession::Lend(const ChunkKey& key, RecordView view) {
  // Defence in depth, as for a copied record.
  if (!d_.tenancy->RecordVisible(view.bytes(), key, tenant_)) return false;
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

void GetSession::SendPart(bool first) {
  if (!first) resp_.Clear();
  Write(std::min<uint64_t>(part_, record_bytes_ - sent_));
}

void GetSession::Write(uint64_t n) {
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

void GetSession::Done(const absl::Status& s) {
  buf_.reset();
  if (lease_id_ != 0) d_.leases->Release(std::exchange(lease_id_, 0), keys_, tenant_);
  d_.metrics->RecordRpc(Rpc::kGet, static_cast<int>(s.code()),
                        std::chrono::steady_clock::now() - start_);
  Finish(ToGrpcStatus(s));
}

}  // namespace kvt::daemon
