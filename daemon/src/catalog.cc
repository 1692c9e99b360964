#include "catalog.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_format.h"
#include "spdlog/spdlog.h"

namespace kvt::daemon {

absl::StatusOr<std::unique_ptr<Catalog>> Catalog::Open(const std::string& log_path,
                                                       std::optional<std::string> unowned_tenant) {
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
  auto c = std::unique_ptr<Catalog>(new Catalog(f, std::move(unowned_tenant)));
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

bool Catalog::Visible(const NamespaceId& ns, const std::string& tenant) const {
  absl::MutexLock lock(&mu_);
  auto it = owners_.find(ns);
  if (it == owners_.end()) return unowned_tenant_ && *unowned_tenant_ == tenant;
  return it->second == tenant;
}

}  // namespace kvt::daemon
