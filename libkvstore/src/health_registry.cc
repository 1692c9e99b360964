// HealthRegistry (kvstore/health_registry.h).
#include "kvstore/health_registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace kvt {

std::string_view ThreadStateName(ThreadState state) {
  switch (state) {
    case ThreadState::kRunning:
      return "running";
    case ThreadState::kStopped:
      return "stopped";
    case ThreadState::kFailed:
      return "failed";
  }
  return "unknown";
}

const std::shared_ptr<HealthRegistry>& HealthRegistry::Default() {
  static const std::shared_ptr<HealthRegistry>* const registry =
      new std::shared_ptr<HealthRegistry>(std::make_shared<HealthRegistry>());
  return *registry;
}

std::vector<ThreadHealth> HealthRegistry::Snapshot() const {
  std::vector<ThreadHealth> out;
  {
    absl::MutexLock lock(&mu_);
    out.reserve(entries_.size());
    for (const auto& [id, e] : entries_) out.push_back(e);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const ThreadHealth& a, const ThreadHealth& b) { return a.name < b.name; });
  return out;
}

bool HealthRegistry::Healthy(std::string* detail) const {
  std::string d;
  for (const ThreadHealth& t : Snapshot()) {
    if (t.state == ThreadState::kFailed)
      absl::StrAppend(&d, t.name, " failed: ", t.last_error, "; ");
  }
  if (detail != nullptr) *detail = d;
  return d.empty();
}

uint64_t HealthRegistry::Add(std::string name) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  entries_[id].name = std::move(name);
  return id;
}

void HealthRegistry::Remove(uint64_t id) {
  absl::MutexLock lock(&mu_);
  entries_.erase(id);
}

void HealthRegistry::SetState(uint64_t id, ThreadState state, std::string error) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  it->second.state = state;
  if (!error.empty()) it->second.last_error = std::move(error);
}

void HealthRegistry::CountRestart(uint64_t id, std::string error) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  ++it->second.restarts;
  it->second.last_error = std::move(error);
}

void HealthRegistry::Beat(uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it != entries_.end()) ++it->second.heartbeats;
}

}  // namespace kvt
