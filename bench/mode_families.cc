// kvtier-bench families: one table row per model family kvtier-llama-server restores
// exactly (docs/models.md), each measured against plain llama-server in the same run.
//
// Per family (--archs): the generated model (kvtier-make-gguf --arch A --size S, made once
// and kept in --model-dir as kvtier-<arch>-<size>.gguf, the name scripts/demo.sh uses),
// then kvtier-server-demo on it with the family's server flags and the document workload
// (--workload document: the ~4.4k-token document alone, --json). From the demo's JSON row
// of the document it prints:
//   * record bytes per chunk: the KV rows (GET /kvtier bytes_per_token x chunk tokens) and
//     the boundary snapshot (GET /kvtier snapshot_bytes; 0 for a model without recurrent
//     state). A record is these + its 128-byte header,
//     the payload padded (docs/chunk-format.md);
//   * host-tier hit / llama-server's own RAM-cache hit (target <= 1.30);
//   * cold / a fresh server restoring from disk, at >= 4k restored tokens (target >= 10);
//   * cold prefill / llama.cpp's own llama-server binary (target <= 1.10);
//   * whether every answer through kvtier equals plain llama-server's bit for bit (the
//     demo's reference: its RAM-cache hit, or its slot-cache hit for sliding-window
//     models).
// A family the server refuses prints "refused: <reason>"; a family that fails (a missing
// binary, a model that cannot be made, a demo that did not finish) prints the error in its
// row. The exit code is 0 when the table was printed; PASS/FAIL is per target in the table.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench_mode.h"
#include "nlohmann/json.hpp"

namespace kvt::bench {
namespace {

using json = nlohmann::json;

// A row of the table: a generated model of `arch` served with `server_args` (every
// server of the demo's run, plain ones too). The flags are those scripts/demo.sh and
// docs/models.md give: sliding-window models need a full-size window cache (--swa-full);
// the demo's servers run one slot (-np 1), the one KV stream hybrid and recurrent models
// need.
struct Family {
  const char* name;
  const char* arch;
  std::vector<std::string> server_args;
  bool exact;  // listed as exact in kvtier-llama-server (docs/models.md): in the default set
};

const std::vector<Family>& Families() {
  static const std::vector<Family> kFamilies = {
      {"llama", "llama", {}, true},
      {"llama-q8_0", "llama", {"-ctk", "q8_0", "-ctv", "f16"}, true},
      {"deepseek2", "deepseek2", {}, true},
      {"gemma3", "gemma3", {"--swa-full"}, true},
      {"gpt-oss", "gpt-oss", {"--swa-full"}, true},
      {"qwen35", "qwen35", {}, true},
      {"granitehybrid", "granitehybrid", {}, true},
      {"lfm2", "lfm2", {}, true},
      {"mamba2", "mamba2", {}, true},
      // Refused by the server (no full-size window cache): the row shows its reason.
      {"gemma3-no-swa-full", "gemma3", {}, false},
      {"gpt-oss-no-swa-full", "gpt-oss", {}, false},
  };
  return kFamilies;
}

const Family* FindFamily(const std::string& name) {
  for (const Family& f : Families())
    if (name == f.name) return &f;
  return nullptr;
}

struct Flags {
  std::vector<std::string> archs;
  std::string size = "demo";
  std::string model_dir = ".kvtier-demo/models";
  std::string dir = ".kvtier-bench/families";
  int repeats = 3;
  int threads = 2;
  int chunk = 256;
  int timeout_s = 3600;
  bool no_kvtierd = false;
  bool json = false;
  std::string demo_bin, make_gguf_bin, server_bin, upstream_bin, kvtierd_bin;
};

// What one family measured; every optional is "not measured".
struct Result {
  std::string family, arch, args;
  std::string error;    // the family did not run: why
  std::string refused;  // the server refused the family: its reason
  std::string memory;
  std::string log_dir;
  int chunk_tokens = 0;
  std::optional<int64_t> bytes_per_token, snapshot_bytes;
  int prompt_tokens = 0, loaded_tokens = 0;
  std::optional<double> cold_ms, host_ms, ram_ms, disk_ms, kvtierd_ms, upstream_ms;
  std::optional<bool> identical;
  std::string reference;
  double seconds = 0;

  std::optional<double> HostOverRam() const {
    if (host_ms && ram_ms && *ram_ms > 0) return *host_ms / *ram_ms;
    return std::nullopt;
  }
  // Only for a restore of >= 4k tokens (the target's condition).
  std::optional<double> ColdOverDisk() const {
    if (loaded_tokens >= 4096 && cold_ms && disk_ms && *disk_ms > 0) return *cold_ms / *disk_ms;
    return std::nullopt;
  }
  std::optional<double> ColdOverUpstream() const {
    if (cold_ms && upstream_ms && *upstream_ms > 0) return *cold_ms / *upstream_ms;
    return std::nullopt;
  }
};

struct Target {
  const char* key;
  double limit;
  bool at_most;
  bool Pass(std::optional<double> v) const { return v && (at_most ? *v <= limit : *v >= limit); }
};
constexpr Target kHostTarget{"host_over_ram_cache", 1.30, true};
constexpr Target kDiskTarget{"cold_over_fresh_disk", 10.0, false};
constexpr Target kColdTarget{"cold_over_llama_server", 1.10, true};

std::string Thousands(int64_t v) {
  const std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out = v < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

std::string LastLine(const std::string& text) {
  std::string last;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) last = line;
  return last;
}

// Runs argv (argv[0] a path) with stdout into `out` and stderr into `err`; its exit code,
// or a negative number: -1 could not start, -2 killed after `timeout_s`, -3 killed by a
// signal. The demo gets SIGTERM when this process dies, and its servers die with it (it
// starts them with PR_SET_PDEATHSIG).
int RunTo(const std::vector<std::string>& argv, const std::string& out, const std::string& err,
          int timeout_s) {
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // a bench stopped by a signal stops its demo
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o >= 0) dup2(o, 1);
    if (e >= 0) dup2(e, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int status = 0;
  while (true) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0) return -1;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGTERM);
      for (int i = 0; i < 50 && waitpid(pid, &status, WNOHANG) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -2;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status) == 127 ? -1 : WEXITSTATUS(status);
  return -3;
}

bool Executable(const std::string& path) {
  return !path.empty() && access(path.c_str(), X_OK) == 0;
}

// The family's model, made with kvtier-make-gguf when --model-dir does not hold it yet
// (written beside it first, then renamed: a cut-short run leaves no half model).
std::string EnsureModel(const Flags& f, const Family& fam, std::string* error) {
  const std::string path = absl::StrFormat("%s/kvtier-%s-%s.gguf", f.model_dir, fam.arch, f.size);
  if (std::filesystem::exists(path)) return path;
  if (!Executable(f.make_gguf_bin)) {
    *error = "kvtier-make-gguf not found ('" + f.make_gguf_bin + "'; pass --make-gguf)";
    return "";
  }
  std::error_code ec;
  std::filesystem::create_directories(f.model_dir, ec);
  const std::string tmp = path + ".tmp";
  const std::string log = path + ".log";
  std::fprintf(stderr, "families: making %s ...\n", path.c_str());
  const int rc =
      RunTo({f.make_gguf_bin, "--arch", fam.arch, "--size", f.size, "--out", tmp}, log, log, 1800);
  if (rc != 0 || !std::filesystem::exists(tmp)) {
    *error = absl::StrFormat("kvtier-make-gguf failed (exit %d): %s", rc, LastLine(ReadAll(log)));
    std::filesystem::remove(tmp, ec);
    return "";
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    *error = "cannot rename " + tmp + ": " + ec.message();
    return "";
  }
  return path;
}

std::optional<double> Num(const json& j, const char* key) {
  if (j.contains(key) && j[key].is_number()) return j[key].get<double>();
  return std::nullopt;
}

Result RunFamily(const Flags& f, const std::string& name) {
  Result r;
  r.family = name;
  const auto t0 = std::chrono::steady_clock::now();
  const Family* fam = FindFamily(name);
  if (fam == nullptr) {
    std::vector<std::string> known;
    for (const Family& k : Families()) known.push_back(k.name);
    r.error = "unknown family (known: " + absl::StrJoin(known, ", ") + ")";
    return r;
  }
  r.arch = fam->arch;
  r.args = absl::StrJoin(fam->server_args, " ");
  if (!Executable(f.demo_bin)) {
    r.error = "kvtier-server-demo not found ('" + f.demo_bin + "'; pass --demo)";
    return r;
  }
  const std::string model = EnsureModel(f, *fam, &r.error);
  if (model.empty()) return r;
  const std::string dir = f.dir + "/" + name;
  r.log_dir = dir + "/run";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::vector<std::string> argv = {f.demo_bin,  "--model",
                                   model,       "--workload",
                                   "document",  "--json",
                                   "--dir",     dir,
                                   "--repeats", std::to_string(f.repeats),
                                   "--threads", std::to_string(f.threads),
                                   "--chunk",   std::to_string(f.chunk)};
  for (const std::string& a : fam->server_args) argv.push_back("--server-arg=" + a);
  if (!f.server_bin.empty()) argv.insert(argv.end(), {"--server", f.server_bin});
  if (!f.upstream_bin.empty()) argv.insert(argv.end(), {"--llama-server", f.upstream_bin});
  if (!f.kvtierd_bin.empty()) argv.insert(argv.end(), {"--kvtierd", f.kvtierd_bin});
  if (f.no_kvtierd) argv.push_back("--no-kvtierd");
  std::fprintf(stderr, "families: %s: %s\n", name.c_str(), absl::StrJoin(argv, " ").c_str());
  const std::string out = dir + "/demo.stdout", err = dir + "/demo.stderr";
  const int rc = RunTo(argv, out, err, f.timeout_s);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::optional<json> doc;
  std::istringstream lines(ReadAll(out));
  for (std::string line; std::getline(lines, line);) {
    json j = json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.value("workload", "") == "doc-qa") {
      doc = std::move(j);
      break;
    }
  }
  if (!doc) {
    r.error = rc == -2   ? absl::StrFormat("the demo ran past --timeout-s %d", f.timeout_s)
              : rc == -1 ? "cannot run " + f.demo_bin
                         : absl::StrFormat("the demo printed no document row (exit %d): %s", rc,
                                           LastLine(ReadAll(err)));
    r.error += " (logs: " + dir + ")";
    return r;
  }
  const json& d = *doc;
  if (d.value("kvtier_state", "") == "refused") {
    r.refused = d.value("kvtier_refused", std::string("(no reason given)"));
    return r;
  }
  r.memory = d.value("kvtier_memory", "");
  r.chunk_tokens = d.value("chunk_tokens", f.chunk);
  if (d.contains("kvtier_bytes_per_token") && d["kvtier_bytes_per_token"].is_number() &&
      d["kvtier_bytes_per_token"].get<int64_t>() >= 0)
    r.bytes_per_token = d["kvtier_bytes_per_token"].get<int64_t>();
  if (d.contains("kvtier_snapshot_bytes") && d["kvtier_snapshot_bytes"].is_number() &&
      d["kvtier_snapshot_bytes"].get<int64_t>() >= 0)
    r.snapshot_bytes = d["kvtier_snapshot_bytes"].get<int64_t>();
  r.prompt_tokens = d.value("prompt_tokens", 0);
  r.loaded_tokens = d.value("loaded_tokens", 0);
  r.cold_ms = Num(d, "ttft_cold_ms");
  r.host_ms = Num(d, "ttft_host_ms");
  r.ram_ms = Num(d, "ttft_server_cache_ms");
  r.disk_ms = Num(d, "ttft_disk_ms");
  r.kvtierd_ms = Num(d, "ttft_kvtierd_ms");
  r.upstream_ms = Num(d, "ttft_llama_server_ms");
  if (d.contains("identical") && d["identical"].is_boolean())
    r.identical = d["identical"].get<bool>();
  r.reference = d.value("reference", "");
  return r;
}

std::string Cell(std::optional<double> v, const Target& t, const std::string& why_not = "") {
  if (!v) return "not measured" + (why_not.empty() ? "" : " (" + why_not + ")") + " FAIL";
  return absl::StrFormat("%.2f %s", *v, t.Pass(v) ? "PASS" : "FAIL");
}

std::string RecordCell(const Result& r) {
  if (!r.bytes_per_token) return "unknown";
  const int64_t kv = *r.bytes_per_token * r.chunk_tokens;
  return absl::StrFormat("%s + %s (%s B/token)", Thousands(kv),
                         r.snapshot_bytes ? Thousands(*r.snapshot_bytes) : "?",
                         Thousands(*r.bytes_per_token));
}

void PrintTable(FILE* out, const Flags& f, const std::vector<Result>& results) {
  std::fprintf(out,
               "\n| family | memory | record bytes per chunk: KV rows + snapshot | host hit / RAM "
               "hit (<= 1.30) | cold / fresh from disk, >= 4k cached (>= 10) | cold / llama-server "
               "(<= 1.10) | answers bit-identical | targets |\n");
  std::fprintf(out, "| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const Result& r : results) {
    const std::string fam = r.family + (r.args.empty() ? "" : " (" + r.args + ")");
    if (!r.error.empty() || !r.refused.empty()) {
      const std::string why = r.error.empty() ? "refused: " + r.refused : "error: " + r.error;
      std::fprintf(out, "| %s | %s | - | - | - | - | - | - |\n", fam.c_str(), why.c_str());
      continue;
    }
    const bool pass = kHostTarget.Pass(r.HostOverRam()) && kDiskTarget.Pass(r.ColdOverDisk()) &&
                      kColdTarget.Pass(r.ColdOverUpstream()) && r.identical.value_or(false);
    std::fprintf(out, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", fam.c_str(),
                 r.memory.empty() ? "?" : r.memory.c_str(), RecordCell(r).c_str(),
                 Cell(r.HostOverRam(), kHostTarget).c_str(),
                 Cell(r.ColdOverDisk(), kDiskTarget,
                      r.loaded_tokens < 4096 ? absl::StrFormat("%d restored", r.loaded_tokens) : "")
                     .c_str(),
                 Cell(r.ColdOverUpstream(), kColdTarget).c_str(),
                 r.identical ? (*r.identical ? "yes" : "NO") : "not compared",
                 pass ? "PASS" : "FAIL");
  }
  std::fprintf(out,
               "\n%s models (kvtier-make-gguf --size %s), %d repeat(s) (medians), %d server "
               "threads, %d-token chunks; the ~4.4k-token document (kvtier-server-demo "
               "--workload document). Record = 128-byte header + payload (KV rows + snapshot, "
               "padded). RAM hit = plain llama-server's --cache-ram hit; fresh from disk = a new "
               "kvtier-llama-server restoring from its disk tier; llama-server = llama.cpp's own "
               "binary, cold. Logs: %s/<family>/run.\n",
               f.size.c_str(), f.size.c_str(), f.repeats, f.threads, f.chunk, f.dir.c_str());
  for (const Result& r : results) {
    if (r.error.empty() && r.refused.empty())
      std::fprintf(out,
                   "%s: %d of %d tokens restored; TTFT ms cold %s, llama-server %s, RAM hit %s, "
                   "host hit %s, fresh disk %s, fresh kvtierd %s; %.0f s\n",
                   r.family.c_str(), r.loaded_tokens, r.prompt_tokens,
                   r.cold_ms ? absl::StrFormat("%.1f", *r.cold_ms).c_str() : "-",
                   r.upstream_ms ? absl::StrFormat("%.1f", *r.upstream_ms).c_str() : "-",
                   r.ram_ms ? absl::StrFormat("%.1f", *r.ram_ms).c_str() : "-",
                   r.host_ms ? absl::StrFormat("%.1f", *r.host_ms).c_str() : "-",
                   r.disk_ms ? absl::StrFormat("%.1f", *r.disk_ms).c_str() : "-",
                   r.kvtierd_ms ? absl::StrFormat("%.1f", *r.kvtierd_ms).c_str() : "-", r.seconds);
  }
}

json ToJson(const Result& r) {
  auto opt = [](const auto& v) { return v ? json(*v) : json(nullptr); };
  json j = {{"family", r.family}, {"arch", r.arch}, {"server_args", r.args}};
  if (!r.error.empty()) {
    j["error"] = r.error;
    return j;
  }
  if (!r.refused.empty()) {
    j["refused"] = r.refused;
    return j;
  }
  j["memory"] = r.memory;
  j["chunk_tokens"] = r.chunk_tokens;
  j["kv_bytes_per_token"] = opt(r.bytes_per_token);
  j["kv_bytes_per_chunk"] =
      r.bytes_per_token ? json(*r.bytes_per_token * r.chunk_tokens) : json(nullptr);
  j["snapshot_bytes_per_chunk"] = opt(r.snapshot_bytes);
  j["prompt_tokens"] = r.prompt_tokens;
  j["loaded_tokens"] = r.loaded_tokens;
  j["ttft_cold_ms"] = opt(r.cold_ms);
  j["ttft_llama_server_ms"] = opt(r.upstream_ms);
  j["ttft_ram_cache_ms"] = opt(r.ram_ms);
  j["ttft_host_ms"] = opt(r.host_ms);
  j["ttft_fresh_disk_ms"] = opt(r.disk_ms);
  j["ttft_fresh_kvtierd_ms"] = opt(r.kvtierd_ms);
  for (const auto& [t, v] :
       {std::pair{kHostTarget, r.HostOverRam()}, std::pair{kDiskTarget, r.ColdOverDisk()},
        std::pair{kColdTarget, r.ColdOverUpstream()}}) {
    j[t.key] = opt(v);
    j[std::string("pass_") + t.key] = t.Pass(v);
  }
  j["identical"] = opt(r.identical);
  j["reference"] = r.reference;
  j["seconds"] = r.seconds;
  j["logs"] = r.log_dir;
  return j;
}

int RunFamilies(int argc, char** argv) {
  CLI::App app{
      "one row per model family: record bytes per chunk and the demo's targets against "
      "plain llama-server",
      "families"};
  Flags f;
#ifdef KVT_BENCH_SERVER_DEMO
  f.demo_bin = KVT_BENCH_SERVER_DEMO;
#endif
#ifdef KVT_BENCH_MAKE_GGUF
  f.make_gguf_bin = KVT_BENCH_MAKE_GGUF;
#endif
  std::string archs;
  std::vector<std::string> defaults, known;
  for (const Family& fam : Families()) {
    known.push_back(fam.name);
    if (fam.exact) defaults.push_back(fam.name);
  }
  app.add_option("--archs", archs,
                 "comma-separated families (default: those exact in kvtier-llama-server: " +
                     absl::StrJoin(defaults, ",") + "; also: " + absl::StrJoin(known, ",") + ")");
  app.add_option("--size", f.size, "generated model size")
      ->check(CLI::IsMember({"tiny", "demo"}))
      ->capture_default_str();
  app.add_option("--model-dir", f.model_dir,
                 "where models are made once and reused (kvtier-<arch>-<size>.gguf)")
      ->capture_default_str();
  app.add_option("--dir", f.dir, "run folders, one per family (the demo's logs)")
      ->capture_default_str();
  app.add_option("--repeats", f.repeats, "repeats of every measurement (medians)")
      ->check(CLI::Range(1, 50))
      ->capture_default_str();
  app.add_option("--threads", f.threads, "server threads")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--chunk", f.chunk, "tokens per kvtier chunk")
      ->check(CLI::Range(16, 8192))
      ->capture_default_str();
  app.add_option("--timeout-s", f.timeout_s, "seconds a family's demo may run")
      ->check(CLI::Range(10, 86400))
      ->capture_default_str();
  app.add_flag("--no-kvtierd", f.no_kvtierd, "no kvtierd in the demo (its column is JSON only)");
  app.add_flag("--json", f.json, "one JSON object per family on stdout (the table on stderr)");
  app.add_option("--demo", f.demo_bin, "kvtier-server-demo binary")->capture_default_str();
  app.add_option("--make-gguf", f.make_gguf_bin, "kvtier-make-gguf binary")->capture_default_str();
  app.add_option("--server", f.server_bin, "kvtier-llama-server (default: the demo's)");
  app.add_option("--llama-server", f.upstream_bin,
                 "llama.cpp's llama-server (default: the demo's)");
  app.add_option("--kvtierd", f.kvtierd_bin, "kvtierd (default: the demo's)");
  app.footer("Exit codes: 0 the table was printed (PASS/FAIL per target in it); 2 bad flags.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  f.archs = archs.empty() ? defaults
                          : std::vector<std::string>(absl::StrSplit(archs, ',', absl::SkipEmpty()));
  // The demo runs in its own folder: absolute paths keep the model and logs where asked.
  auto absolute = [](std::string& p) {
    std::error_code ec;
    if (!p.empty()) p = std::filesystem::absolute(p, ec).lexically_normal().string();
  };
  absolute(f.model_dir);
  absolute(f.dir);

  std::vector<Result> results;
  for (const std::string& name : f.archs) {
    results.push_back(RunFamily(f, name));
    const Result& r = results.back();
    std::fprintf(stderr, "families: %s done (%.0f s)%s\n", name.c_str(), r.seconds,
                 r.error.empty() ? "" : (": " + r.error).c_str());
  }
  PrintTable(f.json ? stderr : stdout, f, results);
  if (f.json)
    for (const Result& r : results) std::printf("%s\n", ToJson(r).dump().c_str());
  return 0;
}

}  // namespace
}  // namespace kvt::bench

KVT_BENCH_MODE(families, "one row per model family: record bytes, demo targets vs llama-server",
               kvt::bench::RunFamilies);
