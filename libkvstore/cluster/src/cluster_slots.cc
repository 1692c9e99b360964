#include "kvstore/cluster_slots.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <charconv>

#include "absl/strings/str_format.h"

namespace kvt::cluster {
namespace {

bool ParseInt(std::string_view t, int* out) {
  if (t.empty()) return false;
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), *out);
  return ec == std::errc() && p == t.data() + t.size();
}

}  // namespace

uint16_t Crc16(std::string_view data) {
  uint16_t crc = 0;
  for (unsigned char c : data) {
    crc ^= static_cast<uint16_t>(c) << 8;
    for (int i = 0; i < 8; ++i)
      crc = (crc & 0x8000) ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                           : static_cast<uint16_t>(crc << 1);
  }
  return crc;
}

int KeyHashSlot(std::string_view key) {
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1)
      key = key.substr(open + 1, close - open - 1);
  }
  return Crc16(key) & (kNumSlots - 1);
}

std::string NodeAddr::ToString() const {
  if (host.find(':') != std::string::npos) return absl::StrFormat("[%s]:%d", host, port);
  return absl::StrFormat("%s:%d", host, port);
}

absl::StatusOr<NodeAddr> ParseNodeAddr(std::string_view text) {
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrFormat("cluster node '%s': expected host:port with port 1..65535", text));
  };
  NodeAddr a;
  std::string_view port_text;
  if (text.starts_with("[")) {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return bad();
    a.host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad();
    a.host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
  }
  if (a.host.empty() || !ParseInt(port_text, &a.port) || a.port < 1 || a.port > 65535) return bad();
  return a;
}

absl::StatusOr<SlotMap> SlotMap::FromClusterSlots(const redisReply* reply,
                                                  std::string_view fallback_host) {
  if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY)
    return absl::DataLossError("CLUSTER SLOTS: reply is not an array");
  SlotMap m;
  for (size_t i = 0; i < reply->elements; ++i) {
    const redisReply* e = reply->element[i];
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
        e->element[0]->type != REDIS_REPLY_INTEGER || e->element[1]->type != REDIS_REPLY_INTEGER ||
        e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2 ||
        e->element[2]->element[0]->type != REDIS_REPLY_STRING ||
        e->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
      return absl::DataLossError(absl::StrFormat("CLUSTER SLOTS: entry %d is malformed", i));
    const long long start = e->element[0]->integer, end = e->element[1]->integer;
    if (start < 0 || end >= kNumSlots || start > end)
      return absl::DataLossError(
          absl::StrFormat("CLUSTER SLOTS: entry %d has slots %d..%d", i, start, end));
    const redisReply* n = e->element[2];
    NodeAddr addr{std::string(n->element[0]->str, n->element[0]->len),
                  static_cast<int>(n->element[1]->integer)};
    if (addr.host.empty() || addr.host == "?") addr.host = std::string(fallback_host);
    if (addr.port < 1 || addr.port > 65535)
      return absl::DataLossError(
          absl::StrFormat("CLUSTER SLOTS: entry %d has port %d", i, addr.port));
    auto it = std::find(m.masters_.begin(), m.masters_.end(), addr);
    const int16_t idx = static_cast<int16_t>(it - m.masters_.begin());
    if (it == m.masters_.end()) m.masters_.push_back(addr);
    for (long long s = start; s <= end; ++s) m.slot_master_[s] = idx;
  }
  return m;
}

std::optional<NodeAddr> SlotMap::MasterOf(int slot) const {
  if (slot < 0 || slot >= kNumSlots) return std::nullopt;
  const int16_t i = slot_master_[slot];
  if (i < 0) return std::nullopt;
  return masters_[i];
}

int SlotMap::covered_slots() const {
  return static_cast<int>(
      std::count_if(slot_master_.begin(), slot_master_.end(), [](int16_t i) { return i >= 0; }));
}

void SlotMap::Assign(int slot, const NodeAddr& addr) {
  if (slot < 0 || slot >= kNumSlots) return;
  auto it = std::find(masters_.begin(), masters_.end(), addr);
  if (it == masters_.end()) {
    masters_.push_back(addr);
    it = masters_.end() - 1;
  }
  slot_master_[slot] = static_cast<int16_t>(it - masters_.begin());
}

std::optional<Redirect> ParseRedirect(std::string_view error) {
  if (error.starts_with("TRYAGAIN")) return Redirect{Redirect::kTryAgain};
  if (error.starts_with("CLUSTERDOWN")) return Redirect{Redirect::kClusterDown};
  Redirect r;
  if (error.starts_with("MOVED ")) {
    r.kind = Redirect::kMoved;
  } else if (error.starts_with("ASK ")) {
    r.kind = Redirect::kAsk;
  } else {
    return std::nullopt;
  }
  std::vector<std::string_view> parts;
  for (size_t at = 0; at < error.size();) {
    size_t sp = error.find(' ', at);
    if (sp == std::string_view::npos) sp = error.size();
    if (sp > at) parts.push_back(error.substr(at, sp - at));
    at = sp + 1;
  }
  if (parts.size() != 3 || !ParseInt(parts[1], &r.slot) || r.slot < 0 || r.slot >= kNumSlots)
    return std::nullopt;
  const size_t colon = parts[2].rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view host = parts[2].substr(0, colon);
  if (host.starts_with("[") && host.ends_with("]")) host = host.substr(1, host.size() - 2);
  r.node.host = std::string(host);
  if (!ParseInt(parts[2].substr(colon + 1), &r.node.port) || r.node.port < 1 || r.node.port > 65535)
    return std::nullopt;
  return r;
}

}  // namespace kvt::cluster
