#include "server_test_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <deque>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kvt::llamacpp::testing {
namespace {

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

std::pair<int, std::string> Shell(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return {-1, "popen failed"};
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out};
}
}  // namespace

std::pair<int, std::string> RunToExit(const std::string& binary,
                                      const std::vector<std::string>& args) {
  std::string cmd = ShellQuote(binary);
  for (auto& a : args) {
    cmd.push_back(' ');
    cmd.append(ShellQuote(a));
  }
  cmd.append(" </dev/null");
  return Shell(cmd);
}

absl::StatusOr<nlohmann::json> CurlJson(const std::string& url, const nlohmann::json& body,
                                        int max_time_s) {
  std::string cmd = "curl -s -S --max-time " + std::to_string(max_time_s) + " ";
  if (!body.is_null()) {
    char tmpl[] = "/tmp/kvt-curl-XXXXXX";
    const int fd = mkstemp(tmpl);
    const std::string text = body.dump();
    if (fd < 0 || write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      return absl::InternalError("cannot write the request body");
    }
    close(fd);
    cmd += "-H 'Content-Type: application/json' --data-binary @" + std::string(tmpl) + " ";
    auto [rc, out] = Shell(cmd + ShellQuote(url));
    unlink(tmpl);
    if (rc != 0) return absl::InternalError(absl::StrCat("curl rc ", rc, ": ", out));
    auto j = nlohmann::json::parse(out, nullptr, false);
    if (j.is_discarded()) return absl::InternalError("not JSON: " + out.substr(0, 2000));
    return j;
  }
  auto [rc, out] = Shell(cmd + ShellQuote(url));
  if (rc != 0) return absl::InternalError(absl::StrCat("curl rc ", rc, ": ", out));
  auto j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded()) return absl::InternalError("not JSON: " + out.substr(0, 2000));
  return j;
}

absl::StatusOr<std::string> CurlText(const std::string& url) {
  auto [rc, out] = Shell("curl -s -S --max-time 60 " + ShellQuote(url));
  if (rc != 0) return absl::InternalError(absl::StrCat("curl rc ", rc, ": ", out));
  return out;
}

nlohmann::json Post(const ServerProcess& s, const std::string& path, const nlohmann::json& body) {
  auto r = CurlJson(s.url() + path, body);
  EXPECT_TRUE(r.ok()) << r.status() << "\n" << Tail(s.log());
  return r.ok() ? *r : nlohmann::json::object();
}

nlohmann::json Status(const ServerProcess& s) { return Post(s, "/kvtier", nlohmann::json()); }

void WaitPut(const ServerProcess& s, uint64_t chunks, uint64_t tails) {
  for (int i = 0; i < 200; ++i) {
    const nlohmann::json st = Status(s);
    if (st.value("chunks_put", uint64_t{0}) >= chunks &&
        st.value("tails_put", uint64_t{0}) >= tails)
      return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ADD_FAILURE() << "stores did not reach the tiers: " << Status(s).dump() << "\n" << Tail(s.log());
}

}  // namespace kvt::llamacpp::testing
