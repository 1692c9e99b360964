#include "put_session.h"

#include <cstring>

#include "absl/strings/str_format.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/remote_client.h"
#include "wire.h"

namespace kvt::daemon {

namespace pb = ::kvtier::v1;

PutSession::PutSession(const StreamDeps& deps, grpc::CallbackServerContext* ctx,
                       pb::PutResponse* resp)
    : d_(deps), ctx_(ctx), resp_(resp), start_(std::chrono::steady_clock::now()) {
  if (absl::Status s = d_.gate->Enter(); !s.ok()) {
    Done(s);
    return;
  }
  auto tenant = d_.auth->Authenticate(*ctx);
  if (!tenant.ok()) {
    Done(tenant.status());
    return;
  }
  tenant_ = *tenant;
  StartRead(&req_);
}

void PutSession::OnReadDone(bool ok) {
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

void PutSession::OnDone() {
  Release();
  d_.gate->Done();
  delete this;
}

absl::Status PutSession::StartShmRecord(const pb::ShmSlice& sl) {
  if (!req_.data().empty())
    return absl::InvalidArgumentError("data: must be empty when shm is set");
  if (sl.length() != req_.record_bytes())
    return absl::InvalidArgumentError(absl::StrFormat("shm.length: %d, expected record_bytes (%d)",
                                                      sl.length(), req_.record_bytes()));
  absl::StatusOr<ShmSliceRef> slice = d_.shm->Resolve(sl, tenant_);
  if (!slice.ok()) return slice.status();
  slice_ = std::move(*slice);
  // Progressive: the client writes the record after this message; the worker copies
  // each piece as it is published (RecordWriter::StoreFromShm).
  if (slice_->progressive) progress_.emplace(slice_->progress_block());
  // The record is copied into daemon memory (tier 0) before it is checked: count it.
  reserved_ = sl.length();
  if (absl::Status s = d_.gate->Reserve(reserved_); !s.ok()) return s;
  expected_ = received_ = sl.length();
  return absl::OkStatus();
}

absl::Status PutSession::Consume() {
  if (absl::Status s = CheckVersion(req_.protocol_version()); !s.ok()) return s;
  if (req_.record_bytes() != 0) {
    if (expected_ > 0)
      return absl::InvalidArgumentError(absl::StrFormat(
          "record_bytes: a new record started after %d of %d bytes of the previous one", received_,
          expected_));
    const uint64_t max = d_.config->max_record_bytes;
    if (req_.record_bytes() < kChunkHeaderBytes || req_.record_bytes() > max)
      return absl::InvalidArgumentError(absl::StrFormat(
          "record_bytes: %d, expected %d..%d", req_.record_bytes(), kChunkHeaderBytes, max));
    if (req_.has_shm()) return StartShmRecord(req_.shm());
    reserved_ = req_.record_bytes();
    if (absl::Status s = d_.gate->Reserve(reserved_); !s.ok()) return s;
    buf_ = OwnedRecordBuffer(TakeRecordBuffer(req_.record_bytes()));
    if (buf_ == nullptr)
      return absl::ResourceExhaustedError("record_bytes: cannot allocate the record buffer");
    expected_ = req_.record_bytes();
    received_ = 0;
  } else if (req_.has_shm()) {
    return absl::InvalidArgumentError("shm: set without record_bytes");
  }
  if (expected_ == 0)
    return absl::InvalidArgumentError("record_bytes: data sent before a record was started");
  if (req_.data().empty()) return absl::OkStatus();
  if (req_.data().size() > expected_ - received_)
    return absl::InvalidArgumentError(absl::StrFormat("data: %d bytes more than record_bytes (%d)",
                                                      received_ + req_.data().size() - expected_,
                                                      expected_));
  std::memcpy(buf_.get() + received_, req_.data().data(), req_.data().size());
  received_ += req_.data().size();
  return absl::OkStatus();
}

void PutSession::Submit() {
  d_.pool->Submit(
      [this] {
        const bool shm = slice_.has_value();
        absl::StatusOr<ChunkKey> key =
            shm ? d_.writer->StoreFromShm(std::span<const std::byte>(slice_->data(), expected_),
                                          tenant_, progress_ ? &*progress_ : nullptr,
                                          slice_->offset)
                : d_.writer->Store(std::span<const std::byte>(buf_.get(), expected_), tenant_);
        if (key.ok()) {
          d_.metrics->AddBytesIn(shm, expected_);
          resp_->set_records_stored(resp_->records_stored() + 1);
          HashToProto(*key, resp_->add_keys());
        }
        Release();
        if (!key.ok()) {
          Done(key.status());
          return;
        }
        StartRead(&req_);
      },
      [this](const absl::Status& s) { Done(s); });
}

void PutSession::Release() {
  buf_.reset();
  progress_.reset();  // before the region it points into
  slice_.reset();
  if (reserved_ > 0) d_.gate->Unreserve(reserved_);
  reserved_ = 0;
  expected_ = received_ = 0;
}

void PutSession::Done(const absl::Status& s) {
  Release();
  d_.metrics->RecordRpc(Rpc::kPut, static_cast<int>(s.code()),
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

}  // namespace kvt::daemon
