// TailRecords: the tokens of a prompt after its last complete chunk, stored as one more
// record so that a repeated prompt is restored like llama-server's own RAM cache restores
// it (everything but the last token), not only up to the last chunk boundary.
//
// For a prompt of n tokens and chunks of C tokens, the tail is tokens [T, n - 1) with
// T = floor((n - 1) / C) * C, i.e. L = n - 1 - T tokens, 0 <= L < C (L == 0: no tail).
// Its record is an ordinary chunk record (docs/chunk-format.md) in the prompt's namespace:
//   key       = ChainChunkKey(parent, tokens[T, n - 1))   (kvstore/chunk_key.h)
//   parent    = the key of chunk T / C - 1 of the prompt (RootKey(ns) when T == 0)
//   token_count = L, payload = the KV of those L tokens in codec order.
// (That is TailSpan's default; recurrent and hybrid models: see below.)
// The token count is hashed into every key, and a full chunk always has C tokens, so a
// tail key never equals a full chunk's key; it depends on every token before it (the
// chained parent) and on its own tokens, so it is returned only for the same tokens.
// Records are written through the store's one write-back queue (TieredStore::Write,
// async): the caller copies the payload out, the store's thread encodes and puts it (a
// slow tier never blocks the caller), at most max_pending_bytes queued (more are dropped
// and counted).
//
// Recurrent and hybrid models (TailSpan::ForSnapshots; docs/models.md "Boundary
// snapshots"): the tail is tokens [T, n - 4) with T = the last chunk boundary at or
// before n - min(n_batch, 4 + n_ubatch) (the last chunk such a model stores), and its
// payload is the attention rows of those tokens, then the recurrent state at n - 4 (where
// llama-server's last prompt batch begins), then zeros: [rows][snapshot][zeros], as a
// chunk's (docs/chunk-format.md). Such a tail has C to C + n_ubatch - 1 tokens when
// n_batch >= 4 + n_ubatch; one of exactly C tokens has a chunk's key and the very bytes
// that chunk's record would have (same tokens, same ubatch, same state before it).
#ifndef KVTIER_SERVER_TAIL_RECORDS_H_
#define KVTIER_SERVER_TAIL_RECORDS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvstore/chunk_key.h"
#include "kvstore/tiered_store.h"

namespace kvt::llamacpp {

struct TailStats {
  uint64_t queued = 0;      // records handed to the store's write-back queue
  uint64_t put = 0;         // records that reached the store
  uint64_t skipped = 0;     // the store held (or was writing) the key already
  uint64_t dropped = 0;     // the store's queue over max_pending_bytes
  uint64_t put_errors = 0;  // encode or Put failed (logged)
  uint64_t hits = 0;        // Fetch returned a record
  uint64_t misses = 0;      // Fetch found none, or a bad one
};

// Where a prompt's tail lies (token counts).
struct TailSpan {
  // Tokens at the end of the prompt that are always computed: 1 (KV models: the last
  // token), or min(n_batch, 4) (recurrent/hybrid: llama-server's last prompt batch).
  uint64_t computed = 1;
  // 0: the tail starts at the last chunk boundary before its end. Else (recurrent and
  // hybrid) at the last chunk boundary at or before n - split.
  uint64_t split = 0;
  // A shorter tail is none (0): a hybrid tail's payload must hold the snapshot too.
  uint64_t min_tokens = 1;

  // A recurrent or hybrid model on a server with these batch sizes, whose payloads have
  // `rows_per_token` bytes of attention rows (0: recurrent only) and `snapshot_bytes` of
  // recurrent state in `bytes_per_token` bytes per token (the chunk layout's).
  static TailSpan ForSnapshots(uint32_t n_batch, uint32_t n_ubatch, uint64_t rows_per_token,
                               uint64_t snapshot_bytes, uint64_t bytes_per_token);
};

// Thread-safe.
class TailRecords {
 public:
  // REQUIRES: store != nullptr, chunk_tokens == the namespace's chunk size, layout valid.
  TailRecords(std::shared_ptr<TieredStore> store, NamespaceId ns, KvLayout layout,
              uint32_t chunk_tokens, uint64_t max_pending_bytes = 256ull << 20, TailSpan span = {});

  // End of the tail of a prompt of n >= 1 tokens: n - span.computed (0 if n is shorter).
  uint64_t TailEnd(uint64_t n) const { return n > span_.computed ? n - span_.computed : 0; }
  // T for a prompt of n >= 1 tokens: floor(TailEnd(n) / C) * C with the default
  // span; the last chunk boundary at or before n - split with a snapshot span.
  uint64_t TailStart(uint64_t n) const;
  // L for a prompt of n >= 1 tokens: TailEnd(n) - TailStart(n), or 0 (no tail) when that
  // is under span.min_tokens.
  uint64_t TailTokens(uint64_t n) const;
  // The tail key of `prompt` (see the file comment). REQUIRES: TailTokens(size) > 0.
  ChunkKey TailKey(std::span<const TokenId> prompt) const;

  // Queues the tail record of `prompt` (payload of TailTokens(size) tokens, written by
  // `fill` in codec order on this thread; the header is encoded on the store's thread).
  // A tail the store holds already is skipped without calling fill. InvalidArgument
  // when the prompt has no tail; the fill's error is returned. A full queue drops the
  // record (OK, counted).
  absl::Status Queue(std::span<const TokenId> prompt,
                     const std::function<absl::Status(std::span<std::byte>)>& fill);

  // The verified payload of `prompt`'s tail record. NotFound when no tier holds it;
  // DataLoss / FailedPrecondition for a record that fails verification (never returned).
  absl::StatusOr<std::vector<std::byte>> Fetch(std::span<const TokenId> prompt);

  // Waits until every queued record was put (or failed): the store's Flush.
  void Flush();
  TailStats stats() const;

 private:
  ChunkKey Parent(std::span<const TokenId> prompt) const;  // key of chunk T / C - 1, or root

  // Shared with the done callbacks of queued records, which may run after this is gone.
  struct Counters {
    std::atomic<uint64_t> queued{0}, put{0}, skipped{0}, dropped{0}, put_errors{0}, hits{0},
        misses{0};
  };

  const std::shared_ptr<TieredStore> store_;
  const NamespaceId ns_;
  const KvLayout layout_;
  const uint32_t chunk_tokens_;
  const uint64_t max_pending_bytes_;
  const TailSpan span_;
  const std::shared_ptr<Counters> counters_ = std::make_shared<Counters>();
};

}  // namespace kvt::llamacpp

#endif  // KVTIER_SERVER_TAIL_RECORDS_H_
