#include "kvstore/tier.h"

namespace kvt {

std::string_view TierKindName(TierKind kind) {
  switch (kind) {
    case TierKind::kHost:
      return "host";
    case TierKind::kDisk:
      return "disk";
    case TierKind::kRemote:
      return "remote";
  }
  return "unknown";
}

}  // namespace kvt
