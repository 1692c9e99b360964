#include "catalog.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_format.h"
#include "spdlog/spdlog.h"

namespace kvt::daemon {

absl::StatusOr<std::unique_ptr<Catalog>> Catalog::Open(const std::string& log_path,
                                                       uint64_t max_keys) {
  if (max_keys < 1) return absl::InvalidArgumentError("catalog_max_keys: must be >= 1");
  absl::flat_hash_map<NamespaceId, std::string> owners;
  {
    std::ifstream in(log_path, std::ios::binary);
    std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t pos = 0, bad = 0;
    while (pos < content.size()) {
      size_t nl = content.find('\n', pos);
      if (nl == std::string::npos) break;  // torn last line
      std::string line = content.substr(pos, nl - pos);
      pos = nl + 1;
      size_t tab = line.find('\t');
      auto ns = tab == std::string::npos
                    ? absl::StatusOr<NamespaceId>(absl::InvalidArgumentError("no tab"))
                    : NamespaceId::FromHex(line.substr(0, tab));
      if (!ns.ok()) {
        ++bad;
        continue;
      }
      owners.emplace(*ns, line.substr(tab + 1));
    }
    if (bad > 0) spdlog::warn("kvtierd: {} unreadable lines in {}", bad, log_path);
  }
  std::FILE* f = std::fopen(log_path.c_str(), "ab");
  if (f == nullptr)
    return absl::InternalError(
        absl::StrFormat("cannot open %s for appending: %s", log_path, std::strerror(errno)));
  auto c = std::unique_ptr<Catalog>(new Catalog(f, max_keys));
  absl::MutexLock lock(&c->mu_);
  c->owners_ = std::move(owners);
  return c;
}

Catalog::~Catalog() {
  absl::MutexLock lock(&mu_);
  if (log_ != nullptr) std::fclose(log_);
}

absl::Status Catalog::Claim(const NamespaceId& ns, const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  auto it = owners_.find(ns);
  if (it != owners_.end()) {
    if (it->second == tenant) return absl::OkStatus();
    return absl::PermissionDeniedError(
        absl::StrFormat("namespace %s belongs to another tenant", ns.ToHex()));
  }
  std::string line = absl::StrFormat("%s\t%s\n", ns.ToHex(), tenant);
  if (std::fwrite(line.data(), 1, line.size(), log_) != line.size() || std::fflush(log_) != 0 ||
      fdatasync(fileno(log_)) != 0)
    return absl::InternalError(
        absl::StrFormat("cannot persist namespace owner: %s", std::strerror(errno)));
  owners_.emplace(ns, tenant);
  return absl::OkStatus();
}

std::optional<std::string> Catalog::Owner(const NamespaceId& ns) const {
  absl::MutexLock lock(&mu_);
  auto it = owners_.find(ns);
  if (it == owners_.end()) return std::nullopt;
  return it->second;
}

bool Catalog::NsVisible(const NamespaceId& ns, const std::string& tenant) const {
  absl::MutexLock lock(&mu_);
  auto it = owners_.find(ns);
  return it != owners_.end() && it->second == tenant;
}

void Catalog::NoteKey(const ChunkKey& key, const NamespaceId& ns) {
  absl::MutexLock lock(&mu_);
  NoteKeyLocked(key, ns);
}

void Catalog::NoteKeyLocked(const ChunkKey& key, const NamespaceId& ns) {
  const uint64_t seq = next_seq_++;
  auto [it, inserted] = keys_.try_emplace(key, KeyEntry{ns, seq});
  if (!inserted) {
    if (it->second.ns == ns) return;  // known: keeps its place
    it->second = KeyEntry{ns, seq};
  }
  order_.emplace_back(key, seq);
  while (keys_.size() > max_keys_ && !order_.empty()) {
    auto [old, old_seq] = order_.front();
    order_.pop_front();
    auto o = keys_.find(old);
    if (o != keys_.end() && o->second.seq == old_seq) {
      keys_.erase(o);
      ++dropped_;
    }
  }
  if (order_.size() > 2 * max_keys_ + 64) {  // drop the stale elements
    std::deque<std::pair<ChunkKey, uint64_t>> live;
    for (const auto& e : order_) {
      auto o = keys_.find(e.first);
      if (o != keys_.end() && o->second.seq == e.second) live.push_back(e);
    }
    order_ = std::move(live);
  }
}

std::optional<NamespaceId> Catalog::NsOf(const ChunkKey& key) const {
  absl::MutexLock lock(&mu_);
  auto it = keys_.find(key);
  if (it == keys_.end()) return std::nullopt;
  return it->second.ns;
}

void Catalog::ForgetKey(const ChunkKey& key) {
  absl::MutexLock lock(&mu_);
  keys_.erase(key);
}

bool Catalog::KeyVisible(const ChunkKey& key, const std::string& tenant) {
  {
    absl::MutexLock lock(&mu_);
    auto it = keys_.find(key);
    if (it != keys_.end() || !shared_lookup_) {
      if (it == keys_.end()) return false;
      auto o = owners_.find(it->second.ns);
      return o != owners_.end() && o->second == tenant;
    }
  }
  std::optional<NamespaceId> ns = shared_lookup_(key);  // I/O: outside the lock
  if (!ns) return false;
  if (adopt_tenant_ && !Owner(*ns)) {
    if (!Claim(*ns, *adopt_tenant_).ok()) return false;
  }
  if (!NsVisible(*ns, tenant)) return false;
  NoteKey(key, *ns);
  return true;
}

void Catalog::SetSharedLookup(std::function<std::optional<NamespaceId>(const ChunkKey&)> lookup,
                              std::optional<std::string> adopt_tenant) {
  shared_lookup_ = std::move(lookup);
  adopt_tenant_ = std::move(adopt_tenant);
}

size_t Catalog::num_keys() const {
  absl::MutexLock lock(&mu_);
  return keys_.size();
}

uint64_t Catalog::dropped_keys() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

}  // namespace kvt::daemon
