// kvt::ParseDaemonAddress / ParseHostPort (kvstore/daemon_address.h): the one parser of
// kvtierd's addresses, shared by kvtierd, the kvtier CLI and kvtier-llama-server.
#include "kvstore/daemon_address.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

namespace kvt {
namespace {

using ::testing::HasSubstr;

TEST(DaemonAddressTest, UnixSocketForms) {
  auto abs = ParseDaemonAddress("unix:///run/kvtierd.sock");
  ASSERT_TRUE(abs.ok()) << abs.status();
  EXPECT_EQ(abs->kind, DaemonAddress::Kind::kUnix);
  EXPECT_EQ(abs->unix_path, "/run/kvtierd.sock");
  EXPECT_EQ(abs->target, "unix:///run/kvtierd.sock");
  EXPECT_TRUE(abs->is_local());
  auto one_slash = ParseDaemonAddress("unix:/run/kvtierd.sock");
  ASSERT_TRUE(one_slash.ok());
  EXPECT_EQ(one_slash->unix_path, "/run/kvtierd.sock");
  auto rel = ParseDaemonAddress("unix:kvtierd.sock");
  ASSERT_TRUE(rel.ok());
  EXPECT_EQ(rel->unix_path, "kvtierd.sock");
}

TEST(DaemonAddressTest, BareSocketPathGetsTheUnixFormAsHint) {
  auto a = ParseDaemonAddress("/run/kvtierd.sock", AddressUse::kListen);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(a.status().message(), HasSubstr("'/run/kvtierd.sock': expected unix:"));
  EXPECT_THAT(a.status().message(), HasSubstr("needs the unix: prefix: unix:///run/kvtierd.sock"));
  auto r = ParseDaemonAddress("./kvtierd.sock");
  EXPECT_THAT(r.status().message(), HasSubstr("unix:./kvtierd.sock"));
  auto authority = ParseDaemonAddress("unix://run/kvtierd.sock");
  EXPECT_THAT(authority.status().message(), HasSubstr("unix:///run/kvtierd.sock"));
  for (const char* missing : {"unix:", "unix://", "unix:///"}) {
    EXPECT_THAT(ParseDaemonAddress(missing).status().message(),
                HasSubstr("the socket path is missing"))
        << missing;
  }
  EXPECT_THAT(ParseDaemonAddress("").status().message(), HasSubstr("the address is empty"));
}

TEST(DaemonAddressTest, TcpPortRangeDependsOnUse) {
  auto c = ParseDaemonAddress("localhost:7470");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->kind, DaemonAddress::Kind::kTcp);
  EXPECT_EQ(c->host, "localhost");
  EXPECT_EQ(c->port, 7470);
  EXPECT_TRUE(c->is_local());
  EXPECT_THAT(ParseDaemonAddress("127.0.0.1:0").status().message(),
              HasSubstr("port '0' is not a number in 1..65535"));
  auto l = ParseDaemonAddress("127.0.0.1:0", AddressUse::kListen);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->HostPort(41234), "127.0.0.1:41234");
  for (const char* bad : {"host:99999", "host:-1", "host:x", "host:", "host", ":7470"}) {
    EXPECT_EQ(ParseDaemonAddress(bad, AddressUse::kListen).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_THAT(ParseDaemonAddress("host").status().message(), HasSubstr("no port"));
  EXPECT_THAT(ParseDaemonAddress("ho st:1").status().message(), HasSubstr("has a character ' '"));
}

TEST(DaemonAddressTest, Ipv6NeedsBracketsAndLoopbackIsLocal) {
  auto v6 = ParseDaemonAddress("[::1]:7470");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_TRUE(v6->is_local());
  EXPECT_EQ(v6->HostPort(1), "[::1]:1");
  EXPECT_THAT(ParseDaemonAddress("::1:7470").status().message(), HasSubstr("in brackets"));
  auto remote = ParseDaemonAddress("10.0.0.1:7470");
  ASSERT_TRUE(remote.ok());
  EXPECT_FALSE(remote->is_local());
  EXPECT_TRUE(ParseDaemonAddress("127.3.4.5:1")->is_local());
  EXPECT_TRUE(ParseDaemonAddress("unix-abstract:kvtierd")->is_local());
  EXPECT_FALSE(ParseDaemonAddress("dns:///kv.example:7470")->is_local());
}

TEST(DaemonAddressTest, HostPortRefusesSockets) {
  EXPECT_TRUE(ParseHostPort("127.0.0.1:9464", AddressUse::kListen).ok());
  auto s = ParseHostPort("unix:///tmp/m.sock", AddressUse::kListen);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("expected host:port"));
}

TEST(DaemonAddressTest, DefaultIsTheRuntimeDirSocketOrTmp) {
  const char* saved = std::getenv("XDG_RUNTIME_DIR");
  const std::string keep = saved != nullptr ? saved : "";
  ::setenv("XDG_RUNTIME_DIR", "/run/user/4242", 1);
  EXPECT_EQ(DefaultDaemonAddress(), "unix:///run/user/4242/kvtierd.sock");
  ::setenv("XDG_RUNTIME_DIR", "", 1);
  EXPECT_EQ(DefaultDaemonAddress(), "unix:///tmp/kvtierd-" + std::to_string(::getuid()) + ".sock");
  if (saved != nullptr) {
    ::setenv("XDG_RUNTIME_DIR", keep.c_str(), 1);
  } else {
    ::unsetenv("XDG_RUNTIME_DIR");
  }
  EXPECT_TRUE(ParseDaemonAddress(DefaultDaemonAddress()).ok());
}

}  // namespace
}  // namespace kvt
