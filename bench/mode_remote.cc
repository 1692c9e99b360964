// kvtier-bench remote: kvtierd's data path beside the limits measured in the same run.
//
//   gRPC put/get   RemoteClient::Put / Get of 32 MiB chunk records (unix socket).
//   shm put/get    the same records through a shared-memory region: put = the record is
//                  in the region (where a gather kernel would write it) → acknowledged;
//                  get = the daemon copies it into the region → readable by the client.
//                  *_with_copy also count the client's copy into / out of the region,
//                  one after the other (shm_serial_*_incl_copy_over_memcpy: their
//                  ratios to memcpy).
//   shm progressive  *_incl_copy (issue 14's figures): PutShmFrom / GetShmInto, the
//                  client's copy and the daemon's run at once, piece by piece
//                  (kvstore/shm_progress.h); *_incl_copy_over_memcpy is the median of
//                  their per-round ratios to that round's memcpy.
//                  Each shm phase starts once the daemon's disk write-back of the phases
//                  before it is done (its own records' write-back runs alongside, as in
//                  service: kvtierd writes every record to its disk tier).
//   tcp            plain loopback TCP transfer of the same bytes (one stream), received
//                  into a buffer touched beforehand.
//   unix           the same through a unix stream socket pair (kvtierd's transport here).
//   memcpy         single-thread memcpy of the same bytes; memcpy_x2: two dependent
//                  memcpys of each record, the bound of shm *_incl_copy (one copy by the
//                  client, one by the daemon).
//   copy_hash      the daemon's one pass over an shm put (kvstore/shm_copy.h: copy
//                  and XXH3 of the copy); shm_put_incl_copy_bound = the client's memcpy
//                  then that pass, in series (1 / (1/memcpy + 1/copy_hash)), per round,
//                  each reading from memory (the shm path can beat it: the daemon reads
//                  the region right after the client wrote it, partly from the L3 cache).
//   grpc get bound loopback TCP then one memcpy in series: the client's copy out of
//                  gRPC's receive slices into the caller's buffer (the daemon sends a
//                  host-tier record from the arena without a copy).
//   redis          SET/GET of the same bytes on a local redis-server (started here on a
//                  loopback port with a temp dir, no persistence), hiredis client
//                  (linked when pkg-config finds hiredis at configure time): whole
//                  records as values, one command at a time; and "best": the same total
//                  bytes as pieces of --redis-piece-mib (default 1, 4 and 16 MiB; the best
//                  median is reported), every SET then every GET pipelined.
//   pinned lookup  TieredStore::Lookup({.pin = true}) over a RemoteTier of a
//                  --lookup-tokens prompt (100k: 390 chunks) kvtierd holds: RPCs and ms
//                  (target <= 2 RPCs and <= 5 % of the prompt's cold prefill at
//                  --prefill-tokens-per-s, the demo model's), beside the same lookup
//                  pinned one key per RPC (the path before batched pins) in the same run.
//   shm put sync   shm put acknowledged with durability: sync (kvtierd's default; a second
//                  kvtierd), the client's copy into the region included, against memcpy
//                  in the same round (shm_put_sync_incl_copy_over_memcpy), and the copies
//                  per put byte: the client's plus the daemon's as kvtierd counts them
//                  (Stats: shm_put_copy_bytes + its tiers' copy_bytes): shm_put_sync_copies,
//                  target 2.
// The daemon is the real kvtierd binary (found next to this binary in ../daemon/, or
// --kvtierd, or $KVTIERD), started on a unix socket in a temp dir with durability async
// (acknowledged in host memory, written to disk in the background, like Redis's SET).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "bench_mode.h"
#include "kvstore/chunk_chain.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/chunk_key.h"
#include "kvstore/remote_client.h"
#include "kvstore/shm_copy.h"  // the daemon's copy+hash, timed beside memcpy
#include "kvstore/shm_progress.h"
#include "nlohmann/json.hpp"
#include "pinned_lookup.h"
#include "remote_peers.h"

namespace kvt::bench {
namespace {

using remote::Clock;
using remote::Gbps;
using remote::RedisPeer;
using remote::Since;
using remote::Stop;

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
// Records of `tokens` tokens of a Llama-3-8B layout (128 KiB per token).
std::vector<std::vector<std::byte>> MakeRecords(int n, uint32_t tokens) {
  KvLayout layout{32, 8, 128, DType::kBF16, LayoutKind::kFlashAttnNHD};
  NamespaceParams p;
  p.model_id = "bench/remote";
  p.layout = layout;
  p.chunk_tokens = tokens;
  NamespaceId ns = ComputeNamespace(p);
  std::vector<std::vector<std::byte>> out;
  std::mt19937_64 rng(7);
  ChunkChainEncoder chain(ns, layout);
  std::vector<std::byte> payload(layout.payload_bytes(tokens));
  for (int i = 0; i < n; ++i) {
    std::vector<TokenId> toks(tokens);
    for (auto& t : toks) t = static_cast<TokenId>(rng() % 32000);
    for (size_t j = 0; j + 8 <= payload.size(); j += 4096) {
      uint64_t v = rng();
      std::memcpy(payload.data() + j, &v, 8);
    }
    out.push_back(*chain.EncodeNext(toks, payload));
  }
  return out;
}

// One stream of the records' bytes from a sender to a receiver thread through `fd_send`
// / `fd_recv`, into a receive buffer touched beforehand (no page faults in the timing).
double MeasureStream(const std::vector<std::vector<std::byte>>& recs, int fd_send, int fd_recv) {
  uint64_t total = 0;
  for (const auto& rec : recs) total += rec.size();
  std::vector<std::byte> buf(recs[0].size());
  std::memset(buf.data(), 1, buf.size());
  std::thread receiver([&] {
    uint64_t got = 0;
    while (got < total) {
      ssize_t n = recv(fd_recv, buf.data(), std::min<uint64_t>(buf.size(), total - got), 0);
      if (n <= 0) break;
      got += static_cast<uint64_t>(n);
    }
    char ack = 1;
    (void)!send(fd_recv, &ack, 1, 0);
  });
  auto t = Clock::now();
  for (const auto& rec : recs) {
    size_t off = 0;
    while (off < rec.size()) {
      ssize_t n = send(fd_send, rec.data() + off, rec.size() - off, 0);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
  }
  char ack;
  (void)!recv(fd_send, &ack, 1, 0);
  double s = Since(t);
  receiver.join();
  return Gbps(total, s);
}

// Loopback TCP, one connection.
double MeasureTcp(const std::vector<std::vector<std::byte>>& recs) {
  sockaddr_in a;
  const int ls = BindLoopback(&a);
  listen(ls, 1);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  int peer = accept(ls, nullptr, nullptr);
  const double gbps = MeasureStream(recs, fd, peer);
  close(fd);
  close(peer);
  close(ls);
  return gbps;
}

// A connected unix stream socket pair: the transport kvtierd is reached through here.
double MeasureUnix(const std::vector<std::vector<std::byte>>& recs) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 0;
  const double gbps = MeasureStream(recs, sv[0], sv[1]);
  close(sv[0]);
  close(sv[1]);
  return gbps;
}

// Waits (up to 30 s) until kvtierd's disk write-back has written every record queued so
// far, so a phase is not measured while the previous phase's records go to disk.
void DrainWriteBack(RemoteClient& client) {
  for (int i = 0; i < 3000; ++i) {
    auto st = client.Stats();
    if (!st.ok() || st->pending_write_bytes == 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// An shm put acknowledged with durability: sync (kvtierd's default: the record is on disk,
// fdatasync'd, before the answer), including the client's copy into the region, beside a
// memcpy of the same records in the same round; and the copies of each put byte: the
// client's (1, made here) plus the daemon's, as kvtierd counts them (Stats:
// shm_put_copy_bytes, its copy out of the region, plus its tiers' copy_bytes).
struct SyncShmPut {
  std::string error;
  std::vector<double> gbps, over_memcpy;
  double copies = 0;
};

SyncShmPut MeasureSyncShmPut(const std::string& bin, const std::string& dir,
                             const std::vector<std::vector<std::byte>>& recs, int rounds,
                             uint64_t host_cap) {
  SyncShmPut r;
  const uint64_t rec_bytes = recs[0].size();
  const uint64_t total = rec_bytes * recs.size();
  const std::string sdir = dir + "/sync";
  std::filesystem::create_directories(sdir);
  const std::string sock = "unix://" + sdir + "/kvtierd.sock";
  {
    std::ofstream cfg(sdir + "/kvtierd.yaml");
    cfg << "listen: " << sock << "\ndata_dir: " << sdir << "/data\nhost_capacity: " << host_cap
        << "\ndisk_capacity: " << host_cap * 2
        << "\ndisk_file_bytes: 256MiB\nmax_record_bytes: 256MiB\n"
        << "max_inflight_bytes: 1GiB\ndurability: sync\nworkers: 2\nlog_level: warn\nmetrics:\n  "
           "listen: \"\"\nready_file: "
        << sdir << "/ready.json\n";
  }
  pid_t daemon = Spawn({bin, "--config", sdir + "/kvtierd.yaml"}, sdir + "/kvtierd.log");
  bool ready = false;
  for (int i = 0; i < 1000 && !ready; ++i) {
    ready = std::filesystem::exists(sdir + "/ready.json");
    if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!ready) {
    Stop(daemon);
    r.error = "kvtierd (durability sync) did not start within 10 s";
    return r;
  }
  RemoteClientOptions o;
  o.target = sock;
  o.deadline = std::chrono::seconds(60);
  auto client = RemoteClient::Create(o);
  if (!client.ok()) {
    Stop(daemon);
    r.error = client.status().ToString();
    return r;
  }
  const uint64_t slot = (rec_bytes + 4095) & ~uint64_t{4095};
  auto session = (*client)->AttachShm(slot);
  if (!session.ok()) {
    Stop(daemon);
    r.error = "shm: " + session.status().ToString();
    return r;
  }
  std::byte* region = (*session)->region->data();
  std::memset(region, 0, slot);
  std::vector<std::byte> dst(rec_bytes);
  std::memcpy(dst.data(), recs[0].data(), rec_bytes);  // touched: no page faults timed
  auto daemon_copies = [&]() -> uint64_t {
    absl::StatusOr<RemoteStats> st = (*client)->Stats();
    if (!st.ok()) return 0;
    uint64_t n = st->shm_put_copy_bytes;
    for (const RemoteTierStats& t : st->tiers) n += t.stats.copy_bytes;
    return n;
  };
  const uint64_t c0 = daemon_copies();
  uint64_t put_bytes = 0;
  for (int round = 0; round < rounds && r.error.empty(); ++round) {
    auto t = Clock::now();
    for (const auto& rec : recs) std::memcpy(dst.data(), rec.data(), rec.size());
    const double memcpy_gbps = Gbps(total, Since(t));
    t = Clock::now();
    for (const auto& rec : recs) {
      std::memcpy(region, rec.data(), rec_bytes);  // the client's copy
      if (auto s = (*client)->PutShm(**session, 0, rec_bytes); !s.ok()) {
        r.error = "shm put (sync): " + s.ToString();
        break;
      }
      put_bytes += rec_bytes;
    }
    const double g = Gbps(total, Since(t));
    r.gbps.push_back(g);
    r.over_memcpy.push_back(g / memcpy_gbps);
  }
  if (put_bytes > 0) {
    r.copies = 1.0 + static_cast<double>(daemon_copies() - c0) / static_cast<double>(put_bytes);
  }
  (void)(*client)->DetachShm(**session);
  session->reset();
  client->reset();
  Stop(daemon);
  return r;
}

int RunRemote(int argc, char** argv) {
  CLI::App app{"kvtierd data path (gRPC, shm) vs loopback TCP, memcpy and redis"};
  bool json = false;
  int chunks = 4, rounds = 5;
  uint32_t tokens = 256;
  std::string kvtierd_flag;
  uint32_t part_mib = 8;
  app.add_flag("--json", json, "print one JSON object");
  app.add_option("--chunks", chunks, "distinct chunks moved per round and path")
      ->check(CLI::Range(1, 64));
  app.add_option("--rounds", rounds,
                 "rounds; every path runs once per round (interleaved), median reported")
      ->check(CLI::Range(1, 100));
  app.add_option("--tokens", tokens, "tokens per chunk (128 KiB each; 256 = 32 MiB)")
      ->check(CLI::Range(1, 2048));
  app.add_option("--part-mib", part_mib, "gRPC message data size, MiB")->check(CLI::Range(1, 8));
  app.add_option("--kvtierd", kvtierd_flag, "path of the kvtierd binary");
  std::vector<uint32_t> redis_piece_mib = {1, 4, 16};
  app.add_option("--redis-piece-mib", redis_piece_mib,
                 "value sizes (MiB) of the pipelined Redis run; the best median is reported")
      ->check(CLI::Range(1, 256));
  uint64_t lookup_tokens = 100000;
  app.add_option("--lookup-tokens", lookup_tokens,
                 "prompt tokens of the pinned-lookup phase (256-token chunks)")
      ->check(CLI::Range(256, 1 << 22));
  // The demo model's cold prefill (README: 4,509 tokens in 15.7 s on 2 threads).
  double prefill_tps = 288;
  app.add_option("--prefill-tokens-per-s", prefill_tps,
                 "cold prefill speed the pinned lookup is compared with (tokens/s)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  auto recs = MakeRecords(chunks, tokens);
  const uint64_t rec_bytes = recs[0].size();
  const uint64_t total = rec_bytes * recs.size();
  std::string tmpl = "/tmp/kvt-bench-remote-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) return 1;
  const std::string dir = tmpl;

  // kvtierd on a unix socket, durability async (acknowledged in memory like Redis SET).
  const std::string sock = "unix://" + dir + "/kvtierd.sock";
  const uint64_t host_cap = std::max<uint64_t>(1ull << 30, total * 2);
  {
    std::ofstream cfg(dir + "/kvtierd.yaml");
    cfg << "listen: " << sock << "\ndata_dir: " << dir << "/data\nhost_capacity: " << host_cap
        << "\ndisk_capacity: " << host_cap * 2
        << "\ndisk_file_bytes: 256MiB\nmax_record_bytes: 256MiB\n"
        // The write-back queue holds keys (the disk write reads tier 0), not copies: a
        // deep one keeps the disk's back-pressure (docs/disk-tier.md; kvtier-bench tiers
        // measures the disk) out of these memory-path figures.
        << "writeback_queue_bytes: 8GiB\n"
        << "max_inflight_bytes: 1GiB\ndurability: async\nworkers: 2\nlog_level: warn\nmetrics:\n  "
           "listen: \"\"\n"
        << "get_part_bytes: " << (part_mib << 20) << "\nready_file: " << dir << "/ready.json\n";
  }
  const std::string bin = FindKvtierd(kvtierd_flag);
  pid_t daemon = Spawn({bin, "--config", dir + "/kvtierd.yaml"}, dir + "/kvtierd.log");
  bool ready = false;
  for (int i = 0; i < 1000 && !ready; ++i) {
    ready = std::filesystem::exists(dir + "/ready.json");
    if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::string daemon_error;
  if (!ready) daemon_error = "kvtierd (" + bin + ") did not start within 10 s; see --kvtierd";
  std::unique_ptr<RemoteClient> client;
  std::unique_ptr<ShmSession> session;
  std::string shm_error;
  // A slot holds a progressive transfer's 64-byte control block and then the record.
  const uint64_t slot = (rec_bytes + kShmProgressBlockBytes + 4095) & ~uint64_t{4095};
  if (ready) {
    RemoteClientOptions o;
    o.target = sock;
    o.deadline = std::chrono::seconds(60);
    o.put_part_bytes = part_mib << 20;
    o.get_part_bytes = part_mib << 20;
    client = *RemoteClient::Create(o);
    auto sess = client->AttachShm(2 * slot);
    if (sess.ok()) {
      session = std::move(*sess);
      std::memset(session->region->data(), 0, 2 * slot);
    } else {
      shm_error = sess.status().ToString();
    }
  }
  RedisPeer redis;
  std::string redis_why = redis.Start(dir);

  std::map<std::string, std::vector<double>> f;
  std::vector<std::byte> dst(rec_bytes);
  std::vector<std::byte> two_a(rec_bytes), two_b(rec_bytes);  // touched: no page faults timed
  for (int round = 0; round < rounds; ++round) {
    {  // memcpy
      std::memcpy(dst.data(), recs[0].data(), rec_bytes);
      auto t = Clock::now();
      for (const auto& rec : recs) std::memcpy(dst.data(), rec.data(), rec.size());
      f["memcpy_gbps"].push_back(Gbps(total, Since(t)));
    }
    {  // two dependent memcpys of each record (into a buffer, then out of it): the bound of
       // an shm put or get that moves the record once in the daemon, counting the client's
       // copy, since the daemon must copy a put out of the client's region before checking it
      auto t = Clock::now();
      for (const auto& rec : recs) {
        std::memcpy(two_a.data(), rec.data(), rec.size());
        std::memcpy(two_b.data(), two_a.data(), rec.size());
      }
      f["memcpy_x2_gbps"].push_back(Gbps(total, Since(t)));
      f["memcpy_x2_over_memcpy"].push_back(f["memcpy_x2_gbps"].back() / f["memcpy_gbps"].back());
    }
    {  // the daemon's one pass over an shm put: copy + hash of the copy
      uint64_t sink = 0;
      auto t = Clock::now();
      for (const auto& rec : recs) sink ^= CopyRecordHashingPayload(rec, two_a);
      const double gbps = Gbps(total, Since(t));
      if (sink == 1) std::printf(" ");  // keeps the hashes live
      const double m = f["memcpy_gbps"].back();
      f["copy_hash_gbps"].push_back(gbps);
      f["copy_hash_over_memcpy"].push_back(gbps / m);
      f["shm_put_incl_copy_bound_gbps"].push_back(1 / (1 / m + 1 / gbps));
    }
    f["tcp_gbps"].push_back(MeasureTcp(recs));
    f["grpc_get_bound_gbps"].push_back(1 /
                                       (1 / f["tcp_gbps"].back() + 1 / f["memcpy_gbps"].back()));
    f["unix_gbps"].push_back(MeasureUnix(recs));
    if (client && daemon_error.empty()) {
      auto t = Clock::now();
      for (const auto& rec : recs)
        if (auto s = client->Put(rec); !s.ok()) daemon_error = "gRPC put: " + s.ToString();
      f["grpc_put_gbps"].push_back(Gbps(total, Since(t)));
      t = Clock::now();
      for (const auto& rec : recs) {
        auto n = client->Get(DecodeChunkHeader(rec)->key, dst);
        if (!n.ok()) daemon_error = "gRPC get: " + n.status().ToString();
      }
      f["grpc_get_gbps"].push_back(Gbps(total, Since(t)));
      f["grpc_get_over_bound"].push_back(f["grpc_get_gbps"].back() /
                                         f["grpc_get_bound_gbps"].back());
      if (daemon_error.empty() && std::memcmp(dst.data(), recs.back().data(), rec_bytes) != 0)
        daemon_error = "gRPC get returned different bytes";
    }
    if (session && daemon_error.empty()) {
      DrainWriteBack(*client);
      std::byte* region = session->region->data();
      double put_s = 0, put_copy_s = 0, get_s = 0, get_copy_s = 0;
      for (size_t i = 0; i < recs.size(); ++i) {
        const uint64_t off = (i % 2) * slot;
        auto t0 = Clock::now();
        std::memcpy(region + off, recs[i].data(), rec_bytes);  // the producer's write
        auto t1 = Clock::now();
        if (auto s = client->PutShm(*session, off, rec_bytes); !s.ok())
          daemon_error = "shm put: " + s.ToString();
        auto t2 = Clock::now();
        put_s += std::chrono::duration<double>(t2 - t1).count();
        put_copy_s += std::chrono::duration<double>(t2 - t0).count();
      }
      for (size_t i = 0; i < recs.size(); ++i) {
        const uint64_t off = (i % 2) * slot;
        auto t0 = Clock::now();
        auto n = client->GetShm(*session, DecodeChunkHeader(recs[i])->key, off, slot);
        auto t1 = Clock::now();
        if (!n.ok()) daemon_error = "shm get: " + n.status().ToString();
        std::memcpy(dst.data(), region + off, rec_bytes);  // the consumer's read
        auto t2 = Clock::now();
        get_s += std::chrono::duration<double>(t1 - t0).count();
        get_copy_s += std::chrono::duration<double>(t2 - t0).count();
      }
      if (daemon_error.empty() && std::memcmp(dst.data(), recs.back().data(), rec_bytes) != 0)
        daemon_error = "shm get returned different bytes";
      f["shm_put_gbps"].push_back(Gbps(total, put_s));
      f["shm_get_gbps"].push_back(Gbps(total, get_s));
      f["shm_put_with_copy_gbps"].push_back(Gbps(total, put_copy_s));
      f["shm_get_with_copy_gbps"].push_back(Gbps(total, get_copy_s));
      // The serial path against the bounds of the same round: two copies in series.
      f["shm_serial_put_incl_copy_over_memcpy"].push_back(Gbps(total, put_copy_s) /
                                                          f["memcpy_gbps"].back());
      f["shm_serial_get_incl_copy_over_memcpy"].push_back(Gbps(total, get_copy_s) /
                                                          f["memcpy_gbps"].back());
      f["shm_serial_put_incl_copy_over_bound"].push_back(Gbps(total, put_copy_s) /
                                                         f["shm_put_incl_copy_bound_gbps"].back());
      f["shm_serial_put_incl_copy_over_memcpy_x2"].push_back(Gbps(total, put_copy_s) /
                                                             f["memcpy_x2_gbps"].back());
      f["shm_serial_get_incl_copy_over_memcpy_x2"].push_back(Gbps(total, get_copy_s) /
                                                             f["memcpy_x2_gbps"].back());
    }
    if (session && daemon_error.empty()) {
      DrainWriteBack(*client);
      // Progressive (PutShmFrom / GetShmInto): the client's copy into or out of the
      // caller's buffer runs beside the daemon's, piece by piece. These are issue 14's
      // shm_*_incl_copy figures; ratios are per round, to this round's memcpy (the median
      // of per-round ratios is steadier than a ratio of medians on a busy host).
      auto t = Clock::now();
      for (size_t i = 0; i < recs.size(); ++i)
        if (auto s = client->PutShmFrom(*session, (i % 2) * slot, slot, recs[i]); !s.ok())
          daemon_error = "shm progressive put: " + s.ToString();
      const double put_s = Since(t);
      t = Clock::now();
      for (size_t i = 0; i < recs.size(); ++i) {
        auto n = client->GetShmInto(*session, DecodeChunkHeader(recs[i])->key, (i % 2) * slot, slot,
                                    dst);
        if (!n.ok()) daemon_error = "shm progressive get: " + n.status().ToString();
      }
      const double get_s = Since(t);
      if (daemon_error.empty() && std::memcmp(dst.data(), recs.back().data(), rec_bytes) != 0)
        daemon_error = "shm progressive get returned different bytes";
      f["shm_put_incl_copy_gbps"].push_back(Gbps(total, put_s));
      f["shm_get_incl_copy_gbps"].push_back(Gbps(total, get_s));
      f["shm_put_incl_copy_over_memcpy"].push_back(Gbps(total, put_s) / f["memcpy_gbps"].back());
      f["shm_get_incl_copy_over_memcpy"].push_back(Gbps(total, get_s) / f["memcpy_gbps"].back());
    }
    if (redis_why.empty()) {
      double set = 0, get = 0;
      redis_why = redis.Measure(recs, &set, &get);
      f["redis_set_gbps"].push_back(set);
      f["redis_get_gbps"].push_back(get);
      for (uint32_t mib : redis_piece_mib) {
        if (!redis_why.empty()) break;
        redis_why = redis.MeasurePieces(recs, uint64_t{mib} << 20, &set, &get);
        f[absl::StrFormat("redis_piece_%d_set_gbps", mib)].push_back(set);
        f[absl::StrFormat("redis_piece_%d_get_gbps", mib)].push_back(get);
      }
    }
  }
  if (session) (void)client->DetachShm(*session);
  session.reset();
  client.reset();
  PinnedLookupFigures lookup;
  if (ready) lookup = MeasurePinnedLookup(sock, lookup_tokens, 256, prefill_tps, rounds);
  Stop(daemon);
  SyncShmPut sync;
  if (ready) sync = MeasureSyncShmPut(bin, dir, recs, rounds, host_cap);

  nlohmann::json out;
  out["chunk_bytes"] = rec_bytes;
  out["chunks"] = chunks;
  out["rounds"] = rounds;
  out["durability"] = "async";
  for (const char* k : {"grpc_put_gbps",
                        "grpc_get_gbps",
                        "shm_put_gbps",
                        "shm_get_gbps",
                        "tcp_gbps",
                        "unix_gbps",
                        "memcpy_gbps",
                        "redis_set_gbps",
                        "redis_get_gbps",
                        "shm_put_with_copy_gbps",
                        "shm_get_with_copy_gbps",
                        "shm_put_incl_copy_gbps",
                        "shm_get_incl_copy_gbps",
                        "shm_put_incl_copy_over_memcpy",
                        "shm_get_incl_copy_over_memcpy",
                        "shm_serial_put_incl_copy_over_memcpy",
                        "shm_serial_get_incl_copy_over_memcpy",
                        "memcpy_x2_gbps",
                        "memcpy_x2_over_memcpy",
                        "copy_hash_gbps",
                        "copy_hash_over_memcpy",
                        "shm_put_incl_copy_bound_gbps",
                        "shm_serial_put_incl_copy_over_bound",
                        "shm_serial_put_incl_copy_over_memcpy_x2",
                        "shm_serial_get_incl_copy_over_memcpy_x2",
                        "grpc_get_bound_gbps",
                        "grpc_get_over_bound"}) {
    if (f.count(k) && (std::string(k).rfind("redis", 0) != 0 || redis_why.empty()))
      out[k] = Median(f[k]);
    else
      out[k] = nullptr;
  }
  out["redis_get_best_gbps"] = nullptr;
  out["redis_best_piece_bytes"] = nullptr;
  if (redis_why.empty()) {
    double best = -1;
    for (uint32_t mib : redis_piece_mib) {
      const double get = Median(f[absl::StrFormat("redis_piece_%d_get_gbps", mib)]);
      out["redis_piece_get_gbps"][std::to_string(uint64_t{mib} << 20)] = get;
      if (get > best) {
        best = get;
        out["redis_get_best_gbps"] = get;
        out["redis_set_best_gbps"] = Median(f[absl::StrFormat("redis_piece_%d_set_gbps", mib)]);
        out["redis_best_piece_bytes"] = uint64_t{mib} << 20;
      }
    }
  }
  if (!redis_why.empty()) out["redis_error"] = redis_why;
  if (!shm_error.empty()) out["shm_error"] = shm_error;
  if (!daemon_error.empty()) out["daemon_error"] = daemon_error;
  if (lookup.error.empty() && ready) {
    out["pinned_lookup_chunks"] = lookup.chunks;
    out["pinned_lookup_rpcs"] = lookup.rpcs;
    out["pinned_lookup_ms"] = lookup.ms;
    out["pinned_lookup_over_cold_prefill"] = lookup.ms / lookup.cold_prefill_ms;
    out["pinned_lookup_per_key_rpcs"] = lookup.per_key_rpcs;
    out["pinned_lookup_per_key_ms"] = lookup.per_key_ms;
    out["pinned_lookup_cold_prefill_ms"] = lookup.cold_prefill_ms;
  } else if (ready) {
    out["pinned_lookup_error"] = lookup.error;
  }
  if (sync.error.empty() && !sync.gbps.empty()) {
    out["shm_put_sync_incl_copy_gbps"] = Median(sync.gbps);
    out["shm_put_sync_incl_copy_over_memcpy"] = Median(sync.over_memcpy);
    out["shm_put_sync_copies"] = sync.copies;
    out["shm_put_sync_copies_target"] = 2;
  } else if (ready) {
    out["shm_put_sync_error"] = sync.error;
  }
  std::filesystem::remove_all(dir);

  auto num = [&](const char* k) {
    return out.contains(k) && out[k].is_number() ? out[k].get<double>() : 0.0;
  };
  auto ratio = [&](const char* a, const char* b) { return num(b) > 0 ? num(a) / num(b) : 0.0; };
  out["grpc_get_over_tcp"] = ratio("grpc_get_gbps", "tcp_gbps");
  out["grpc_get_over_unix"] = ratio("grpc_get_gbps", "unix_gbps");
  out["grpc_get_over_redis_get"] = ratio("grpc_get_gbps", "redis_get_gbps");
  out["grpc_get_over_redis_get_best"] = ratio("grpc_get_gbps", "redis_get_best_gbps");
  out["shm_put_over_memcpy"] = ratio("shm_put_gbps", "memcpy_gbps");
  out["shm_get_over_memcpy"] = ratio("shm_get_gbps", "memcpy_gbps");
  if (json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf(
        "kvtier-bench remote: %d chunks of %.1f MiB per path and round, %d interleaved rounds, "
        "medians\n",
        chunks, rec_bytes / 1048576.0, rounds);
    std::printf("  %-24s %8s  %s\n", "path", "GB/s", "ratio");
    std::printf("  %-24s %8.2f\n", "memcpy (1 thread)", num("memcpy_gbps"));
    std::printf("  %-24s %8.2f  %.2f x memcpy (bound of the serial shm put/get incl. copy)\n",
                "2 dependent memcpys", num("memcpy_x2_gbps"), num("memcpy_x2_over_memcpy"));
    std::printf("  %-24s %8.2f  %.2f x memcpy (the daemon's pass over an shm put)\n",
                "copy + XXH3 of the copy", num("copy_hash_gbps"), num("copy_hash_over_memcpy"));
    std::printf("  %-24s %8.2f  %.2f x memcpy (memcpy then copy+hash, from memory)\n",
                "serial shm put bound", num("shm_put_incl_copy_bound_gbps"),
                ratio("shm_put_incl_copy_bound_gbps", "memcpy_gbps"));
    std::printf("  %-24s %8.2f\n", "loopback TCP (1 stream)", num("tcp_gbps"));
    std::printf("  %-24s %8.2f  %.2f x TCP (TCP then the client's memcpy: bound of gRPC get)\n",
                "gRPC get bound", num("grpc_get_bound_gbps"),
                ratio("grpc_get_bound_gbps", "tcp_gbps"));
    std::printf("  %-24s %8.2f\n", "unix socket (1 stream)", num("unix_gbps"));
    std::printf("  %-24s %8.2f  %.2f x TCP\n", "gRPC put", num("grpc_put_gbps"),
                ratio("grpc_put_gbps", "tcp_gbps"));
    std::printf(
        "  %-24s %8.2f  %.2f x TCP (target 0.8), %.2f x unix socket, %.2f x redis GET at its "
        "best (target 1), %.2f x redis GET of whole records\n",
        "gRPC get", num("grpc_get_gbps"), ratio("grpc_get_gbps", "tcp_gbps"),
        ratio("grpc_get_gbps", "unix_gbps"), ratio("grpc_get_gbps", "redis_get_best_gbps"),
        ratio("grpc_get_gbps", "redis_get_gbps"));
    std::printf("  %-24s %8.2f  %.2f x memcpy (the daemon's part only)\n", "shm put",
                num("shm_put_gbps"), ratio("shm_put_gbps", "memcpy_gbps"));
    std::printf("  %-24s %8.2f  %.2f x memcpy (the daemon's part only)\n", "shm get",
                num("shm_get_gbps"), ratio("shm_get_gbps", "memcpy_gbps"));
    std::printf(
        "  %-24s %8.2f  %.2f x memcpy, %.2f x its bound, %.2f x memcpy_x2 (copies in series)\n",
        "shm put, serial copy in", num("shm_put_with_copy_gbps"),
        num("shm_serial_put_incl_copy_over_memcpy"), num("shm_serial_put_incl_copy_over_bound"),
        num("shm_serial_put_incl_copy_over_memcpy_x2"));
    std::printf("  %-24s %8.2f  %.2f x memcpy, %.2f x memcpy_x2 (copies in series)\n",
                "shm get, serial copy out", num("shm_get_with_copy_gbps"),
                num("shm_serial_get_incl_copy_over_memcpy"),
                num("shm_serial_get_incl_copy_over_memcpy_x2"));
    std::printf(
        "  %-24s %8.2f  %.2f x memcpy (target 0.7; median of per-round ratios; progressive)\n",
        "shm put incl. copy in", num("shm_put_incl_copy_gbps"),
        num("shm_put_incl_copy_over_memcpy"));
    std::printf(
        "  %-24s %8.2f  %.2f x memcpy (target 0.7; median of per-round ratios; progressive)\n",
        "shm get incl. copy out", num("shm_get_incl_copy_gbps"),
        num("shm_get_incl_copy_over_memcpy"));
    std::printf("  %-24s %8s  %.2f x its bound (median of per-round ratios)\n",
                "gRPC get vs its bound", "", num("grpc_get_over_bound"));
    if (redis_why.empty()) {
      std::printf("  %-24s %8.2f\n  %-24s %8.2f\n", "redis SET", num("redis_set_gbps"), "redis GET",
                  num("redis_get_gbps"));
      for (uint32_t mib : redis_piece_mib)
        std::printf("  %-24s %8.2f  (SET %.2f)\n",
                    absl::StrFormat("redis GET %d MiB pipelined", mib).c_str(),
                    Median(f[absl::StrFormat("redis_piece_%d_get_gbps", mib)]),
                    Median(f[absl::StrFormat("redis_piece_%d_set_gbps", mib)]));
    } else {
      std::printf("  redis: not measured (%s)\n", redis_why.c_str());
    }
    if (sync.error.empty() && !sync.gbps.empty()) {
      std::printf(
          "  %-24s %8.2f  %.2f x memcpy (median of per-round ratios); %.3f copies per byte "
          "(target 2: the client's and the daemon's)\n",
          "shm put, sync, incl copy", Median(sync.gbps), Median(sync.over_memcpy), sync.copies);
    } else if (!sync.error.empty()) {
      std::printf("  shm put (durability sync): %s\n", sync.error.c_str());
    }
    if (!shm_error.empty()) std::printf("  shm: %s\n", shm_error.c_str());
    if (!daemon_error.empty()) std::printf("  kvtierd: %s\n", daemon_error.c_str());
    if (!lookup.error.empty()) std::printf("  pinned lookup: %s\n", lookup.error.c_str());
    if (lookup.error.empty() && ready) {
      const double share = lookup.ms / lookup.cold_prefill_ms;
      std::printf(
          "pinned lookup of a %llu-token prompt (%llu chunks): %llu RPCs (target 2: %s), %.2f ms "
          "= %.5f x its cold prefill at %.0f tokens/s (target 0.05: %s); one pin RPC per key: "
          "%llu RPCs, %.2f ms\n",
          static_cast<unsigned long long>(lookup_tokens),
          static_cast<unsigned long long>(lookup.chunks),
          static_cast<unsigned long long>(lookup.rpcs), lookup.rpcs <= 2 ? "PASS" : "FAIL",
          lookup.ms, share, prefill_tps, share <= 0.05 ? "PASS" : "FAIL",
          static_cast<unsigned long long>(lookup.per_key_rpcs), lookup.per_key_ms);
    }
  }
  return daemon_error.empty() ? 0 : 1;
}

KVT_BENCH_MODE(remote, "kvtierd gRPC/shm put+get vs loopback TCP, memcpy and redis", RunRemote);

}  // namespace
}  // namespace kvt::bench
