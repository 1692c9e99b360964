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
//     blob = llama_state_seq_get_data(seq_id)            // exactly `front` cells
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

#include <cstdint>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "connectors/kv_connector.h"
#include "llamacpp/seq_state.h"

namespace kvt::llamacpp {

// One back load. Start, then Wait (once the front is computed), then Join. Not
// thread-safe: one owner calls Wait and Join; the loader thread only touches the
// connector (thread-safe) and its own blob until Wait returns.
class BackLoader {
 public:
  struct Result {
    // Tokens [front_tokens, loaded_end) were delivered verified (loaded_end ==
    // front_tokens when none was); every token after loaded_end must be computed.
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
  ~BackLoader();  // waits for the thread
  BackLoader(const BackLoader&) = delete;
  BackLoader& operator=(const BackLoader&) = delete;

  // Blocks until the loader thread is done; idempotent.
  const Result& Wait();

  // After Wait: the state of tokens [0, loaded_end), tokens [0, front_tokens) taken from
  // `front_blob` (llama_state_seq_get_data of the sequence holding exactly the computed
  // front), the rest from the loaded chunks. DataLoss / FailedPrecondition from
  // ParseSeqState for a blob that does not match the spec; FailedPrecondition when the
  // blob holds other than front_tokens cells, when called before Wait, when called twice, or when
  // nothing was loaded (loaded_end == front_tokens: the engine already holds the whole state).
  absl::StatusOr<std::vector<std::byte>> Join(std::span<const std::byte> front_blob);

  uint64_t front_tokens() const { return front_; }
  uint64_t end_tokens() const { return end_; }

 private:
  BackLoader(KVConnector& connector, std::span<const TokenId> prompt, uint64_t front, uint64_t end,
             const SeqStateSpec& spec, SeqStateBuilder builder);
  void Load();

  KVConnector& connector_;
  SeqStateSpec spec_;
  std::span<const TokenId> prompt_;
  uint64_t front_, end_;
  SeqStateBuilder builder_;
  Result result_;
  bool waited_ = false;
  bool joined_ = false;
  std::thread thread_;
};

}  // namespace kvt::llamacpp

#endif  // LLAMACPP_OVERLAP_LOAD_H_
