// One parser for the addresses of kvtierd and of its HTTP endpoints: "unix:..." sockets
// and "host:port", used by kvtierd (listen, metrics.listen), the kvtier CLI (--daemon) and
// the engines (kvtier-llama-server's --kvtier-daemon), so an address one accepts the others
// accept too, and a mistake gets the same hint everywhere.
#ifndef KVSTORE_DAEMON_ADDRESS_H_
#define KVSTORE_DAEMON_ADDRESS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvt {

// Who uses the address: a port of 0 means "any free port" to a server and nothing to a
// client.
enum class AddressUse : uint8_t {
  kConnect,  // a client's target: TCP port 1..65535
  kListen,   // a server's address: TCP port 0..65535 (0 = any free port)
};

struct DaemonAddress {
  enum class Kind : uint8_t {
    kUnix,         // unix:PATH or unix:///ABSOLUTE/PATH
    kTcp,          // host:port, [v6]:port
    kOtherScheme,  // another gRPC target scheme, passed through (dns:, ipv4:, ipv6:,
                   // unix-abstract:, vsock:)
  };
  Kind kind = Kind::kUnix;
  std::string target;     // the text as given: what gRPC is handed
  std::string unix_path;  // kUnix: the socket path
  std::string host;       // kTcp: the host, an IPv6 literal without its brackets
  uint16_t port = 0;      // kTcp

  // True for a unix or unix-abstract socket and for a TCP host on loopback
  // (127.0.0.0/8, ::1, localhost): what kvtierd may listen on without allow_remote.
  bool is_local() const;
  // kTcp: "host:port" with `port` (IPv6 hosts in brackets), e.g. after binding port 0.
  std::string HostPort(uint16_t bound_port) const;
};

// Parses a kvtierd address. Accepted: "unix:/path/to.sock", "unix:///path/to.sock",
// "unix:relative.sock", "host:port", "[::1]:port", and the other gRPC schemes above.
// InvalidArgument "'TEXT': expected ...", naming the accepted forms, with a hint for the
// common mistakes: a bare socket path ("/run/k.sock": "unix:///run/k.sock"), no port, a
// port outside the range `use` allows, an IPv6 literal without brackets, a host with a
// character hosts cannot have. Callers prefix the message with their flag or key.
absl::StatusOr<DaemonAddress> ParseDaemonAddress(std::string_view text,
                                                 AddressUse use = AddressUse::kConnect);

// Parses "host:port" only (an HTTP endpoint such as kvtierd's metrics.listen); errors as
// ParseDaemonAddress's, and a unix or other-scheme address is InvalidArgument too.
absl::StatusOr<DaemonAddress> ParseHostPort(std::string_view text, AddressUse use);

// kvtierd's listen address when none is configured, and so the kvtier CLI's daemon when
// neither --daemon nor KVTIER_DAEMON is given: unix://$XDG_RUNTIME_DIR/kvtierd.sock when
// XDG_RUNTIME_DIR is set and not empty, else unix:///tmp/kvtierd-<uid>.sock.
std::string DefaultDaemonAddress();

}  // namespace kvt

#endif  // KVSTORE_DAEMON_ADDRESS_H_
