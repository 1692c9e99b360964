#include "paged_level.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvt::connector_internal {

absl::Status CheckViewFor(const PagedKvView& view, const KvLayout& declared) {
  if (absl::Status s = view.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("RegisterKvView: ", s.message()));
  }
  if (!(view.layout == declared)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "RegisterKvView: the view's layout %s does not match the declared layout %s "
        "(ConnectorOptions.ns.layout)",
        view.layout.DebugString(), declared.DebugString()));
  }
  if (view.device == KvDevice::kCuda && !CudaCopyAvailable()) {
    return absl::InvalidArgumentError(
        "RegisterKvView: view.device = cuda but this process has no usable CUDA device "
        "(CPU-only build or no GPU)");
  }
  return absl::OkStatus();
}

absl::Status CheckLoadArgs(const char* what, std::span<const TokenId> tokens, uint64_t num_tokens,
                           uint64_t skip_tokens, uint32_t chunk_tokens) {
  if (num_tokens % chunk_tokens != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: num_tokens = %d is not a multiple of chunk_tokens = %d", what,
                        num_tokens, chunk_tokens));
  }
  if (num_tokens > tokens.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: num_tokens = %d exceeds the %d tokens given", what, num_tokens, tokens.size()));
  }
  if (skip_tokens > num_tokens) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: tokens already held (%d) exceed num_tokens = %d", what, skip_tokens, num_tokens));
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> StorePaged(KVConnector& payload_level, const PagedKvView& view,
                                  std::span<const TokenId> tokens,
                                  std::span<const int64_t> slot_mapping,
                                  const KvCopyOptions& copy) {
  const uint32_t ct = payload_level.chunk_tokens();
  const size_t covered = tokens.size() / ct * ct;
  if (slot_mapping.size() < covered) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Store: slot_mapping has %d entries; expected >= %d (complete chunks x chunk_tokens)",
        slot_mapping.size(), covered));
  }
  const int64_t num_slots = view.num_slots();
  for (size_t i = 0; i < covered; ++i) {
    if (slot_mapping[i] < 0 || slot_mapping[i] >= num_slots) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "Store: slot_mapping[%d] = %d; expected a slot in [0, %d) for every token of a "
          "complete chunk (padding -1 cannot be stored)",
          i, slot_mapping[i], num_slots));
    }
  }
  return payload_level.StorePayloads(tokens, [&](size_t chunk, std::span<std::byte> payload) {
    return GatherChunk(view, slot_mapping.subspan(chunk * ct, ct), payload, copy);
  });
}

absl::StatusOr<ConnectorLoadResult> LoadPaged(KVConnector& payload_level, const PagedKvView& view,
                                              std::span<const TokenId> tokens, uint64_t num_tokens,
                                              std::span<const int64_t> slot_mapping,
                                              uint64_t num_computed_tokens,
                                              const KvCopyOptions& copy) {
  const uint32_t ct = payload_level.chunk_tokens();
  if (absl::Status s = CheckLoadArgs("Load", tokens, num_tokens, num_computed_tokens, ct);
      !s.ok()) {
    return s;
  }
  if (slot_mapping.size() < num_tokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Load: slot_mapping has %d entries; expected >= num_tokens = %d",
                        slot_mapping.size(), num_tokens));
  }
  const int64_t num_slots = view.num_slots();
  for (uint64_t i = num_computed_tokens; i < num_tokens; ++i) {
    if (slot_mapping[i] < -1 || slot_mapping[i] >= num_slots) {
      return absl::InvalidArgumentError(
          absl::StrFormat("Load: slot_mapping[%d] = %d; expected -1 (padding) or a slot in [0, %d)",
                          i, slot_mapping[i], num_slots));
    }
  }
  std::vector<int64_t> slots(ct);
  return payload_level.LoadPayloads(
      tokens, num_tokens,
      [&](size_t chunk, std::span<const std::byte> payload) {
        const uint64_t base = uint64_t{chunk} * ct;
        for (uint32_t j = 0; j < ct; ++j) {
          // Positions the engine already holds are never written.
          slots[j] = base + j < num_computed_tokens ? -1 : slot_mapping[base + j];
        }
        return ScatterChunk(view, slots, payload, copy);
      },
      num_computed_tokens);
}

}  // namespace kvt::connector_internal
