#include "wire.h"

#include "absl/strings/str_format.h"
#include "kvstore/remote_client.h"

namespace kvt::daemon {

namespace pb = ::kvtier::v1;

absl::Status CheckVersion(uint32_t version) {
  if (version == 0)
    return absl::InvalidArgumentError(
        absl::StrFormat("protocol_version: missing (0), expected %d", kKvtierProtocolVersion));
  if (version != kKvtierProtocolVersion)
    return absl::FailedPreconditionError(absl::StrFormat(
        "protocol_version: %d is not spoken by this daemon (%d)", version, kKvtierProtocolVersion));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ChunkKey>> KeysFromProto(
    const google::protobuf::RepeatedPtrField<pb::Key128>& keys, const char* field) {
  if (keys.empty() || keys.size() > static_cast<int>(kKvtierMaxBatchKeys))
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %d keys, expected 1..%d", field, keys.size(), kKvtierMaxBatchKeys));
  std::vector<ChunkKey> out;
  out.reserve(keys.size());
  for (int i = 0; i < keys.size(); ++i) {
    ChunkKey k{keys[i].lo(), keys[i].hi()};
    if (k.is_zero())
      return absl::InvalidArgumentError(absl::StrFormat("%s[%d]: zero key", field, i));
    out.push_back(k);
  }
  return out;
}

pb::TierKind TierToProto(TierKind kind) {
  switch (kind) {
    case TierKind::kHost:
      return pb::TIER_HOST;
    case TierKind::kDisk:
      return pb::TIER_DISK;
    case TierKind::kRemote:
      return pb::TIER_REMOTE;
  }
  return pb::TIER_NONE;
}

void EntryToProto(const StoredChunk& e, pb::ChunkEntry* c) {
  HashToProto(e.info.key, c->mutable_key());
  HashToProto(e.info.ns, c->mutable_ns());
  HashToProto(e.info.parent, c->mutable_parent());
  c->set_token_count(e.info.token_count);
  c->set_bytes(e.info.record_bytes);
  c->set_tier(e.kinds.empty() ? pb::TIER_NONE : TierToProto(e.kinds.front()));
  c->set_last_access_unix_ms(e.info.last_access_unix_ms);
}

}  // namespace kvt::daemon
