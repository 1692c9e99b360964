#include "kvstore/daemon_address.h"

#include <unistd.h>

#include <cctype>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kvt {

namespace {

constexpr char kDaemonForms[] =
    "expected unix:/path/to/kvtierd.sock, unix:///path/to/kvtierd.sock or host:port (e.g. "
    "127.0.0.1:7470)";
constexpr char kHostPortForms[] = "expected host:port (e.g. 127.0.0.1:9464)";

// (Debian's Abseil has its own string_view: std::string_view goes through std::string.)
absl::Status Bad(std::string_view text, const char* forms, const std::string& hint) {
  return absl::InvalidArgumentError(absl::StrCat("'", std::string(text), "': ", forms, hint));
}

// "host:port" into `out`; the error's hint only ("" = OK).
std::string ParseTcp(std::string_view text, AddressUse use, DaemonAddress* out) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return " (no port: add :PORT)";
  std::string host(text.substr(0, colon));
  const std::string port(text.substr(colon + 1));
  const uint32_t min_port = use == AddressUse::kListen ? 0 : 1;
  uint32_t port_num = 0;
  if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos ||
      !absl::SimpleAtoi(port, &port_num) || port_num < min_port || port_num > 65535) {
    return absl::StrCat(" (port '", port, "' is not a number in ", min_port, "..65535)");
  }
  const bool bracketed = host.size() >= 2 && host.front() == '[' && host.back() == ']';
  if (bracketed) {
    host = host.substr(1, host.size() - 2);
    if (host.empty()) return " (the host is missing)";
  } else if (host.find(':') != std::string::npos) {
    return " (write an IPv6 address in brackets: [::1]:7470)";
  }
  for (char c : host) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ||
                    c == '_' || (bracketed && (c == ':' || c == '%'));
    if (!ok) {
      return absl::StrCat(" (host '", host, "' has a character '", std::string(1, c),
                          "' hosts cannot)");
    }
  }
  out->kind = DaemonAddress::Kind::kTcp;
  out->target = std::string(text);
  out->host = host;
  out->port = static_cast<uint16_t>(port_num);
  return "";
}

}  // namespace

bool DaemonAddress::is_local() const {
  switch (kind) {
    case Kind::kUnix:
      return true;
    case Kind::kTcp:
      return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
    case Kind::kOtherScheme:
      return absl::StartsWith(target, "unix-abstract:");
  }
  return false;
}

std::string DaemonAddress::HostPort(uint16_t bound_port) const {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", bound_port);
  return absl::StrCat(host, ":", bound_port);
}

absl::StatusOr<DaemonAddress> ParseDaemonAddress(std::string_view text_view, AddressUse use) {
  const std::string text(text_view);
  DaemonAddress a;
  if (text.empty()) return Bad(text, kDaemonForms, " (the address is empty)");
  if (absl::StartsWith(text, "unix:")) {
    std::string path = text.substr(5);
    if (absl::StartsWith(path, "//")) {
      // unix://AUTHORITY/... is not a socket path to gRPC: only unix:///absolute.
      path.erase(0, 2);
      if (!path.empty() && path.front() != '/') {
        return Bad(text, kDaemonForms,
                   absl::StrCat(" (after unix:// comes an absolute path: unix:///", path,
                                ", or unix:", path, " for a relative one)"));
      }
    }
    if (path.empty() || path == "/")
      return Bad(text, kDaemonForms, " (the socket path is missing)");
    a.kind = DaemonAddress::Kind::kUnix;
    a.target = text;
    a.unix_path = path;
    return a;
  }
  for (const char* scheme : {"unix-abstract:", "dns:", "ipv4:", "ipv6:", "vsock:"}) {
    if (absl::StartsWith(text, scheme)) {
      a.kind = DaemonAddress::Kind::kOtherScheme;
      a.target = text;
      return a;
    }
  }
  if (text.front() == '/' || text.front() == '.' || text.front() == '~' ||
      text.find('/') != std::string::npos) {
    return Bad(text, kDaemonForms,
               absl::StrCat(" (a socket path needs the unix: prefix: ",
                            text.front() == '/' ? "unix://" : "unix:", text, ")"));
  }
  if (std::string hint = ParseTcp(text, use, &a); !hint.empty())
    return Bad(text, kDaemonForms, hint);
  return a;
}

absl::StatusOr<DaemonAddress> ParseHostPort(std::string_view text_view, AddressUse use) {
  const std::string text(text_view);
  DaemonAddress a;
  if (text.empty()) return Bad(text, kHostPortForms, " (the address is empty)");
  if (absl::StartsWith(text, "unix:") || text.find('/') != std::string::npos)
    return Bad(text, kHostPortForms, " (a socket path is not an HTTP address here)");
  if (std::string hint = ParseTcp(text, use, &a); !hint.empty())
    return Bad(text, kHostPortForms, hint);
  return a;
}

std::string DefaultDaemonAddress() {
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  if (xdg != nullptr && *xdg != '\0') return absl::StrCat("unix://", xdg, "/kvtierd.sock");
  return absl::StrCat("unix:///tmp/kvtierd-", getuid(), ".sock");
}

}  // namespace kvt
