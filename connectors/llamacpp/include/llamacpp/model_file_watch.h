// ModelFileWatch: does a GGUF file still hold the bytes a kvtier namespace was made from?
//
// A namespace names the model by the fingerprint of its file (FingerprintModelFile). When
// the file is overwritten in place under a running engine (same path, even same inode and
// size: `dd conv=notrunc`, `cp` over it), llama.cpp's shared mapping serves the new
// weights while the namespace still names the old ones: loading the old chunks gives wrong
// KV, and storing under that namespace poisons the cache for every engine that runs the
// old model (issue 11 failure 2, issue 21 item 1). Every engine path that loads or stores
// asks Changed() first (LlamaEngine::CheckModelFile, kvtier-llama-server's hooks).
//
// The watch keeps the file open for its life, so it follows the inode the engine mapped:
// an in-place overwrite is a change; a replace-by-rename of the path is not (the engine
// still runs the old inode's weights).
#ifndef LLAMACPP_MODEL_FILE_WATCH_H_
#define LLAMACPP_MODEL_FILE_WATCH_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace kvt::llamacpp {

// What fstat says about the model file's inode; any change triggers a re-fingerprint.
struct ModelFileStamp {
  uint64_t dev = 0, ino = 0, size = 0;
  int64_t mtime_ns = 0, ctime_ns = 0;
  bool operator==(const ModelFileStamp&) const = default;
};

// Thread-compatible: Changed() updates the watch; callers serialize it.
class ModelFileWatch {
 public:
  // Opens `path`, stamps it (fstat) and fingerprints it (reads the whole file up to 4 GiB,
  // see FingerprintModelFile). NotFound when it cannot be opened; Internal on I/O errors.
  static absl::StatusOr<std::unique_ptr<ModelFileWatch>> Open(const std::string& path);
  ~ModelFileWatch();
  ModelFileWatch(const ModelFileWatch&) = delete;
  ModelFileWatch& operator=(const ModelFileWatch&) = delete;

  const std::string& path() const { return path_; }
  // The fingerprint taken by Open.
  const std::string& opened_fingerprint() const { return opened_fingerprint_; }
  // The fingerprint of the bytes now: opened_fingerprint() until Changed() saw a change.
  const std::string& fingerprint() const { return fingerprint_; }

  // Whether the file now holds other bytes than at Open. Cheap when nothing moved (one
  // fstat, about a microsecond); when size, mtime or ctime moved, re-fingerprints the file
  // (reads it) and, if the fingerprint differs, updates fingerprint() and stays true from
  // then on. A touch that keeps the bytes is not a change. Internal/NotFound on I/O
  // errors (callers treat an error as "do not use kvtier").
  absl::StatusOr<bool> Changed();
  // Whether the stamp moved since Open or the last Changed() (one fstat, no hashing): a
  // loader calls it after reading the model to learn that the file moved meanwhile.
  absl::StatusOr<bool> StampMoved() const;

 private:
  ModelFileWatch() = default;
  std::string FdPath() const;  // /proc/self/fd/<fd_>

  std::string path_;
  int fd_ = -1;
  ModelFileStamp stamp_;
  std::string opened_fingerprint_;
  std::string fingerprint_;
  bool changed_ = false;
};

}  // namespace kvt::llamacpp

#endif  // LLAMACPP_MODEL_FILE_WATCH_H_
