// kvtier-server-demo: the README's demo, through kvtier-llama-server's HTTP API.
//
// TTFT is measured on the client (time to the first streamed token) for each request in
// five configurations, interleaved request by request, each repeated (default 3 times;
// medians printed):
//   cold          plain llama-server (no kvtier flags), cache_prompt=false
//   server-cache  the same server's own RAM prompt cache (a filler request first, so the
//                 prompt's state is restored from --cache-ram, not reused in the slot)
//   host          kvtier-llama-server, kvtier host tier (a filler first; --cache-ram 0)
//   disk          a fresh kvtier-llama-server process on kvtier's disk tier
//   kvtierd       a fresh kvtier-llama-server process on kvtierd (started here, or joined
//                 with --kvtierd-address)
//   llama-server  llama.cpp's own llama-server binary from the same build, cold: the cold
//                 column must be as fast (same model, threads, batch)
//   slot-cache    plain llama-server's slot-cache hit (the prompt sent again while its slot
//                 still holds it): the exact-reuse reference for iSWA models (evidence and
//                 CSV only)
// No-reuse prompts (new every repeat) run on plain llama-server and on the kvtier server
// (a miss): their ratio shows what kvtier costs when nothing is cached.
// Evidence: <dir>/run/evidence.jsonl holds each answer's first token and its top-n
// probabilities (with a hash) and the tokens kvtier restored; "identical" compares them
// with plain llama-server's answer from the same restored prefix (when kvtier restored all
// but the last token: its RAM-cache hit, or for iSWA models its slot-cache hit, see
// ExactReference; else its cold answer).
// Output: a table (stdout, or stderr with --json), <dir>/run/ttft.csv, <dir>/run/ttft.png
// (matplotlib, when python3 has it), and with --json one JSON object per request.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "demo_report.h"
#include "kvtierd_process.h"
#include "llamacpp/gguf_generator.h"
#include "server_client.h"
#include "server_process.h"

namespace kvt::llamacpp::demo {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
std::vector<std::string> With(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

struct Flags {
  std::string model;
  bool small = false;
  bool full = false;
  bool quick = false;  // a tiny workload: one chat turn, a ~600-token document, one no-reuse
  // "all" (chat turns, the document, no-reuse prompts) or "document" (the document alone:
  // the rows the >= 4k-token targets and the host-tier and cold-prefill ratios need).
  std::string workload = "all";
  int threads = 2;
  int repeats = 3;
  int chunk = 256;
  std::string dir = ".kvtier-demo";
  std::string data_dir;
  std::string server_bin;
  std::string upstream_bin;  // llama.cpp's llama-server ("" = that column is not run)
  std::string kvtierd_bin;
  std::string kvtierd_address;
  bool no_kvtierd = false;
  bool json = false;
  bool check = false;
  // Extra llama-server flags for every server of the run, plain ones included (e.g.
  // --swa-full, which kvtier needs for sliding-window models: docs/models.md).
  std::vector<std::string> server_args;
};

std::string DefaultDataDir() {
  if (const char* e = std::getenv("KVTIER_DEMO_DATA"); e != nullptr && *e) return e;
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec && std::filesystem::exists(self.parent_path() / "data" / "gpl-3.0.txt")) {
    return (self.parent_path() / "data").string();
  }
#ifdef KVT_DEMO_DATA_DIR
  if (std::filesystem::exists(std::string(KVT_DEMO_DATA_DIR) + "/gpl-3.0.txt"))
    return KVT_DEMO_DATA_DIR;
#endif
  return "";
}

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

absl::StatusOr<std::string> EnsureModel(const Flags& f) {
  if (!f.model.empty()) return f.model;
  const std::string size = f.small ? "tiny" : "demo";
  const std::string path = absl::StrFormat("%s/models/kvtier-%s.gguf", f.dir, size);
  if (std::filesystem::exists(path)) return path;
  absl::StatusOr<SyntheticModelSpec> spec = SyntheticModelPreset(size, DefaultVocabPath());
  if (!spec.ok()) return spec.status();
  std::filesystem::create_directories(f.dir + "/models");
  std::fprintf(stderr, "demo: generating the %s model (seeded random weights) at %s ...\n",
               size.c_str(), path.c_str());
  if (absl::Status s = WriteSyntheticModel(*spec, path); !s.ok()) return s;
  return path;
}

// Chat turns and document questions as text; no-reuse prompts as slices per repeat.
struct TextWorkload {
  std::vector<std::pair<std::string, std::string>> reuse;  // (workload, text)
  std::string no_reuse_source;
};

absl::StatusOr<TextWorkload> BuildTexts(const Flags& f) {
  TextWorkload w;
  absl::StatusOr<std::string> chat = ReadText(f.data_dir + "/chat.txt");
  if (!chat.ok()) return chat.status();
  std::string history = "system: You are a helpful, concise gardening assistant.";
  std::istringstream in(*chat);
  std::string line, role, text;
  auto flush = [&] {
    if (role.empty()) return;
    history += "\n" + role + ": " + text;
    if (role == "user") w.reuse.emplace_back("chat", history + "\nassistant:");
    role.clear();
    text.clear();
  };
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] == '#') continue;
    if (line == "user:" || line == "assistant:") {
      flush();
      role = line.substr(0, line.size() - 1);
    } else if (!role.empty() && !line.empty()) {
      text += (text.empty() ? "" : "\n") + line;
    }
  }
  flush();
  if (f.quick && w.reuse.size() > 1) w.reuse.resize(1);
  if (f.workload == "document") w.reuse.clear();
  absl::StatusOr<std::string> gpl = ReadText(f.data_dir + "/gpl-3.0.txt");
  if (!gpl.ok()) return gpl.status();
  // ~4.4k tokens (--quick: ~600)
  std::string doc = gpl->substr(0, std::min<size_t>(gpl->size(), f.quick ? 2600 : 19000));
  const char* questions[] = {
      "What freedoms does this license want to guarantee to users of free software?",
      "Under which conditions may I convey a covered work in object code form?",
      "What happens to my rights under the license if I violate its terms?"};
  const int n_questions = f.full ? 3 : 1;
  for (int q = 0; q < n_questions; ++q) {
    w.reuse.emplace_back("doc-qa", doc + "\n\nQuestion: " + questions[q] + "\nAnswer:");
  }
  absl::StatusOr<std::string> apache = ReadText(f.data_dir + "/apache-2.0.txt");
  if (!apache.ok()) return apache.status();
  w.no_reuse_source = *apache;
  return w;
}

bool WaitForOtherProcessesIdle(pid_t measured);

class Demo {
 public:
  explicit Demo(Flags f) : f_(std::move(f)) {}
  int Run();

 private:
  std::vector<std::string> CommonArgs() const {
    std::vector<std::string> a = {"-m",         model_,
                                  "-t",         std::to_string(f_.threads),
                                  "-tb",        std::to_string(f_.threads),
                                  "-c",         "8192",
                                  "-np",        "1",
                                  "-ub",        std::to_string(f_.chunk),
                                  "--no-warmup"};
    a.insert(a.end(), f_.server_args.begin(), f_.server_args.end());
    return a;
  }
  std::vector<std::string> KvtierArgs(std::vector<std::string> more) const {
    std::vector<std::string> a = CommonArgs();
    a.insert(a.end(), {"--kvtier-chunk-tokens", std::to_string(f_.chunk), "--cache-ram", "0"});
    a.insert(a.end(), more.begin(), more.end());
    return a;
  }
  absl::StatusOr<std::unique_ptr<ServerProcess>> Start(const std::vector<std::string>& args,
                                                       const std::string& tag) {
    return ServerProcess::Start(f_.server_bin, args, run_dir_ + "/server-" + tag + ".log");
  }
  void Record(size_t row, Config c, int rep, const absl::StatusOr<Completion>& r,
              int kvtier_loaded = 0, double kvtier_path_ms = -1, SchedTimes sched = {});
  // Waits (at most 10 s) until the kvtier server's stores of earlier requests reached
  // its tiers, so no measurement shares the two cores with another request's write-back.
  void WaitStoresDone();
  // One measured request: waits for a quiet machine (QuietBeforeMeasuring), then sends
  // it; `sched` gets the server's CPU time and run-queue wait during it, busiest_other_
  // the busiest other process (both for Record's Sample).
  absl::StatusOr<Completion> MeasuredComplete(ServerProcess& s, const std::vector<int>& tokens,
                                              bool cache, SchedTimes* sched);
  // WaitForOtherProcessesIdle, counted in the report.
  void QuietBeforeMeasuring(pid_t measured) {
    ++report_.measured_requests;
    if (!WaitForOtherProcessesIdle(measured)) ++report_.started_busy;
  }
  void Measure(size_t row, Config c, int rep, const std::vector<int>& tokens);

  Flags f_;
  std::string model_, run_dir_, disk_dir_, kvtierd_addr_;
  std::unique_ptr<ServerProcess> plain_, kvt_, upstream_;
  std::unique_ptr<KvtierdProcess> kvtierd_;
  std::vector<int> filler_;
  Report report_;
  std::ofstream evidence_;
  std::string busiest_other_;  // set by Measure's measured requests, taken by Record
};

// Waits (at most 1 s) until no process but `measured` used 20 ms or more of CPU in the
// last 100 ms. A llama-server's threads keep spinning for ~75 ms each after every compute
// (ggml's threadpool polling, --poll, default 50: measured 150 ms of CPU after each
// response of a 2-thread server, none with --poll 0 --poll-batch 0), and on two cores
// the server measured next then waits for a CPU: its 1-token decode after a restore
// took 2 x as long. The servers keep llama.cpp's default; the measurement waits instead.
// Returns false when it gave up (the machine is busy with something else).
bool WaitForOtherProcessesIdle(pid_t measured) {
  const auto deadline = Clock::now() + std::chrono::seconds(1);
  auto before = ReadProcessCpuMs();
  while (Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto after = ReadProcessCpuMs();
    bool busy = false;
    for (const auto& [pid, p] : after) {
      auto b = before.find(pid);
      if (pid != measured && b != before.end() && p.second - b->second.second >= 20) busy = true;
    }
    if (!busy) return true;
    before = std::move(after);
  }
  return false;
}

absl::StatusOr<Completion> Demo::MeasuredComplete(ServerProcess& s, const std::vector<int>& tokens,
                                                  bool cache, SchedTimes* sched) {
  QuietBeforeMeasuring(s.pid());
  const auto procs_before = ReadProcessCpuMs();
  const SchedTimes before = ReadSchedTimes(s.pid());
  auto r = ServerClient("127.0.0.1", s.port()).Complete(tokens, cache);
  const SchedTimes after = ReadSchedTimes(s.pid());
  const auto procs_after = ReadProcessCpuMs();
  *sched = {};
  if (before.run_ms >= 0 && after.run_ms >= 0)
    *sched = {after.run_ms - before.run_ms, after.wait_ms - before.wait_ms};
  // The busiest process besides the server and this client (a kvtierd serving the request
  // counts: it shares the cores too).
  double most = 0;
  busiest_other_.clear();
  for (const auto& [pid, p] : procs_after) {
    auto b = procs_before.find(pid);
    const double used = p.second - (b == procs_before.end() ? 0 : b->second.second);
    if (pid != s.pid() && pid != getpid() && used > most) {
      most = used;
      busiest_other_ = absl::StrFormat("%s (%d) %.0f ms", p.first, pid, used);
    }
  }
  return r;
}

void Demo::WaitStoresDone() {
  if (!kvt_) return;
  const auto t0 = Clock::now();
  while (Seconds(t0) < 10) {
    auto j = ServerClient("127.0.0.1", kvt_->port()).GetJson("/kvtier");
    if (!j.ok() ||
        (j->value("writeback_pending_bytes", 0) == 0 && j->value("store_pending_bytes", 0) == 0)) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void Demo::Record(size_t row, Config c, int rep, const absl::StatusOr<Completion>& r,
                  int kvtier_loaded, double kvtier_path_ms, SchedTimes sched) {
  Sample s;
  s.repeat = rep;
  s.kvtier_loaded = kvtier_loaded;
  s.kvtier_path_ms = kvtier_path_ms;
  s.server_run_ms = sched.run_ms;
  s.server_wait_ms = sched.wait_ms;
  s.busiest_other = std::exchange(busiest_other_, std::string());
  if (r.ok()) {
    s.ok = true;
    s.ttft_ms = r->ttft_ms;
    s.prompt_ms = r->prompt_ms;
    s.cache_n = r->cache_n;
    s.prompt_n = r->prompt_n;
    s.first_token = r->first_token;
    s.first_probs = r->first_probs;
  } else {
    s.error = std::string(r.status().message());
  }
  Row& rr = report_.rows[row];
  std::fprintf(stderr, "  [%d/%d] %-8s #%d %-12s %s\n", rep + 1, f_.repeats, rr.workload.c_str(),
               rr.index, ConfigName(c),
               s.ok ? absl::StrFormat("%9.1f ms  cached %d, kvtier %d", s.ttft_ms, s.cache_n,
                                      s.kvtier_loaded)
                          .c_str()
                    : ("not run: " + s.error.substr(0, 160)).c_str());
  evidence_ << EvidenceLine(rr, c, rep, s) << "\n";
  evidence_.flush();
  rr.samples[static_cast<int>(c)].push_back(std::move(s));
}

void Demo::Measure(size_t row, Config c, int rep, const std::vector<int>& tokens) {
  auto complete = [&](ServerProcess& s, bool cache) {
    return ServerClient("127.0.0.1", s.port()).Complete(tokens, cache);
  };
  // A measured request: its completion, and the server's CPU time and run-queue wait
  // during it (evidence.jsonl: whether a slow one computed more or waited for a CPU).
  SchedTimes sched;
  auto measured = [&](ServerProcess& s, bool cache) {
    return MeasuredComplete(s, tokens, cache, &sched);
  };
  auto filler = [&](ServerProcess& s) {
    (void)ServerClient("127.0.0.1", s.port()).Complete(filler_, true);
  };
  // Tokens kvtier restored so far in `s` (its GET /kvtier).
  auto kvtier_loaded = [&](ServerProcess& s) {
    auto j = ServerClient("127.0.0.1", s.port()).GetJson("/kvtier");
    return j.ok() ? j->value("loaded_tokens", 0) : 0;
  };
  WaitStoresDone();
  // kvtier's time before the prefill so far in `s` (GET /kvtier prompt_start_seconds).
  auto kvtier_path_s = [&](ServerProcess& s) {
    auto j = ServerClient("127.0.0.1", s.port()).GetJson("/kvtier");
    return j.ok() ? j->value("prompt_start_seconds", 0.0) : -1.0;
  };
  switch (c) {
    case Config::kCold:
      if (!plain_) return Record(row, c, rep, absl::UnavailableError("plain server not running"));
      {
        auto r = measured(*plain_, false);  // before Record reads `sched`
        return Record(row, c, rep, r, 0, -1, sched);
      }
    case Config::kUpstream:
      if (!upstream_) return Record(row, c, rep, absl::UnavailableError("llama-server not run"));
      {
        auto r = measured(*upstream_, false);
        return Record(row, c, rep, r, 0, -1, sched);
      }
    case Config::kSlotCache:
      if (!plain_) return Record(row, c, rep, absl::UnavailableError("plain server not running"));
      // The slot holds the prompt as a prefill left it (the first request makes sure); the
      // measured one reuses all but its last token from the slot, not the RAM cache.
      (void)complete(*plain_, true);
      {
        auto r = measured(*plain_, true);
        return Record(row, c, rep, r, 0, -1, sched);
      }
    case Config::kServerCache:
      if (!plain_) return Record(row, c, rep, absl::UnavailableError("plain server not running"));
      (void)complete(*plain_,
                     true);  // the slot holds the prompt (usually already: cold ran just before)
      filler(*plain_);       // ... and is saved to the RAM cache
      {
        auto r = measured(*plain_, true);
        return Record(row, c, rep, r, 0, -1, sched);
      }
    case Config::kHost:
      if (!kvt_) return Record(row, c, rep, absl::UnavailableError("kvtier server not running"));
      // The same three requests as the RAM-cache column: the prompt (the first time, it
      // brings the chunks into this process's host tier), the filler, then the measured
      // restore. (The 2-3 x slower 1-token decodes measured here before were another
      // server's threads still polling on the shared cores: WaitForOtherProcessesIdle.)
      (void)complete(*kvt_, true);
      filler(*kvt_);
      WaitStoresDone();  // the filler's stores
      {
        const int before = kvtier_loaded(*kvt_);
        const double path_before = kvtier_path_s(*kvt_);
        auto r = measured(*kvt_, true);
        const double path_after = kvtier_path_s(*kvt_);
        return Record(
            row, c, rep, r, kvtier_loaded(*kvt_) - before,
            path_before >= 0 && path_after >= path_before ? (path_after - path_before) * 1000 : -1,
            sched);
      }
    case Config::kDisk:
    case Config::kKvtierd: {
      std::vector<std::string> more;
      if (c == Config::kDisk)
        more = {"--kvtier-dir", disk_dir_, "--kvtier-host-mib", "0"};
      else if (!kvtierd_addr_.empty())
        more = {"--kvtier-daemon", kvtierd_addr_, "--kvtier-host-mib", "0"};
      else
        return Record(row, c, rep, absl::UnavailableError(report_.kvtierd_note));
      auto s = Start(KvtierArgs(more), std::string(ConfigName(c)));
      if (!s.ok()) return Record(row, c, rep, s.status());
      auto r = measured(**s, true);
      Record(row, c, rep, r, kvtier_loaded(**s), -1, sched);
      (*s)->Stop();
      return;
    }
  }
}

int Demo::Run() {
  const auto t_start = Clock::now();
  report_.chunk_tokens = f_.chunk;
  run_dir_ = f_.dir + "/run";
  disk_dir_ = f_.dir + "/cache/disk";
  std::error_code ec;
  std::filesystem::remove_all(f_.dir + "/cache", ec);
  std::filesystem::create_directories(run_dir_, ec);
  evidence_.open(run_dir_ + "/evidence.jsonl", std::ios::trunc);
  absl::StatusOr<std::string> model = EnsureModel(f_);
  if (!model.ok()) {
    std::fprintf(stderr, "demo: %s\n", model.status().ToString().c_str());
    return 1;
  }
  model_ = *model;
  absl::StatusOr<TextWorkload> texts = BuildTexts(f_);
  if (!texts.ok()) {
    std::fprintf(stderr, "demo: %s (pass --data-dir)\n", texts.status().ToString().c_str());
    return 2;
  }
  // kvtierd: join one by address, or start our own.
  if (!f_.kvtierd_address.empty()) {
    kvtierd_addr_ = f_.kvtierd_address;
  } else if (f_.no_kvtierd || f_.kvtierd_bin.empty()) {
    report_.kvtierd_note =
        f_.no_kvtierd ? "--no-kvtierd" : "no kvtierd binary (built without the daemon)";
  } else {
    KvtierdProcessOptions ko;
    ko.binary = f_.kvtierd_bin;
    ko.run_dir = run_dir_;
    ko.data_dir = f_.dir + "/cache/kvtierd";
    ko.host_capacity_bytes = 1ull << 30;
    ko.disk_capacity_bytes = 2ull << 30;
    auto d = KvtierdProcess::Start(ko);
    if (d.ok()) {
      kvtierd_ = std::move(*d);
      kvtierd_addr_ = kvtierd_->target();
    } else {
      report_.kvtierd_note = std::string(d.status().message());
      std::fprintf(stderr, "demo: kvtierd column not run: %s\n", report_.kvtierd_note.c_str());
    }
  }
  std::fprintf(stderr, "demo: model %s, %d threads, chunk %d, %d repeats; servers log to %s\n",
               model_.c_str(), f_.threads, f_.chunk, f_.repeats, run_dir_.c_str());
  auto plain = Start(With(CommonArgs(), {"--cache-ram", "8192"}), "plain");
  if (!plain.ok()) {
    std::fprintf(stderr, "demo: %s\n", plain.status().ToString().c_str());
    return 1;
  }
  plain_ = std::move(*plain);
  if (!f_.upstream_bin.empty()) {
    auto up = ServerProcess::Start(f_.upstream_bin, With(CommonArgs(), {"--cache-ram", "8192"}),
                                   run_dir_ + "/server-llama-server.log");
    if (up.ok())
      upstream_ = std::move(*up);
    else
      std::fprintf(stderr, "demo: llama-server column not run: %s\n",
                   up.status().ToString().c_str());
  }
  ServerClient pc("127.0.0.1", plain_->port());
  auto filler = pc.Tokenize("The weather today is mild and the garden is quiet.", true);
  if (!filler.ok()) {
    std::fprintf(stderr, "demo: %s\n", filler.status().ToString().c_str());
    return 1;
  }
  filler_ = *filler;
  std::map<std::string, int> counters;
  for (auto& [workload, text] : texts->reuse) {
    auto ids = pc.Tokenize(text, true);
    if (!ids.ok()) return 1;
    Row r;
    r.workload = workload;
    r.index = ++counters[workload];
    r.tokens = *ids;
    report_.rows.push_back(std::move(r));
  }
  auto apache = pc.Tokenize(texts->no_reuse_source, false);
  if (!apache.ok()) return 1;
  const size_t nr_tokens = 300, nr_prompts = f_.workload == "document" ? 0
                                             : f_.full                 ? 3
                                             : f_.quick                ? 1
                                                                       : 2;
  std::vector<std::vector<std::vector<int>>> no_reuse(nr_prompts);  // [prompt][repeat]
  for (size_t i = 0; i < nr_prompts; ++i) {
    Row r;
    r.workload = "no-reuse";
    r.index = static_cast<int>(i + 1);
    for (int rep = 0; rep < f_.repeats; ++rep) {
      const size_t begin = (rep * nr_prompts + i) * nr_tokens;
      std::vector<int> t = {filler_.empty() ? 1 : filler_[0]};
      if (begin + nr_tokens <= apache->size()) {
        t.insert(t.end(), apache->begin() + begin, apache->begin() + begin + nr_tokens);
      }
      no_reuse[i].push_back(t);
    }
    r.tokens = no_reuse[i][0];
    report_.rows.push_back(std::move(r));
  }
  const size_t n_reuse = texts->reuse.size();

  // Prime: one server with the disk tier (and kvtierd) computes each reuse prompt once.
  std::fprintf(
      stderr,
      "demo: storing the prompts' chunks (one cold pass through kvtier-llama-server) ...\n");
  {
    std::vector<std::string> more = {"--kvtier-dir", disk_dir_, "--kvtier-host-mib", "0"};
    if (!kvtierd_addr_.empty()) more.insert(more.end(), {"--kvtier-daemon", kvtierd_addr_});
    auto p = Start(KvtierArgs(more), "prime");
    if (!p.ok()) {
      std::fprintf(stderr, "demo: %s\n", p.status().ToString().c_str());
      return 1;
    }
    ServerClient c("127.0.0.1", (*p)->port());
    for (size_t i = 0; i < n_reuse; ++i) {
      auto r = c.Complete(report_.rows[i].tokens, true);
      std::fprintf(stderr, "  prime %-8s #%d %5zu tokens %s\n", report_.rows[i].workload.c_str(),
                   report_.rows[i].index, report_.rows[i].tokens.size(),
                   r.ok() ? absl::StrFormat("%.1f s", r->ttft_ms / 1000).c_str()
                          : r.status().ToString().c_str());
    }
    (*p)->Stop();  // flushes the queued stores
  }
  auto kvt = Start(KvtierArgs(kvtierd_addr_.empty()
                                  ? std::vector<std::string>{"--kvtier-host-mib", "4096"}
                                  : std::vector<std::string>{"--kvtier-host-mib", "4096",
                                                             "--kvtier-daemon", kvtierd_addr_}),
                   "kvtier");
  if (kvt.ok())
    kvt_ = std::move(*kvt);
  else
    std::fprintf(stderr, "demo: kvtier server: %s\n", kvt.status().ToString().c_str());
  if (kvt_) {  // the model's memory kind picks the exact-reuse reference (ExactReference)
    auto j = ServerClient("127.0.0.1", kvt_->port()).GetJson("/kvtier");
    if (j.ok()) {
      report_.memory = j->value("memory", "");
      report_.kvtier_state = j->value("state", "");
      report_.kvtier_refused = j->value("refused", "");
      report_.bytes_per_token = j->value("bytes_per_token", int64_t{-1});
      report_.snapshot_bytes = j->value("snapshot_bytes", int64_t{-1});
    }
    std::fprintf(stderr, "demo: model memory %s; exact-reuse reference: llama-server's %s\n",
                 report_.memory.empty() ? "unknown" : report_.memory.c_str(),
                 ConfigName(ExactReference(report_.memory)));
  }

  const Config rotating[] = {Config::kServerCache, Config::kHost, Config::kDisk, Config::kKvtierd};
  for (int rep = 0; rep < f_.repeats; ++rep) {
    std::fprintf(stderr, "demo: repeat %d/%d (%.0f s so far)\n", rep + 1, f_.repeats,
                 Seconds(t_start));
    for (size_t row = 0; row < report_.rows.size(); ++row) {
      if (row < n_reuse) {
        // cold and llama-server (both cold prefills) in alternating order, then the rest.
        const Config first = rep % 2 == 0 ? Config::kCold : Config::kUpstream;
        const Config second = rep % 2 == 0 ? Config::kUpstream : Config::kCold;
        Measure(row, first, rep, report_.rows[row].tokens);
        Measure(row, second, rep, report_.rows[row].tokens);
        Measure(row, Config::kSlotCache, rep, report_.rows[row].tokens);
        for (int k = 0; k < 4; ++k)
          Measure(row, rotating[(k + rep) % 4], rep, report_.rows[row].tokens);
      } else {
        const auto& t = no_reuse[row - n_reuse][static_cast<size_t>(rep)];
        const bool plain_first = rep % 2 == 0;
        // Each server first answers the filler, so that the measured request does not pay
        // for saving the slot's previous prompt (plain llama-server's RAM cache copies the
        // state of the 4.5k-token document there: ~35 ms, 5 % of a no-reuse TTFT).
        auto plain_request = [&] {
          (void)ServerClient("127.0.0.1", plain_->port()).Complete(filler_, false);
          WaitStoresDone();
          // Cold, from token 0, as kvtier-llama-server computes a miss whose slot shares
          // only the BOS token (it drops it: docs/llama-server.md, tail records).
          SchedTimes sched;
          auto r = MeasuredComplete(*plain_, t, false, &sched);
          Record(row, Config::kCold, rep, r, 0, -1, sched);
        };
        if (plain_first) plain_request();
        if (kvt_) {  // a miss; kvtier's own time on its path from GET /kvtier
          (void)ServerClient("127.0.0.1", kvt_->port()).Complete(filler_, false);
          WaitStoresDone();
          ServerClient kc("127.0.0.1", kvt_->port());
          auto path_s = [&] {
            auto j = kc.GetJson("/kvtier");
            return j.ok() ? j->value("prompt_start_seconds", 0.0) : -1.0;
          };
          const double before = path_s();
          SchedTimes sched;
          auto r = MeasuredComplete(*kvt_, t, true, &sched);
          const double after = path_s();
          Record(row, Config::kHost, rep, r, 0,
                 before >= 0 && after >= before ? (after - before) * 1000 : -1, sched);
        }
        if (!plain_first) plain_request();
      }
    }
  }
  kvt_.reset();
  plain_.reset();
  upstream_.reset();
  if (kvtierd_) {
    (void)kvtierd_->Stop();
    std::error_code rm;  // a daemon that died leaves its socket: remove it
    std::filesystem::remove(kvtierd_->target().substr(std::string("unix://").size()), rm);
  }
  report_.seconds = Seconds(t_start);
  report_.long_prefix_in_workload = !f_.quick;
  report_.no_reuse_in_workload = f_.workload != "document";
  return report_.Print(run_dir_, f_.json, f_.check);
}

}  // namespace
}  // namespace kvt::llamacpp::demo

int main(int argc, char** argv) {
  using kvt::llamacpp::demo::Flags;
  Flags f;
  CLI::App app{
      "kvtier-server-demo: llama-server with and without kvtier, TTFT measured by an HTTP client"};
  app.add_option("--model", f.model, "GGUF model (default: generate the 270M demo model in --dir)");
  app.add_flag("--small", f.small, "the tiny generated model (a quick run)");
  app.add_flag("--full", f.full, "the full workload: 3 document questions, 3 no-reuse prompts");
  app.add_flag("--quick", f.quick,
               "a tiny workload (one chat turn, a ~600-token document, one no-reuse prompt; "
               "the >= 4k targets are then not measured)");
  app.add_option("--workload", f.workload,
                 "all, or document: the ~4.4k-token document alone (no chat turns, no no-reuse "
                 "prompts; the no-reuse targets are then not measured)")
      ->check(CLI::IsMember({"all", "document"}))
      ->capture_default_str();
  app.add_option("--threads", f.threads, "server threads")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--repeats", f.repeats, "repeats of every measurement (medians)")
      ->check(CLI::Range(1, 50))
      ->capture_default_str();
  app.add_option("--chunk", f.chunk, "tokens per kvtier chunk")
      ->check(CLI::Range(16, 8192))
      ->capture_default_str();
  app.add_option("--dir", f.dir, "folder for the model, caches and run files")
      ->capture_default_str();
  app.add_option("--data-dir", f.data_dir, "folder with chat.txt, gpl-3.0.txt, apache-2.0.txt");
  app.add_option("--server", f.server_bin, "kvtier-llama-server binary")->capture_default_str();
  app.add_option("--kvtierd", f.kvtierd_bin, "kvtierd binary to start")->capture_default_str();
  app.add_option("--llama-server", f.upstream_bin,
                 "llama.cpp's llama-server binary for the llama-server column (\"\" = skip)")
      ->capture_default_str();
  app.add_option("--kvtierd-address", f.kvtierd_address,
                 "join a running kvtierd (unix:///path.sock or host:port) instead of starting one");
  app.add_flag("--no-kvtierd", f.no_kvtierd, "skip the kvtierd column");
  app.add_flag("--json", f.json,
               "one JSON object per request on stdout (the table goes to stderr)");
  app.add_flag("--check", f.check, "exit 1 when a target is missed");
  app.add_option("--server-arg", f.server_args,
                 "an extra llama-server flag for every server (repeatable; "
                 "--server-arg=--swa-full)")
      ->allow_extra_args(false);
  app.footer(
      "Exit codes: 0 done; 1 a target missed (with --check) or a server could not start; 2 bad "
      "flags or data;\n"
      "3 an answer through kvtier was not identical to plain llama-server's from the same "
      "restored prefix.");
#ifdef KVT_SERVER_DEMO_SERVER
  f.server_bin = KVT_SERVER_DEMO_SERVER;
#endif
#ifdef KVT_SERVER_DEMO_UPSTREAM
  f.upstream_bin = KVT_SERVER_DEMO_UPSTREAM;
#endif
#ifdef KVT_DEMO_KVTIERD
  f.kvtierd_bin = KVT_DEMO_KVTIERD;
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (f.data_dir.empty()) f.data_dir = kvt::llamacpp::demo::DefaultDataDir();
  if (f.data_dir.empty()) {
    std::fprintf(stderr, "demo: cannot find the demo texts; pass --data-dir\n");
    return 2;
  }
  if (f.server_bin.empty()) {
    std::fprintf(stderr, "demo: pass --server PATH (kvtier-llama-server)\n");
    return 2;
  }
  return kvt::llamacpp::demo::Demo(f).Run();
}
