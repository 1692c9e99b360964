// StagedPolicy: victims designated one at a time (see cache_policy_impl.h).
#include "cache_policy_impl.h"

namespace kvt::internal {

void StagedPolicy::VisitVictims(const std::function<bool(const ChunkKey&)>& visit) const {
  for (PolicyNode* n = victims_.back(); n != nullptr; n = victims_.Warmer(n)) {
    if (!visit(n->key)) return;
  }
  // Designating changes the policy's lists but not what it holds: the interface's
  // const promises the tier an unchanged set of keys, which still holds. The object is
  // never const itself (the tier owns it through a non-const pointer).
  auto* self = const_cast<StagedPolicy*>(this);
  while (PolicyNode* n = self->DesignateNext()) {
    n->origin = n->queue;
    n->queue = kVictimQueue;
    self->victims_.PushFront(n);
    if (!visit(n->key)) return;
  }
}

}  // namespace kvt::internal
