#include "llamacpp/overlap_load.h"

#include <chrono>

#include "absl/strings/str_format.h"
#include "spdlog/spdlog.h"

namespace kvt::llamacpp {

absl::StatusOr<std::unique_ptr<BackLoader>> BackLoader::Start(
    KVConnector& connector, std::span<const TokenId> prompt, uint64_t front_tokens,
    uint64_t end_tokens, const SeqStateSpec& spec, int32_t seq_id) {
  const uint32_t chunk = connector.chunk_tokens();
  if (chunk == 0 || front_tokens == 0 || front_tokens >= end_tokens || end_tokens > prompt.size() ||
      front_tokens % chunk != 0 || end_tokens % chunk != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "BackLoader: need 0 < front_tokens (%d) < end_tokens (%d) <= prompt tokens (%d), both "
        "multiples of the chunk size %d",
        front_tokens, end_tokens, prompt.size(), chunk));
  }
  return Make(connector, prompt, front_tokens, end_tokens, spec, seq_id, /*from_end=*/false);
}

absl::StatusOr<std::unique_ptr<BackLoader>> BackLoader::StartFromEnd(
    KVConnector& connector, std::span<const TokenId> prompt, uint64_t end_tokens,
    const SeqStateSpec& spec, int32_t seq_id) {
  const uint32_t chunk = connector.chunk_tokens();
  if (chunk == 0 || end_tokens == 0 || end_tokens > prompt.size() || end_tokens % chunk != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "BackLoader: need 0 < end_tokens (%d) <= prompt tokens (%d), a multiple of the chunk "
        "size %d",
        end_tokens, prompt.size(), chunk));
  }
  return Make(connector, prompt, 0, end_tokens, spec, seq_id, /*from_end=*/true);
}

absl::StatusOr<std::unique_ptr<BackLoader>> BackLoader::Make(KVConnector& connector,
                                                             std::span<const TokenId> prompt,
                                                             uint64_t front, uint64_t end,
                                                             const SeqStateSpec& spec,
                                                             int32_t seq_id, bool from_end) {
  const uint32_t chunk = connector.chunk_tokens();
  if (spec.payload_bytes_per_token() * chunk != connector.chunk_payload_bytes()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "BackLoader: the state spec gives %d payload bytes per chunk, the connector %d",
        spec.payload_bytes_per_token() * chunk, connector.chunk_payload_bytes()));
  }
  if (end > UINT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrFormat("BackLoader: end_tokens %d exceeds 2^32 - 1", end));
  }
  absl::StatusOr<SeqStateBuilder> builder =
      SeqStateBuilder::Create(spec, static_cast<uint32_t>(end), seq_id, {}, prompt);
  if (!builder.ok()) return builder.status();
  std::unique_ptr<BackLoader> loader(
      new BackLoader(connector, prompt, front, end, spec, std::move(*builder)));
  BackLoader* p = loader.get();
  loader->thread_ = std::thread([p, from_end] {
    if (from_end) {
      p->LoadFromEnd();
    } else {
      p->Load();
    }
    p->done_.store(true, std::memory_order_release);
  });
  return loader;
}

BackLoader::BackLoader(KVConnector& connector, std::span<const TokenId> prompt, uint64_t front,
                       uint64_t end, const SeqStateSpec& spec, SeqStateBuilder builder)
    : connector_(connector),
      spec_(spec),
      prompt_(prompt),
      front_(front),
      end_(end),
      builder_(std::move(builder)),
      lowest_(end) {}

BackLoader::~BackLoader() { Wait(); }

void BackLoader::Load() {
  const auto t0 = std::chrono::steady_clock::now();
  const uint32_t chunk = connector_.chunk_tokens();
  const uint64_t chunk_bytes = connector_.chunk_payload_bytes();
  absl::StatusOr<ConnectorLoadResult> load = connector_.LoadPayloads(
      prompt_, end_,
      [&](size_t chunk_index, std::span<const std::byte> payload) -> absl::Status {
        if (payload.size() != chunk_bytes) {
          return absl::DataLossError(absl::StrFormat("chunk %d payload is %d bytes, expected %d",
                                                     chunk_index, payload.size(), chunk_bytes));
        }
        return builder_.PutChunk(static_cast<uint32_t>(chunk_index * chunk), chunk, payload);
      },
      /*skip_tokens=*/front_);
  result_.loaded_begin = front_;
  result_.loaded_end = front_;
  if (!load.ok()) {
    result_.first_error = load.status();
    spdlog::warn("kvtier llama.cpp: back load of tokens [{}, {}) failed, computing them: {}",
                 front_, end_, load.status().ToString());
  } else {
    uint64_t got = std::min<uint64_t>(load->loaded_tokens, end_);
    got -= got % chunk;
    result_.loaded_end = std::max(got, front_);
    result_.failed_chunks = std::move(load->failed_chunks);
    result_.first_error = load->first_error;
  }
  if (result_.loaded_end > front_) lowest_.store(front_, std::memory_order_release);
  result_.load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void BackLoader::LoadFromEnd() {
  const auto t0 = std::chrono::steady_clock::now();
  const uint32_t chunk = connector_.chunk_tokens();
  const uint64_t chunk_bytes = connector_.chunk_payload_bytes();
  auto consume = [&](size_t chunk_index, std::span<const std::byte> payload) -> absl::Status {
    if (payload.size() != chunk_bytes) {
      return absl::DataLossError(absl::StrFormat("chunk %d payload is %d bytes, expected %d",
                                                 chunk_index, payload.size(), chunk_bytes));
    }
    return builder_.PutChunk(static_cast<uint32_t>(chunk_index * chunk), chunk, payload);
  };
  uint64_t lowest = end_;
  while (lowest > 0) {
    const uint64_t first = lowest - chunk;
    // The engine has computed this chunk (or is past it): the two sides have met.
    if (computed_.load(std::memory_order_acquire) >= lowest) break;
    absl::StatusOr<ConnectorLoadResult> load =
        connector_.LoadPayloads(prompt_, lowest, consume, /*skip_tokens=*/first);
    if (!load.ok() || load->loaded_tokens < lowest) {
      result_.failed_chunks.push_back(first / chunk);
      result_.first_error = load.ok() ? load->first_error : load.status();
      spdlog::debug("kvtier llama.cpp: back load stopped at chunk {}: {}", first / chunk,
                    result_.first_error.ToString());
      break;
    }
    lowest = first;
    lowest_.store(lowest, std::memory_order_release);
  }
  result_.loaded_begin = lowest;
  result_.loaded_end = lowest < end_ ? end_ : lowest;
  result_.load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

const BackLoader::Result& BackLoader::Wait() {
  if (!waited_) {
    if (thread_.joinable()) thread_.join();
    waited_ = true;
  }
  return result_;
}

absl::StatusOr<std::vector<std::byte>> BackLoader::Join(std::span<const std::byte> front_blob) {
  if (!waited_) return absl::FailedPreconditionError("BackLoader::Join before Wait");
  if (joined_) return absl::FailedPreconditionError("BackLoader::Join called twice");
  // An empty blob: nothing computed (the loader delivered from token 0).
  absl::StatusOr<SeqStateView> front;
  if (!front_blob.empty()) {
    front = ParseSeqState(front_blob, spec_);
    if (!front.ok()) return front.status();
  }
  const uint64_t c = front_blob.empty() ? 0 : front->cell_count;
  if (c < result_.loaded_begin || c >= result_.loaded_end) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "BackLoader::Join: the front state holds %d cells, the loaded tokens are [%d, %d)", c,
        result_.loaded_begin, result_.loaded_end));
  }
  if (c > 0) {
    if (absl::Status s = builder_.CopyPrefixFrom(*front, static_cast<uint32_t>(c)); !s.ok()) {
      return s;
    }
  }
  joined_ = true;
  if (result_.loaded_end == end_) return std::move(builder_).TakeBlob();
  return builder_.Truncated(static_cast<uint32_t>(result_.loaded_end));
}

}  // namespace kvt::llamacpp
