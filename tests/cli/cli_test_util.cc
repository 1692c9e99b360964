#include "cli_test_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "../kvstore/test_records.h"

namespace kvt::clitest {

namespace {
std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

TempDir::TempDir() {
  std::string tmpl = "/tmp/kvtier-cli-XXXXXX";
  char* p = ::mkdtemp(tmpl.data());
  path_ = p != nullptr ? p : "/tmp/kvtier-cli-fallback";
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

RunResult Run(const std::string& bin, const std::vector<std::string>& args, int timeout_s,
              const std::vector<std::pair<std::string, std::string>>& env) {
  TempDir io;
  const std::string out_path = io.path() + "/out", err_path = io.path() + "/err";
  const pid_t pid = ::fork();
  if (pid == 0) {
    int o = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(o, 1);
    ::dup2(e, 2);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(bin.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::unsetenv("KVTIER_DAEMON");
    ::unsetenv("KVTIER_TOKEN");
    ::setenv("XDG_RUNTIME_DIR", io.path().c_str(), 1);
    for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  RunResult r;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int status = 0;
  for (;;) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (std::chrono::steady_clock::now() > until) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      r.exit_code = -9;
      r.out = Slurp(out_path);
      r.err = Slurp(err_path);
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = Slurp(out_path);
  r.err = Slurp(err_path);
  return r;
}

void WriteTokens(const std::string& path, const std::vector<TokenId>& tokens) {
  std::ofstream out(path);
  for (size_t i = 0; i < tokens.size(); ++i)
    out << (i ? (i % 16 == 0 ? "\n" : " ") : "") << tokens[i];
  out << "\n";
}

NamespaceParams TestParams(const std::string& model, const std::string& tenant) {
  NamespaceParams p;
  p.model_id = model;
  p.layout.num_layers = 2;
  p.layout.num_kv_heads = 2;
  p.layout.head_dim = 8;
  p.layout.dtype = DType::kF16;
  p.chunk_tokens = 16;
  p.tenant = tenant;
  return p;
}

std::vector<std::string> NsFlags(const std::string& model, const std::string& tenant) {
  std::vector<std::string> f = {"--model",    model, "--layers", "2",   "--kv-heads",     "2",
                                "--head-dim", "8",   "--dtype",  "f16", "--chunk-tokens", "16"};
  if (!tenant.empty()) {
    f.push_back("--tenant");
    f.push_back(tenant);
  }
  return f;
}

std::vector<TokenId> Tokens(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<TokenId> t(n);
  for (auto& x : t) x = static_cast<TokenId>(rng() % 128000);
  return t;
}

std::vector<PromptChunk> PromptChunks(const NamespaceParams& params,
                                      const std::vector<TokenId>& tokens) {
  const NamespaceId ns = ComputeNamespace(params);
  ChunkKeyOptions ko;
  ko.chunk_tokens = params.chunk_tokens;
  const std::vector<ChunkKey> keys = ComputeChunkKeys(ns, tokens, ko);
  std::vector<PromptChunk> out;
  ChunkChainEncoder chain(ns, params.layout);
  for (const ChunkKey& key : keys) {
    std::vector<std::byte> payload(params.layout.payload_bytes(params.chunk_tokens));
    for (size_t i = 0; i < payload.size(); ++i)
      payload[i] = static_cast<std::byte>((key.lo >> (i % 8 * 8)) + i);
    const ChunkKey parent = chain.parent();
    out.push_back(PromptChunk{key, parent,
                              testing::EncodeNextOrDie(chain, key, params.chunk_tokens, payload)});
  }
  return out;
}

std::vector<std::vector<std::string>> TableRows(const std::string& text,
                                                const std::string& first_header) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text);
  std::string line;
  bool inside = false;
  auto split = [](const std::string& l) {
    std::vector<std::string> cells;
    size_t i = 0;
    while (i < l.size()) {
      while (i < l.size() && l[i] == ' ') ++i;
      if (i >= l.size()) break;
      size_t j = i;
      while (j < l.size() && !(l[j] == ' ' && j + 1 < l.size() && l[j + 1] == ' ')) ++j;
      std::string cell = l.substr(i, j - i);
      while (!cell.empty() && cell.back() == ' ') cell.pop_back();
      cells.push_back(cell);
      i = j;
    }
    return cells;
  };
  while (std::getline(in, line)) {
    if (!inside) {
      auto cells = split(line);
      if (!cells.empty() && cells[0] == first_header) inside = true;
      continue;
    }
    if (line.empty()) break;
    rows.push_back(split(line));
  }
  return rows;
}

}  // namespace kvt::clitest
