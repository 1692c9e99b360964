// Helpers for the kvtier-llama-server tests (issue 10): real server processes on
// loopback ports, driven through their HTTP API with curl (the client a user has).
#ifndef TESTS_LLAMACPP_SERVER_TEST_UTIL_H_
#define TESTS_LLAMACPP_SERVER_TEST_UTIL_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "server_process.h"  // connectors/llamacpp/demo/server/

namespace kvt::llamacpp::testing {

using demo::ServerProcess;
inline std::string Tail(const std::string& path) { return demo::TailOfFile(path); }

// Runs `binary args...` to completion; returns (exit code, stdout+stderr).
std::pair<int, std::string> RunToExit(const std::string& binary,
                                      const std::vector<std::string>& args);

// curl: POST `body` (JSON) to url+path, or GET when body is null. Returns the parsed
// JSON answer; Internal with curl's output when curl fails or the answer is not JSON.
absl::StatusOr<nlohmann::json> CurlJson(const std::string& url, const nlohmann::json& body,
                                        int max_time_s = 300);
// curl GET returning the raw body (e.g. /metrics).
absl::StatusOr<std::string> CurlText(const std::string& url);

// CurlJson against server `s` (url + path); a failure is a test failure (with the tail of
// the server's log) and returns an empty object.
nlohmann::json Post(const ServerProcess& s, const std::string& path, const nlohmann::json& body);
// The server's GET /kvtier object (Post with a null body).
nlohmann::json Status(const ServerProcess& s);
// Waits (10 s at most) until the server's queued stores reached its tiers: /kvtier
// chunks_put >= chunks and tails_put >= tails; else a test failure naming the status.
void WaitPut(const ServerProcess& s, uint64_t chunks, uint64_t tails = 0);

}  // namespace kvt::llamacpp::testing

#endif  // TESTS_LLAMACPP_SERVER_TEST_UTIL_H_
