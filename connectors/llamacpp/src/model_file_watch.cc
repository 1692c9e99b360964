#include "llamacpp/model_file_watch.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "llamacpp/llama_engine.h"  // FingerprintModelFile

namespace kvt::llamacpp {
namespace {

absl::StatusOr<ModelFileStamp> StampOf(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return absl::InternalError(
        absl::StrFormat("fstat of model file '%s': %s", path, std::strerror(errno)));
  }
  ModelFileStamp m;
  m.dev = static_cast<uint64_t>(st.st_dev);
  m.ino = static_cast<uint64_t>(st.st_ino);
  m.size = static_cast<uint64_t>(st.st_size);
  m.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  m.ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
  return m;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelFileWatch>> ModelFileWatch::Open(const std::string& path) {
  std::unique_ptr<ModelFileWatch> w(new ModelFileWatch());
  w->path_ = path;
  w->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (w->fd_ < 0) {
    return absl::NotFoundError(
        absl::StrFormat("cannot open model file '%s': %s", path, std::strerror(errno)));
  }
  absl::StatusOr<ModelFileStamp> stamp = StampOf(w->fd_, path);
  if (!stamp.ok()) return stamp.status();
  w->stamp_ = *stamp;
  absl::StatusOr<std::string> fp = FingerprintModelFile(w->FdPath());
  if (!fp.ok()) return fp.status();
  w->opened_fingerprint_ = *fp;
  w->fingerprint_ = *fp;
  return w;
}

ModelFileWatch::~ModelFileWatch() {
  if (fd_ >= 0) ::close(fd_);
}

std::string ModelFileWatch::FdPath() const { return absl::StrCat("/proc/self/fd/", fd_); }

absl::StatusOr<bool> ModelFileWatch::StampMoved() const {
  absl::StatusOr<ModelFileStamp> now = StampOf(fd_, path_);
  if (!now.ok()) return now.status();
  return !(*now == stamp_);
}

absl::StatusOr<bool> ModelFileWatch::Changed() {
  if (changed_) return true;
  absl::StatusOr<ModelFileStamp> now = StampOf(fd_, path_);
  if (!now.ok()) return now.status();
  if (*now == stamp_) return false;
  // Size, mtime or ctime moved: the bytes llama.cpp maps may have changed. Hash them.
  absl::StatusOr<std::string> fp = FingerprintModelFile(FdPath());
  if (!fp.ok()) return fp.status();
  stamp_ = *now;
  if (*fp == fingerprint_) return false;  // touched, same content
  fingerprint_ = *fp;
  changed_ = true;
  return true;
}

}  // namespace kvt::llamacpp
