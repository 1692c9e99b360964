#include "uring_file.h"

#include <liburing.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kvt::internal {

absl::Status ErrnoToStatus(int err, std::string_view context) {
  if (err < 0) err = -err;
  const std::string msg =
      absl::StrCat(std::string(context), ": ", std::strerror(err), " (errno ", err, ")");
  switch (err) {
    case 0:
      return absl::OkStatus();
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(msg);
    case ENOENT:
      return absl::NotFoundError(msg);
    case EAGAIN:
    case EINTR:
    case EBUSY:
      return absl::UnavailableError(msg);
    case EIO:
      return absl::DataLossError(msg);
    case EINVAL:
    case EBADF:
    case EFAULT:
      return absl::InternalError(msg);
    default:
      return absl::UnknownError(msg);
  }
}

std::string_view IoBackendName(IoBackend backend) {
  switch (backend) {
    case IoBackend::kIoUring:
      return "io_uring";
    case IoBackend::kPread:
      return "pread";
  }
  return "unknown";
}

void AlignedFree::operator()(std::byte* p) const { std::free(p); }

AlignedBuffer AllocateAligned(size_t bytes) {
  const size_t n = RoundUpToIoAlign(bytes == 0 ? 1 : bytes);
  void* p = std::aligned_alloc(kIoAlign, n);
  if (p == nullptr) return AlignedBuffer(nullptr);
  return AlignedBuffer(static_cast<std::byte*>(p));
}

struct IoRing::Piece {
  uint64_t rec_off = 0;   // offset within the transfer
  uint64_t disk_len = 0;  // bytes on disk (multiple of 4096)
  uint64_t mem_len = 0;   // bytes of the caller's span it covers (<= disk_len)
  uint64_t progress = 0;  // bytes transferred so far (short I/O is resumed)
  std::byte* io_buf = nullptr;
  int bounce = -1;
  bool done = false;
};

IoRing::IoRing(const IoRingOptions& options) : options_(options) {}

IoRing::~IoRing() {
  if (ring_) io_uring_queue_exit(ring_.get());
}

absl::StatusOr<std::unique_ptr<IoRing>> IoRing::Create(const IoRingOptions& options) {
  if (options.queue_depth == 0 || options.queue_depth > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("queue_depth = ", options.queue_depth, ", expected 1..256"));
  }
  if (options.io_bytes == 0 || options.io_bytes % kIoAlign != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("io_bytes = ", options.io_bytes, ", expected a positive multiple of 4096"));
  }
  std::unique_ptr<IoRing> r(new IoRing(options));
  if (!options.force_pread) {
    auto ring = std::make_unique<io_uring>();
    const int rc = io_uring_queue_init(options.queue_depth, ring.get(), 0);
    if (rc == 0) {
      r->ring_ = std::move(ring);
    } else {
      r->refusal_ = ErrnoToStatus(rc, "io_uring_queue_init");
    }
  }
  r->bounce_.reserve(options.queue_depth);
  for (uint32_t i = 0; i < options.queue_depth; ++i) {
    r->bounce_.push_back(AllocateAligned(options.io_bytes));
    if (!r->bounce_.back())
      return absl::ResourceExhaustedError("cannot allocate I/O bounce buffers");
  }
  return r;
}

absl::Status IoRing::WriteAt(int fd, uint64_t offset, std::span<const std::byte> src) {
  return Run(fd, offset, src.size(), /*write=*/true, src.data(), nullptr, 0, nullptr);
}

absl::Status IoRing::ReadAt(int fd, uint64_t offset, uint64_t len, std::span<std::byte> dst,
                            const InOrderCallback& in_order) {
  if (dst.size() < len) {
    return absl::InternalError(absl::StrCat("ReadAt: dst of ", dst.size(), " bytes < ", len));
  }
  return Run(fd, offset, len, /*write=*/false, nullptr, dst.data(), dst.size(), in_order);
}

absl::Status IoRing::Run(int fd, uint64_t offset, uint64_t len, bool write, const std::byte* wsrc,
                         std::byte* rdst, uint64_t /*dst_size*/, const InOrderCallback& in_order) {
  if (offset % kIoAlign != 0) {
    return absl::InternalError(absl::StrCat("unaligned file offset ", offset));
  }
  if (len == 0) return absl::OkStatus();
  const uint64_t padded = RoundUpToIoAlign(len);
  const uint64_t io = options_.io_bytes;
  const size_t n = (padded + io - 1) / io;
  std::vector<Piece> pieces(n);
  const std::byte* mem_base = write ? wsrc : rdst;
  for (size_t i = 0; i < n; ++i) {
    Piece& p = pieces[i];
    p.rec_off = i * io;
    p.disk_len = std::min<uint64_t>(io, padded - p.rec_off);
    p.mem_len = std::min<uint64_t>(p.disk_len, len - p.rec_off);
    const bool aligned = reinterpret_cast<uintptr_t>(mem_base + p.rec_off) % kIoAlign == 0 &&
                         p.mem_len == p.disk_len;
    if (aligned) p.io_buf = const_cast<std::byte*>(mem_base) + p.rec_off;
  }

  std::vector<int> free_bounce;
  for (int i = static_cast<int>(bounce_.size()) - 1; i >= 0; --i) free_bounce.push_back(i);
  std::deque<std::pair<size_t, int>> sync_done;  // pread backend: (piece, res)
  absl::Status first_error;
  size_t next_submit = 0, next_cb = 0;
  uint32_t inflight = 0, queued = 0;

  // Hands the completed prefix to `in_order`. Called once the queue has been refilled,
  // so hashing overlaps a full queue of I/O instead of delaying the next submission.
  auto run_in_order = [&] {
    if (write || !in_order || !first_error.ok()) return;
    while (next_cb < n && pieces[next_cb].done) {
      in_order(std::span<const std::byte>(rdst + pieces[next_cb].rec_off, pieces[next_cb].mem_len));
      ++next_cb;
    }
  };

  auto issue = [&](size_t idx) -> absl::Status {
    Piece& p = pieces[idx];
    std::byte* buf = p.io_buf + p.progress;
    const uint64_t left = p.disk_len - p.progress;
    const uint64_t off = offset + p.rec_off + p.progress;
    if (ring_) {
      io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
      if (sqe == nullptr) {
        const int rc = io_uring_submit(ring_.get());
        if (rc < 0) return ErrnoToStatus(rc, "io_uring_submit");
        queued = 0;
        sqe = io_uring_get_sqe(ring_.get());
        if (sqe == nullptr) return absl::InternalError("io_uring: no free submission entry");
      }
      if (write) {
        io_uring_prep_write(sqe, fd, buf, static_cast<unsigned>(left), off);
      } else {
        io_uring_prep_read(sqe, fd, buf, static_cast<unsigned>(left), off);
      }
      io_uring_sqe_set_data64(sqe, idx);
      ++queued;
    } else {
      const ssize_t rc = write ? ::pwrite(fd, buf, left, static_cast<off_t>(off))
                               : ::pread(fd, buf, left, static_cast<off_t>(off));
      sync_done.emplace_back(idx, rc < 0 ? -errno : static_cast<int>(rc));
    }
    ++inflight;
    return absl::OkStatus();
  };

  while (true) {
    // Fill the queue.
    while (first_error.ok() && next_submit < n && inflight < options_.queue_depth) {
      Piece& p = pieces[next_submit];
      if (p.io_buf == nullptr) {
        if (free_bounce.empty()) break;
        p.bounce = free_bounce.back();
        free_bounce.pop_back();
        p.io_buf = bounce_[p.bounce].get();
        if (write) {
          std::memcpy(p.io_buf, wsrc + p.rec_off, p.mem_len);
          bounce_bytes_ += p.mem_len;
          if (p.mem_len < p.disk_len) std::memset(p.io_buf + p.mem_len, 0, p.disk_len - p.mem_len);
        }
      }
      absl::Status s = issue(next_submit);
      if (!s.ok()) {
        first_error = s;
        break;
      }
      ++next_submit;
    }
    if (inflight == 0) break;
    if (ring_ && queued > 0) {
      const int rc = io_uring_submit(ring_.get());
      if (rc < 0) {
        // Nothing from this batch reached the kernel; forget it.
        if (first_error.ok()) first_error = ErrnoToStatus(rc, "io_uring_submit");
        inflight -= queued;
        queued = 0;
        if (inflight == 0) break;
      } else {
        queued = 0;
      }
    }
    run_in_order();
    // Reap one completion.
    size_t idx;
    int res;
    if (ring_) {
      io_uring_cqe* cqe = nullptr;
      int rc;
      do {
        rc = io_uring_wait_cqe(ring_.get(), &cqe);
      } while (rc == -EINTR);
      if (rc < 0) {
        // The ring is unusable; in-flight pieces cannot be accounted for.
        return ErrnoToStatus(rc, "io_uring_wait_cqe");
      }
      idx = static_cast<size_t>(io_uring_cqe_get_data64(cqe));
      res = cqe->res;
      io_uring_cqe_seen(ring_.get(), cqe);
    } else {
      idx = sync_done.front().first;
      res = sync_done.front().second;
      sync_done.pop_front();
    }
    --inflight;
    Piece& p = pieces[idx];
    bool finished = false;
    if (res == -EINTR || res == -EAGAIN) {
      if (first_error.ok()) {
        if (absl::Status s = issue(idx); !s.ok()) first_error = s;
      }
    } else if (res < 0) {
      if (first_error.ok()) {
        first_error = ErrnoToStatus(res, absl::StrCat(write ? "write" : "read", " at offset ",
                                                      offset + p.rec_off + p.progress));
      }
      finished = true;
    } else if (res == 0) {
      if (first_error.ok()) {
        first_error =
            write ? absl::InternalError("write returned 0 bytes")
                  : absl::OutOfRangeError(absl::StrCat("short read: file ends before offset ",
                                                       offset + p.rec_off + p.disk_len));
      }
      finished = true;
    } else {
      p.progress += static_cast<uint64_t>(res);
      if (p.progress < p.disk_len) {
        if (first_error.ok()) {
          if (absl::Status s = issue(idx); !s.ok()) first_error = s;
        }
      } else {
        finished = true;
        p.done = true;
      }
    }
    if (finished) {
      if (p.bounce >= 0) {
        if (!write && p.done && first_error.ok()) {
          std::memcpy(rdst + p.rec_off, p.io_buf, p.mem_len);
          bounce_bytes_ += p.mem_len;
        }
        free_bounce.push_back(p.bounce);
        p.bounce = -1;
        p.io_buf = nullptr;
      }
    }
  }
  run_in_order();
  return first_error;
}

}  // namespace kvt::internal
