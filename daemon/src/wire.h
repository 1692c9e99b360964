// Conversions between proto/kvtier.proto messages and kvstore types, and the checks
// every RPC applies to them (protocol version, key lists).
#ifndef KVT_DAEMON_WIRE_H_
#define KVT_DAEMON_WIRE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "kvstore/tier.h"
#include "kvstore/tiered_store.h"
#include "kvstore/types.h"
#include "proto/kvtier.pb.h"

namespace kvt::daemon {

// INVALID_ARGUMENT / FAILED_PRECONDITION for a bad protocol_version.
absl::Status CheckVersion(uint32_t version);
// Converts and validates a key list (1..4096 non-zero keys), naming `field` on error.
absl::StatusOr<std::vector<ChunkKey>> KeysFromProto(
    const google::protobuf::RepeatedPtrField<::kvtier::v1::Key128>& keys, const char* field);
::kvtier::v1::TierKind TierToProto(TierKind kind);
template <typename Tag>
void HashToProto(const Hash128<Tag>& h, ::kvtier::v1::Key128* out) {
  out->set_lo(h.lo);
  out->set_hi(h.hi);
}
// A listed or evicted chunk.
void EntryToProto(const StoredChunk& e, ::kvtier::v1::ChunkEntry* out);

}  // namespace kvt::daemon

#endif  // KVT_DAEMON_WIRE_H_
