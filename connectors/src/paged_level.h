// Private to kvt_connector: the paged level as a thin layer over the payload level.
// It validates slot mappings, then calls the connector's StorePayloads/LoadPayloads
// with callbacks that gather/scatter each chunk between the engine's paged KV cache
// (a PagedKvView) and the chunk payload using the copy kernels (kernels/kv_copy.h).
#ifndef CONNECTORS_SRC_PAGED_LEVEL_H_
#define CONNECTORS_SRC_PAGED_LEVEL_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "connectors/kv_connector.h"

namespace kvt::connector_internal {

// RegisterKvView's checks: a valid view of the declared layout, on a device this
// process can copy from. InvalidArgument naming what differs.
absl::Status CheckViewFor(const PagedKvView& view, const KvLayout& declared);

// The load arguments shared by both levels: num_tokens a multiple of chunk_tokens and
// <= tokens.size(), skip_tokens <= num_tokens. InvalidArgument prefixed with `what`.
absl::Status CheckLoadArgs(const char* what, std::span<const TokenId> tokens, uint64_t num_tokens,
                           uint64_t skip_tokens, uint32_t chunk_tokens);

// KVConnector::Store over `payload_level` (see kv_connector.h for the contract).
absl::StatusOr<size_t> StorePaged(KVConnector& payload_level, const PagedKvView& view,
                                  std::span<const TokenId> tokens,
                                  std::span<const int64_t> slot_mapping, const KvCopyOptions& copy);
// KVConnector::Load over `payload_level`.
absl::StatusOr<ConnectorLoadResult> LoadPaged(KVConnector& payload_level, const PagedKvView& view,
                                              std::span<const TokenId> tokens, uint64_t num_tokens,
                                              std::span<const int64_t> slot_mapping,
                                              uint64_t num_computed_tokens,
                                              const KvCopyOptions& copy);

}  // namespace kvt::connector_internal

#endif  // CONNECTORS_SRC_PAGED_LEVEL_H_
