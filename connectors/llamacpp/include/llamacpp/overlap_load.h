// Load while computing (Cake, ICML'25): while the engine prefills the front of a cached
// prefix, a BackLoader fetches the later chunks from kvtier on its own thread into a
// state blob; Join then copies the computed front (read back from the engine) into the
// same blob, which llama_state_seq_set_data restores as one sequence. The split comes
// from CostModel::PlanOverlap (docs/cost-model.md); LlamaKvAdapter::Run uses it, and any
// other llama.cpp driver (e.g. a server slot) can do the same three steps:
//
//   auto loader = BackLoader::Start(connector, prompt, front, end, spec, seq_id);
//   ...decode prompt[0, front) on seq_id in n_batch batches from position 0...
//   const BackLoader::Result& got = loader->Wait();
//   if (got.loaded_end > front) {
//     blob = llama_state_seq_get_data(seq_id)            // the `front` computed cells
//     joined = loader->Join(blob);                        // [0, got.loaded_end)
//     llama_state_seq_set_data(joined, seq_id)
//   }
//   ...decode prompt[got.loaded_end, n) from position got.loaded_end...
//
// The front must be computed in the same batches as a recompute would (positions 0..
// front-1, batches of n_batch from 0), so its KV is the bytes a full prefill produces:
// the joined state is then byte-identical to a prefill of [0, loaded_end).
#ifndef LLAMACPP_OVERLAP_LOAD_H_
#define LLAMACPP_OVERLAP_LOAD_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "connectors/kv_connector.h"
#include "llamacpp/seq_state.h"

namespace kvt::llamacpp {

// Two ways to split:
//  * Start: a fixed front (the planned split): loads chunks [front, end) in order.
//  * StartFromEnd (meet in the middle): loads chunks end-1, end-2, ... while the engine
//    computes 0, 1, 2, ... and reports its progress with SetComputed; each side stops
//    where the other has been, so the split lands where compute and load actually
//    meet, whatever the estimates said:
//      auto loader = BackLoader::StartFromEnd(connector, prompt, end, spec, seq_id);
//      for (c = 0; c < end && c < loader->loaded_begin(); c += step) {
//        ...decode prompt[c, c + step)...; loader->SetComputed(c + step);
//      }
//      then Wait / Join / set_data as above (Join takes a front of >= loaded_begin cells).
//
// One load. Start, then Wait (once the front is computed), then Join. Not thread-safe
// except SetComputed / loaded_begin: one owner calls Wait and Join; the loader thread
// only touches the connector (thread-safe), its own blob and two atomics.
class BackLoader {
 public:
  struct Result {
    // Tokens [loaded_begin, loaded_end) were delivered verified (empty when equal);
    // every token after loaded_end must be computed. Start: loaded_begin ==
    // front_tokens. StartFromEnd: loaded_end == end_tokens (or == loaded_begin).
    uint64_t loaded_begin = 0;
    uint64_t loaded_end = 0;
    std::vector<size_t> failed_chunks;  // as ConnectorLoadResult::failed_chunks
    absl::Status first_error;           // why the first failed chunk failed (or OK)
    double load_s = 0;                  // wall time of the loader (LoadPayloads + copies)
  };

  // Starts a thread that calls connector.LoadPayloads(prompt, end_tokens, ...,
  // skip_tokens = front_tokens) and scatters each chunk into a blob of end_tokens cells
  // for `seq_id`. `connector` and `prompt` are borrowed until Wait returns (or the
  // loader is destroyed). InvalidArgument unless 0 < front_tokens < end_tokens <=
  // prompt.size(), both multiples of connector.chunk_tokens(), and spec.payload_bytes_
  // per_token() * chunk_tokens == connector.chunk_payload_bytes(); spec errors.
  static absl::StatusOr<std::unique_ptr<BackLoader>> Start(
      KVConnector& connector, std::span<const TokenId> prompt, uint64_t front_tokens,
      uint64_t end_tokens, const SeqStateSpec& spec, int32_t seq_id = 0);
  // Meet in the middle (see above): one LoadPayloads per chunk, from the last chunk
  // down, stopping before a chunk the engine reported computed or at the first chunk
  // that cannot be delivered. InvalidArgument unless 0 < end_tokens <= prompt.size() is
  // a multiple of the chunk size; the spec check as Start.
  static absl::StatusOr<std::unique_ptr<BackLoader>> StartFromEnd(KVConnector& connector,
                                                                  std::span<const TokenId> prompt,
                                                                  uint64_t end_tokens,
                                                                  const SeqStateSpec& spec,
                                                                  int32_t seq_id = 0);
  ~BackLoader();  // waits for the thread

  // Engine side (StartFromEnd): tokens [0, tokens) are computed. Thread-safe.
  void SetComputed(uint64_t tokens) { computed_.store(tokens, std::memory_order_release); }
  // Loaded so far: tokens [loaded_begin(), end) (end when none; Start: front_tokens once
  // the load finished, else end). Thread-safe.
  uint64_t loaded_begin() const { return lowest_.load(std::memory_order_acquire); }
  // The loader thread has finished (loaded_begin() is final; Wait will not block long).
  // Thread-safe.
  bool done() const { return done_.load(std::memory_order_acquire); }
  BackLoader(const BackLoader&) = delete;
  BackLoader& operator=(const BackLoader&) = delete;

  // Blocks until the loader thread is done; idempotent.
  const Result& Wait();

  // After Wait: the state of tokens [0, loaded_end): the c tokens of `front_blob`
  // (llama_state_seq_get_data of the sequence holding the computed front [0, c)), the
  // rest from the loaded chunks. REQUIRES loaded_begin <= c < loaded_end. DataLoss /
  // FailedPrecondition from ParseSeqState for a blob that does not match the spec;
  // FailedPrecondition when c leaves a gap before loaded_begin or covers everything
  // loaded, when called before Wait, or twice.
  absl::StatusOr<std::vector<std::byte>> Join(std::span<const std::byte> front_blob);

  uint64_t front_tokens() const { return front_; }
  uint64_t end_tokens() const { return end_; }

 private:
  BackLoader(KVConnector& connector, std::span<const TokenId> prompt, uint64_t front, uint64_t end,
             const SeqStateSpec& spec, SeqStateBuilder builder);
  static absl::StatusOr<std::unique_ptr<BackLoader>> Make(KVConnector& connector,
                                                          std::span<const TokenId> prompt,
                                                          uint64_t front, uint64_t end,
                                                          const SeqStateSpec& spec, int32_t seq_id,
                                                          bool from_end);
  void Load();
  void LoadFromEnd();

  KVConnector& connector_;
  SeqStateSpec spec_;
  std::span<const TokenId> prompt_;
  uint64_t front_, end_;
  SeqStateBuilder builder_;
  Result result_;
  bool waited_ = false;
  bool joined_ = false;
  std::atomic<uint64_t> computed_{0};  // engine progress (StartFromEnd)
  std::atomic<uint64_t> lowest_;       // first loaded token (end_ when none yet)
  std::atomic<bool> done_{false};      // the loader thread has finished
  std::thread thread_;
};

}  // namespace kvt::llamacpp

#endif  // LLAMACPP_OVERLAP_LOAD_H_
