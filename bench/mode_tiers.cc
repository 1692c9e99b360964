// kvtier-bench tiers: host- and disk-tier bandwidth beside the physical limits measured in
// the same run, on the same bytes, in the same directory.
//
//   records : N Llama-3-8B chunks (32 layers, 8 KV heads, head_dim 128, bf16, 256 tokens:
//             131,072 B/token x 256 = 32 MiB payload + 128 B header), 4096-aligned buffers.
//   memcpy  : single-thread memcpy of each record into a warm 4096-aligned buffer.
//   host    : kvt::HostTier Put of every record (second pass: the arena's pages are already
//             faulted in; the first, cold pass is reported too) and Get into an aligned buffer.
//   raw     : O_DIRECT io_uring sequential write / read of the same bytes to a preallocated
//             file in --dir, `queue_depth` I/Os of `io_mib` MiB in flight, one fdatasync at
//             the end of the write: the device limit.
//   disk    : kvt::DiskTier Put (each record fdatasync'd, then its index entry synced) and
//             Get (payload checksum verified) of every record, same queue depth and I/O size.
//             disk_put_gbps / disk_get_gbps: ONE caller, one record at a time.
//   disk put 1 caller (group commit): a DiskTier with commit = kGrouped: ONE caller Puts
//             a block of --block records, then Sync() (all durable), timed together,
//             between two raw writes of the same records (each ends with one fdatasync):
//             disk_put_1caller_gbps. The get figure is measured the same way, block by
//             block between two raw reads. The ratios are medians over every block of every
//             round (each block against the mean of the raw transfers right beside it),
//             which a shared machine's load swings disturb least.
//   disk xN : the same records Put / Get by N concurrent callers (--threads, default 2,4:
//             what kvtierd's workers and the tiered store's write-back do), beside raw
//             write / read at N x queue_depth (the most the tier can have in flight with N
//             callers) and at queue_depth.
//   store disk hit : TieredStore::View of records only on disk (read once, straight into
//             tier 0's arena, and lent there) against the disk tier's own Get of the same
//             records into an aligned buffer, interleaved rounds:
//             store_disk_hit_over_raw_read (target >= 0.95). store_disk_hit_cpu_copies:
//             bytes written into memory per loaded byte, counted by the tiers'
//             instrumentation (TierStats::copy_bytes; target 1, the read itself);
//             store_get_copy_out_cpu_copies: the same for the copy-out Get.
// O_DIRECT keeps the page cache out of every disk figure.
#include <fcntl.h>
#include <liburing.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench_mode.h"
#include "kvstore/chunk_chain.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/disk_tier.h"
#include "kvstore/host_tier.h"
#include "kvstore/store_factory.h"
#include "kvstore/tiered_store.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace kvt::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kAlign = 4096;
uint64_t RoundUp(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
// CPU time of the whole process (every thread: the tier's committer included), seconds.
double CpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto tv = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return tv(u.ru_utime) + tv(u.ru_stime);
}
double Gbps(uint64_t bytes, double s) { return s > 0 ? static_cast<double>(bytes) / s / 1e9 : 0; }

struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<std::byte[], FreeDeleter>;
Buffer Aligned(uint64_t bytes) {
  return Buffer(static_cast<std::byte*>(std::aligned_alloc(kAlign, RoundUp(bytes))));
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "kvtier-bench tiers: %s\n", what.c_str());
  std::exit(1);
}

// Sequential O_DIRECT transfer of records [first, first + count) (all when count = 0) of
// `rec` bytes (padded to 4096) from/to `bufs` at consecutive padded offsets, keeping `qd`
// I/Os of `io` bytes in flight.
double RawTransfer(int fd, bool write, const std::vector<Buffer>& bufs, uint64_t rec, uint32_t qd,
                   uint64_t io, bool each_record = false, size_t first = 0, size_t count = 0) {
  if (count == 0) count = bufs.size() - first;
  io_uring ring;
  if (int rc = io_uring_queue_init(qd, &ring, 0); rc < 0)
    Die(std::string("io_uring: ") + std::strerror(-rc));
  const uint64_t padded = RoundUp(rec);
  struct Piece {
    std::byte* buf;
    uint64_t off, len;
  };
  std::vector<Piece> pieces;
  for (size_t r = first; r < first + count; ++r) {
    for (uint64_t o = 0; o < padded; o += io) {
      pieces.push_back({bufs[r].get() + o, r * padded + o, std::min(io, padded - o)});
    }
  }
  const size_t per_record = pieces.size() / count;
  const auto t0 = Clock::now();
  size_t next = 0, done = 0;
  uint32_t inflight = 0;
  while (done < pieces.size()) {
    // With each_record, a record's pieces drain (and a write is fdatasync'd) before the
    // next record's first piece is submitted, as one caller's Puts/Gets do.
    const size_t limit = each_record ? (done / per_record + 1) * per_record : pieces.size();
    while (next < limit && inflight < qd) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      const Piece& p = pieces[next];
      if (write) {
        io_uring_prep_write(sqe, fd, p.buf, static_cast<unsigned>(p.len), p.off);
      } else {
        io_uring_prep_read(sqe, fd, p.buf, static_cast<unsigned>(p.len), p.off);
      }
      ++next;
      ++inflight;
    }
    io_uring_submit(&ring);
    io_uring_cqe* cqe;
    if (int rc = io_uring_wait_cqe(&ring, &cqe); rc < 0) Die("io_uring_wait_cqe");
    if (cqe->res < 0) Die(std::string("raw I/O: ") + std::strerror(-cqe->res));
    io_uring_cqe_seen(&ring, cqe);
    --inflight;
    ++done;
    if (write && each_record && done % per_record == 0 && ::fdatasync(fd) != 0) Die("fdatasync");
  }
  if (write && ::fdatasync(fd) != 0) Die("fdatasync");
  const double s = Seconds(t0, Clock::now());
  io_uring_queue_exit(&ring);
  return s;
}

int RunTiers(int argc, char** argv) {
  CLI::App app{"host/disk tier bandwidth vs memcpy and raw O_DIRECT io_uring"};
  bool json = false, keep = false;
  std::string dir;
  uint32_t chunks = 32, qd = 8, tokens = 256, rounds = 3;
  uint64_t io_mib = 1;
  uint32_t commit_delay_ms = DiskTierOptions{}.commit_delay_ms;
  std::vector<uint32_t> threads = {2, 4};
  app.add_flag("--json", json, "print one JSON object");
  app.add_option("--dir", dir, "directory for the disk phases (default: a fresh temp dir)");
  app.add_option("--chunks", chunks, "chunks per phase (32 MiB each)")
      ->check(CLI::Range(1u, 4096u));
  app.add_option("--tokens", tokens, "tokens per chunk")->check(CLI::Range(1u, 4096u));
  app.add_option("--queue-depth", qd, "I/Os in flight (raw and disk)")->check(CLI::Range(1u, 256u));
  app.add_option("--io-mib", io_mib, "I/O size in MiB")->check(CLI::Range(1u, 64u));
  app.add_option("--rounds", rounds, "interleaved rounds; each figure is their median")
      ->check(CLI::Range(1u, 100u));
  app.add_option("--threads", threads, "concurrent callers for the disk xN phases (list; 0 = none)")
      ->check(CLI::Range(0u, 64u))
      ->delimiter(',');
  app.add_option("--commit-delay-ms", commit_delay_ms,
                 "commit_delay_ms of the group-commit tier (disk_put_1caller_gbps)")
      ->check(CLI::Range(1u, 60000u));
  app.add_flag("--keep", keep, "keep the files in --dir");
  uint32_t block = 8;
  app.add_option("--block", block,
                 "records per interleaved block of the 1-caller put/get phases: each block is "
                 "timed between two raw transfers of the same records")
      ->check(CLI::Range(1u, 4096u));
  std::string only = "all";
  app.add_option("--only", only,
                 "all, or put (1-caller put phases) or get (1-caller get phases) alone: "
                 "quicker runs of one headline ratio")
      ->check(CLI::IsMember({"all", "put", "get"}));
  CLI11_PARSE(app, argc, argv);
  if (json) spdlog::set_level(spdlog::level::warn);
  const uint64_t io = io_mib << 20;
  const bool run_put = only != "get", run_get = only != "put", run_rest = only == "all";
  if (!run_rest) threads.clear();

  fs::path base = dir.empty()
                      ? fs::temp_directory_path() / ("kvtier-bench-" + std::to_string(::getpid()))
                      : fs::path(dir);
  std::error_code ec;
  fs::create_directories(base, ec);
  if (ec) Die("cannot create " + base.string() + ": " + ec.message());
  const fs::path raw_path = base / "raw.dat";
  const fs::path tier_dir = base / "disk-tier";
  fs::remove_all(tier_dir, ec);

  // ---- records
  const KvLayout layout{32, 8, 128, DType::kBF16, LayoutKind::kFlashAttnNHD};
  ChunkChainEncoder chain(NamespaceId{0x6c6c616d61, 0x33}, layout);
  const uint64_t payload_bytes = layout.payload_bytes(tokens);
  const uint64_t rec = kChunkHeaderBytes + payload_bytes;
  const uint64_t padded = RoundUp(rec);
  const uint64_t total = rec * chunks;
  std::vector<std::byte> payload(payload_bytes);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i + 8 <= payload.size(); i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    std::memcpy(&payload[i], &x, 8);
  }
  std::vector<Buffer> recs;
  std::vector<ChunkKey> keys;
  for (uint32_t i = 0; i < chunks; ++i) {
    const ChunkKey key{i + 1, 0x7469657273};
    std::memcpy(payload.data(), &i, sizeof i);  // distinct payloads
    recs.push_back(Aligned(padded));
    std::memset(recs.back().get() + rec, 0, padded - rec);
    if (absl::Status s =
            chain.EncodeNext(key, tokens, payload, std::span<std::byte>(recs.back().get(), rec));
        !s.ok()) {
      Die(s.ToString());
    }
    keys.push_back(key);
  }
  Buffer dst = Aligned(padded);
  std::memset(dst.get(), 1, padded);

  // Every phase runs `rounds` times, interleaved (limit, then kvtier figure), and each
  // figure is the median of its rounds (min and max beside it): on a shared machine this
  // compares like with like and reports the spread.
  struct Best {
    std::vector<double> xs;
    double v = 0;  // median so far
    void Add(double x) {
      xs.push_back(x);
      std::vector<double> s = xs;
      std::sort(s.begin(), s.end());
      const size_t n = s.size();
      v = n % 2 == 1 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    }
    double min() const { return xs.empty() ? 0 : *std::min_element(xs.begin(), xs.end()); }
    double max() const { return xs.empty() ? 0 : *std::max_element(xs.begin(), xs.end()); }
  };
  Best memcpy_gbps, host_put_gbps, host_put_cold_gbps, host_get_gbps, raw_write_gbps,
      raw_write_sync_gbps, raw_read_gbps, disk_put_gbps, disk_get_gbps, disk_put_1caller_gbps,
      raw_write_1caller_gbps, disk_put_1caller_ratio, disk_get_ratio_round, raw_read_each_gbps;
  auto put_all = [&](Tier& t, uint32_t first = 0, uint32_t count = 0) {
    const uint32_t end = count == 0 ? chunks : first + count;
    const auto a = Clock::now();
    for (uint32_t i = first; i < end; ++i) {
      if (absl::Status s = t.Put(std::span<const std::byte>(recs[i].get(), rec)); !s.ok())
        Die(s.ToString());
    }
    return Seconds(a, Clock::now());
  };
  auto get_all = [&](Tier& t, uint32_t first = 0, uint32_t count = 0) {
    const uint32_t end = count == 0 ? chunks : first + count;
    const auto a = Clock::now();
    for (uint32_t i = first; i < end; ++i) {
      auto n = t.Get(keys[i], std::span<std::byte>(dst.get(), padded));
      if (!n.ok() || *n != rec) Die("get: " + n.status().ToString());
    }
    return Seconds(a, Clock::now());
  };
  // N callers; caller c handles records c, c + N, ...
  auto parallel = [&](uint32_t n, auto&& fn) {
    const auto a = Clock::now();
    std::vector<std::thread> th;
    for (uint32_t c = 0; c < n; ++c) {
      th.emplace_back([&, c] {
        for (uint32_t i = c; i < chunks; i += n) fn(c, i);
      });
    }
    for (auto& t : th) t.join();
    return Seconds(a, Clock::now());
  };
  std::erase(threads, 0u);
  std::vector<Buffer> tdst;
  uint32_t max_threads = 0;
  for (uint32_t n : threads) max_threads = std::max(max_threads, n);
  for (uint32_t c = 0; c < max_threads; ++c) tdst.push_back(Aligned(padded));
  auto put_par = [&](Tier& t, uint32_t n) {
    return parallel(n, [&](uint32_t, uint32_t i) {
      if (absl::Status s = t.Put(std::span<const std::byte>(recs[i].get(), rec)); !s.ok())
        Die(s.ToString());
    });
  };
  auto get_par = [&](Tier& t, uint32_t n) {
    return parallel(n, [&](uint32_t c, uint32_t i) {
      auto got = t.Get(keys[i], std::span<std::byte>(tdst[c].get(), padded));
      if (!got.ok() || *got != rec) Die("get: " + got.status().ToString());
      if (std::memcmp(tdst[c].get(), recs[i].get(), rec) != 0) Die("disk get returned wrong bytes");
    });
  };
  auto erase_all = [&](Tier& t) {
    for (const auto& k : keys) {
      if (absl::Status s = t.Erase(k); !s.ok()) Die(s.ToString());
    }
  };

  // ---- memcpy limit and host tier
  HostTierOptions ho;
  ho.capacity_bytes = padded * (chunks + 1);
  ho.alignment = 4096;
  auto host = HostTier::Create(ho);
  if (!host.ok()) Die(host.status().ToString());
  std::memcpy(dst.get(), recs[0].get(), rec);  // warm
  for (uint32_t r = 0; r < (run_rest ? rounds : 0); ++r) {
    auto t0 = Clock::now();
    for (uint32_t i = 0; i < chunks; ++i) std::memcpy(dst.get(), recs[i].get(), rec);
    memcpy_gbps.Add(Gbps(total, Seconds(t0, Clock::now())));
    // Round 0 faults the arena's pages in (reported as the cold figure).
    (r == 0 ? host_put_cold_gbps : host_put_gbps).Add(Gbps(total, put_all(**host)));
    host_get_gbps.Add(Gbps(total, get_all(**host)));
    if (std::memcmp(dst.get(), recs[chunks - 1].get(), rec) != 0)
      Die("host get returned wrong bytes");
    erase_all(**host);
  }
  if (rounds == 1) host_put_gbps = host_put_cold_gbps;
  host->reset();

  // ---- raw O_DIRECT io_uring limit and disk tier, interleaved
  const int fd = ::open(raw_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0644);
  if (fd < 0) Die("open " + raw_path.string() + " with O_DIRECT: " + std::strerror(errno));
  std::vector<Buffer> rbufs;
  for (uint32_t i = 0; i < chunks; ++i) {
    rbufs.push_back(Aligned(padded));
    std::memset(rbufs.back().get(), 0, padded);  // fault the pages in before timing
  }
  DiskTierOptions dopt;
  dopt.dir = tier_dir.string();
  dopt.capacity_bytes = padded * chunks + (64ull << 20);
  dopt.file_bytes =
      std::max(padded, std::min<uint64_t>(1ull << 30, dopt.capacity_bytes) / kAlign * kAlign);
  dopt.queue_depth = qd;
  dopt.io_bytes = io;
  auto disk = DiskTier::Open(dopt);
  if (!disk.ok()) Die(disk.status().ToString());
  DiskTierOptions gopt = dopt;
  gopt.dir = (base / "disk-tier-grouped").string();
  gopt.commit = DiskCommit::kGrouped;
  gopt.commit_delay_ms = commit_delay_ms;
  fs::remove_all(gopt.dir, ec);
  auto grouped = DiskTier::Open(gopt);
  if (!grouped.ok()) Die(grouped.status().ToString());
  // Preallocated once, like the tier's record files: round 0 writes fresh extents in both,
  // later rounds rewrite extents in both (the tier reuses the extents freed by Erase).
  if (::fallocate(fd, 0, 0, static_cast<off_t>(padded * chunks)) != 0) Die("fallocate raw file");
  ::fsync(fd);
  struct Multi {
    uint32_t n;
    Best raw_write_qdn, raw_read_qdn, disk_put, disk_get;
  };
  std::vector<Multi> multi;
  for (uint32_t n : threads) multi.push_back(Multi{n, {}, {}, {}, {}});
  // CPU seconds (all threads) spent in the 1-caller phases and in the raw transfer just
  // before each block: what the tier costs the machine beyond the device's own limit.
  double raw_write_cpu_s = 0, put_1caller_cpu_s = 0, raw_read_cpu_s = 0, get_cpu_s = 0;
  uint64_t cpu_put_bytes = 0, cpu_get_bytes = 0;
  // One caller's tier operation over the records block by block, each block between two
  // raw transfers of the same records (their mean is its limit). `op(b, nb)` returns its
  // seconds; `after(b, nb)` runs untimed. Adds each block's ratio to `ratio` and the CPU
  // seconds of the raw and the tier parts to *raw_cpu and *tier_cpu. Returns {tier seconds,
  // raw seconds}.
  auto interleaved = [&](bool write, auto&& op, auto&& after, Best& ratio, double* raw_cpu,
                         double* tier_cpu, uint64_t* cpu_bytes) {
    const std::vector<Buffer>& bufs = write ? recs : rbufs;
    double tier_s = 0, raw_s = 0;
    for (uint32_t b = 0; b < chunks; b += block) {
      const uint32_t nb = std::min(block, chunks - b);
      const uint64_t bytes = rec * nb;
      const double c0 = CpuSeconds();
      const double raw_a = RawTransfer(fd, write, bufs, rec, qd, io, false, b, nb);
      const double c1 = CpuSeconds();
      const double t = op(b, nb);
      *raw_cpu += c1 - c0;
      *tier_cpu += CpuSeconds() - c1;
      *cpu_bytes += bytes;
      after(b, nb);
      const double raw_b = RawTransfer(fd, write, bufs, rec, qd, io, false, b, nb);
      ratio.Add(Gbps(bytes, t) / ((Gbps(bytes, raw_a) + Gbps(bytes, raw_b)) / 2));
      tier_s += t;
      raw_s += (raw_a + raw_b) / 2;
    }
    return std::pair<double, double>(tier_s, raw_s);
  };
  auto nothing = [](uint32_t, uint32_t) {};
  for (uint32_t r = 0; r < rounds; ++r) {
    if (run_put) {
      // Group-commit put, one caller; the block's time includes its Sync().
      const auto [put_s, raw_s] = interleaved(
          true,
          [&](uint32_t b, uint32_t nb) {
            const auto a = Clock::now();
            put_all(**grouped, b, nb);
            if (absl::Status s = (*grouped)->Sync(); !s.ok()) Die(s.ToString());
            return Seconds(a, Clock::now());
          },
          nothing, disk_put_1caller_ratio, &raw_write_cpu_s, &put_1caller_cpu_s, &cpu_put_bytes);
      disk_put_1caller_gbps.Add(Gbps(total, put_s));
      raw_write_1caller_gbps.Add(Gbps(total, raw_s));
      raw_write_gbps.Add(Gbps(total, raw_s));
      erase_all(**grouped);
    }
    raw_write_gbps.Add(Gbps(total, RawTransfer(fd, true, recs, rec, qd, io)));
    disk_put_gbps.Add(Gbps(total, put_all(**disk)));
    if (run_get) {
      // Get, one caller, as for put.
      const auto [get_s, raw_s] = interleaved(
          false, [&](uint32_t b, uint32_t nb) { return get_all(**disk, b, nb); },
          [&](uint32_t b, uint32_t nb) {
            if (std::memcmp(dst.get(), recs[b + nb - 1].get(), rec) != 0)
              Die("disk get returned wrong bytes");
          },
          disk_get_ratio_round, &raw_read_cpu_s, &get_cpu_s, &cpu_get_bytes);
      if (std::memcmp(rbufs[chunks - 1].get(), recs[chunks - 1].get(), rec) != 0)
        Die("raw read mismatch");
      disk_get_gbps.Add(Gbps(total, get_s));
      raw_read_gbps.Add(Gbps(total, raw_s));
      // Diagnostic: raw reads that drain after each record, as one caller's Gets must.
      raw_read_each_gbps.Add(Gbps(total, RawTransfer(fd, false, rbufs, rec, qd, io, true)));
    }
    if (run_put)
      raw_write_sync_gbps.Add(Gbps(total, RawTransfer(fd, true, recs, rec, qd, io, true)));
    erase_all(**disk);
    for (Multi& m : multi) {
      const uint32_t qdn = std::min<uint32_t>(qd * m.n, 4096);
      m.raw_write_qdn.Add(Gbps(total, RawTransfer(fd, true, recs, rec, qdn, io)));
      raw_write_gbps.Add(Gbps(total, RawTransfer(fd, true, recs, rec, qd, io)));
      m.disk_put.Add(Gbps(total, put_par(**disk, m.n)));
      m.raw_read_qdn.Add(Gbps(total, RawTransfer(fd, false, rbufs, rec, qdn, io)));
      m.disk_get.Add(Gbps(total, get_par(**disk, m.n)));
      erase_all(**disk);
    }
  }
  rbufs.clear();
  ::close(fd);
  fs::remove(raw_path, ec);
  const std::string backend(DiskIoBackendName((*disk)->backend()));
  const bool direct = (*disk)->direct_io();
  const DiskTierExtraStats gx = (*grouped)->extra_stats();
  disk->reset();
  grouped->reset();
  fs::remove_all(gopt.dir, ec);

  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  // ---- a disk hit through the store, as an engine loads it (verify once): the disk tier
  // hashes the payload while reading, the store trusts it, the connector checks the
  // header (CheckChunkHeader). Beside it, in the same rounds, the path before issue 12:
  // the same Get plus the store's and the connector's own VerifyChunk passes.
  Best store_load_gbps, store_load_rehash_gbps;
  if (run_rest) {
    fs::remove_all(tier_dir, ec);
    StoreOptions so;
    so.host.capacity_bytes = 0;  // the disk tier alone: every Get is a disk hit
    so.disk = dopt;
    auto store = OpenTieredStore(so);
    if (!store.ok()) Die(store.status().ToString());
    for (uint32_t i = 0; i < chunks; ++i) {
      auto s = (*store)->Write({.record = std::span<const std::byte>(recs[i].get(), rec)});
      if (!s.ok()) Die(s.status().ToString());
    }
    const NamespaceId ns = DecodeChunkHeader(std::span<const std::byte>(recs[0].get(), rec))->ns;
    auto load_all = [&](int extra_verifies) {
      const auto a = Clock::now();
      for (uint32_t i = 0; i < chunks; ++i) {
        auto n = (*store)->Get(keys[i], std::span<std::byte>(dst.get(), padded));
        if (!n.ok()) Die(n.status().ToString());
        const std::span<const std::byte> got(dst.get(), *n);
        const DecodeExpectations expect{ns, keys[i], &layout};
        if (!CheckChunkHeader(got, expect).ok()) Die("store load: bad header");
        for (int v = 0; v < extra_verifies; ++v) {
          if (!VerifyChunk(got, expect).ok()) Die("store load: verify failed");
        }
      }
      return Seconds(a, Clock::now());
    };
    for (uint32_t r = 0; r < rounds; ++r) {
      store_load_gbps.Add(Gbps(total, load_all(0)));
      store_load_rehash_gbps.Add(Gbps(total, load_all(2)));
    }
    if (std::memcmp(dst.get(), recs[chunks - 1].get(), rec) != 0)
      Die("store load returned wrong bytes");
  }
  // ---- a disk hit through the store as an engine loads it since issue 20: View, which
  // reads the record once, straight into tier 0's arena (the promotion, in place), and
  // lends it there; beside it, in the same rounds, the limit: the disk tier's own Get of
  // the same records into an aligned buffer (the same read and hash, no store). The CPU
  // copies per loaded byte are counted by the tiers' instrumentation (TierStats::
  // copy_bytes: a read into memory counts one, every bounce or memcpy one more), for the
  // View and for the allocating Get the load used before (a zero-filled vector the
  // disk read bounces into, then copied again into tier 0).
  Best view_gbps, view_limit_gbps, view_ratio;
  double view_copies = 0, alloc_get_copies = 0;
  if (run_rest) {
    fs::remove_all(tier_dir, ec);
    HostTierOptions vho;
    vho.capacity_bytes = (padded + (1ull << 20)) * chunks;  // every promoted chunk fits
    auto vhost = HostTier::Create(vho);
    if (!vhost.ok()) Die(vhost.status().ToString());
    auto vdisk = DiskTier::Open(dopt);
    if (!vdisk.ok()) Die(vdisk.status().ToString());
    HostTier* hp = vhost->get();
    DiskTier* dp = vdisk->get();
    std::vector<TierFactory> vt;
    vt.push_back(UseTier(std::move(*vhost)));
    vt.push_back(UseTier(std::move(*vdisk)));
    auto store = TieredStore::Create(std::move(vt), {});
    if (!store.ok()) Die(store.status().ToString());
    for (uint32_t i = 0; i < chunks; ++i) {  // on disk only
      if (absl::Status s = dp->Put(std::span<const std::byte>(recs[i].get(), rec)); !s.ok())
        Die(s.ToString());
    }
    const NamespaceId ns = DecodeChunkHeader(std::span<const std::byte>(recs[0].get(), rec))->ns;
    auto copied = [&] { return hp->stats().copy_bytes + dp->stats().copy_bytes; };
    auto drop_tier0 = [&] {
      for (const ChunkKey& k : keys) {
        if (absl::Status s = hp->Erase(k); !s.ok()) Die(s.ToString());
      }
    };
    auto view_all = [&] {
      drop_tier0();
      const uint64_t c0 = copied();
      const auto a = Clock::now();
      for (uint32_t i = 0; i < chunks; ++i) {
        GetInfo info;
        absl::StatusOr<RecordView> v = (*store)->View(keys[i], &info);
        if (!v.ok()) Die("store view: " + v.status().ToString());
        if (info.tier_index != MakeTierIndex(1)) Die("store view: not a disk hit");
        if (!CheckChunkHeader(v->bytes(), DecodeExpectations{ns, keys[i], &layout}).ok())
          Die("store view: bad header");
        if (i + 1 == chunks && std::memcmp(v->bytes().data(), recs[i].get(), rec) != 0)
          Die("store view returned wrong bytes");
      }
      const double t = Seconds(a, Clock::now());
      view_copies = static_cast<double>(copied() - c0) / static_cast<double>(total);
      return t;
    };
    auto tier_get_all = [&] {
      const auto a = Clock::now();
      for (uint32_t i = 0; i < chunks; ++i) {
        auto n = dp->Get(keys[i], std::span<std::byte>(dst.get(), padded));
        if (!n.ok()) Die(n.status().ToString());
      }
      return Seconds(a, Clock::now());
    };
    for (uint32_t r = 0; r < rounds; ++r) {
      double vs = 0, ls = 0;
      if (r % 2 == 0) {
        vs = view_all();
        ls = tier_get_all();
      } else {
        ls = tier_get_all();
        vs = view_all();
      }
      view_gbps.Add(Gbps(total, vs));
      view_limit_gbps.Add(Gbps(total, ls));
      view_ratio.Add(ratio(Gbps(total, vs), Gbps(total, ls)));
    }
    // The copy-out Get (what a caller without View pays), counted the same way.
    drop_tier0();
    const uint64_t c0 = copied();
    std::vector<std::byte> out(rec);
    for (uint32_t i = 0; i < chunks; ++i) {
      absl::StatusOr<uint64_t> got = (*store)->Get(keys[i], out);
      if (!got.ok()) Die("store get: " + got.status().ToString());
    }
    alloc_get_copies = static_cast<double>(copied() - c0) / static_cast<double>(total);
  }
  if (!keep) fs::remove_all(dir.empty() ? base : tier_dir, ec);

  auto per_gb = [](double cpu_s, uint64_t bytes) {
    return bytes > 0 ? cpu_s * 1e3 / (static_cast<double>(bytes) / 1e9) : 0.0;
  };
  if (json) {
    nlohmann::json j = {
        {"chunks", chunks},
        {"chunk_bytes", rec},
        {"queue_depth", qd},
        {"rounds", rounds},
        {"io_bytes", io},
        {"disk_backend", backend},
        {"o_direct", direct},
        {"memcpy_gbps", memcpy_gbps.v},
        {"host_put_gbps", host_put_gbps.v},
        {"host_put_cold_gbps", host_put_cold_gbps.v},
        {"host_get_gbps", host_get_gbps.v},
        {"raw_write_gbps", raw_write_gbps.v},
        {"raw_read_gbps", raw_read_gbps.v},
        {"raw_write_sync_each_gbps", raw_write_sync_gbps.v},
        {"disk_put_gbps", disk_put_gbps.v},
        {"disk_get_gbps", disk_get_gbps.v},
        {"host_put_ratio", ratio(host_put_gbps.v, memcpy_gbps.v)},
        {"host_get_ratio", ratio(host_get_gbps.v, memcpy_gbps.v)},
        {"disk_put_ratio", ratio(disk_put_gbps.v, raw_write_gbps.v)},
        {"disk_get_ratio", ratio(disk_get_gbps.v, raw_read_gbps.v)},
        {"disk_put_get_callers", 1},
        {"statistic", "median"},
        {"disk_put_1caller_gbps", disk_put_1caller_gbps.v},
        {"disk_put_1caller_min_gbps", disk_put_1caller_gbps.min()},
        {"disk_put_1caller_max_gbps", disk_put_1caller_gbps.max()},
        {"disk_put_1caller_commit", "grouped"},
        {"disk_put_1caller_commit_delay_ms", commit_delay_ms},
        {"disk_put_1caller_limit_gbps", raw_write_1caller_gbps.v},
        {"disk_put_1caller_ratio", disk_put_1caller_ratio.v},
        {"disk_put_1caller_ratio_min", disk_put_1caller_ratio.min()},
        {"disk_put_1caller_ratio_max", disk_put_1caller_ratio.max()},
        {"disk_put_1caller_group_commits", gx.group_commits},
        {"disk_put_1caller_committed_records", gx.group_committed_records},
        {"disk_get_ratio_min", disk_get_ratio_round.min()},
        {"disk_get_ratio_max", disk_get_ratio_round.max()},
        {"disk_get_ratio_median_of_rounds", disk_get_ratio_round.v},
        {"raw_read_each_record_gbps", raw_read_each_gbps.v},
        {"block_records", block},
        {"ratio_samples_per_figure", rounds * ((chunks + block - 1) / block)},
        {"disk_put_1caller_cpu_ms_per_gb", per_gb(put_1caller_cpu_s, cpu_put_bytes)},
        {"raw_write_cpu_ms_per_gb", per_gb(raw_write_cpu_s, cpu_put_bytes)},
        {"disk_get_cpu_ms_per_gb", per_gb(get_cpu_s, cpu_get_bytes)},
        {"raw_read_cpu_ms_per_gb", per_gb(raw_read_cpu_s, cpu_get_bytes)},
        {"disk_get_over_raw_read_each_record", ratio(disk_get_gbps.v, raw_read_each_gbps.v)},
        {"store_load_gbps", store_load_gbps.v},
        {"store_load_rehash_gbps", store_load_rehash_gbps.v},
        {"store_load_ratio", ratio(store_load_gbps.v, disk_get_gbps.v)},
        {"store_load_rehash_ratio", ratio(store_load_rehash_gbps.v, disk_get_gbps.v)},
        {"store_disk_hit_gbps", view_gbps.v},
        {"store_disk_hit_limit_gbps", view_limit_gbps.v},
        {"store_disk_hit_over_raw_read", view_ratio.v},
        {"store_disk_hit_over_raw_read_min", view_ratio.min()},
        {"store_disk_hit_over_raw_read_target", 0.95},
        {"store_disk_hit_cpu_copies", view_copies},
        {"store_disk_hit_cpu_copies_target", 1},
        {"store_get_copy_out_cpu_copies", alloc_get_copies},
    };
    for (const Multi& m : multi) {
      const std::string t = std::to_string(m.n) + "t";
      const std::string q = "qd" + std::to_string(qd * m.n);
      j["disk_put_" + t + "_gbps"] = m.disk_put.v;
      j["disk_get_" + t + "_gbps"] = m.disk_get.v;
      j["raw_write_" + q + "_gbps"] = m.raw_write_qdn.v;
      j["raw_read_" + q + "_gbps"] = m.raw_read_qdn.v;
      j["disk_put_" + t + "_ratio"] = ratio(m.disk_put.v, raw_write_gbps.v);
      j["disk_put_" + t + "_ratio_" + q] = ratio(m.disk_put.v, m.raw_write_qdn.v);
      j["disk_get_" + t + "_ratio"] = ratio(m.disk_get.v, raw_read_gbps.v);
      j["disk_get_" + t + "_ratio_" + q] = ratio(m.disk_get.v, m.raw_read_qdn.v);
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf(
      "tiers: %u chunks x %llu B (Llama-3-8B, %u tokens), queue depth %u, %llu MiB I/Os, "
      "disk backend %s%s, dir %s\n",
      chunks, static_cast<unsigned long long>(rec), tokens, qd,
      static_cast<unsigned long long>(io_mib), backend.c_str(), direct ? " O_DIRECT" : "",
      base.c_str());
  std::printf("medians of %u interleaved rounds\n", rounds);
  std::printf("%-28s %10s %-22s %10s %7s\n", "figure", "GB/s", "limit", "GB/s", "ratio");
  auto row = [&](const char* name, double v, const char* lim, double l) {
    std::printf("%-28s %10.2f %-22s %10.2f %7.3f\n", name, v, lim, l, ratio(v, l));
  };
  // The headline ratios are medians of per-block ratios (each block's figure against the
  // limit measured right beside it), which a shared machine's drift affects least.
  std::printf("%-28s %10.2f %-22s %10.2f %7.3f  [%.3f..%.3f]\n", "disk put 1 caller, grouped",
              disk_put_1caller_gbps.v, "raw write (around it)", raw_write_1caller_gbps.v,
              disk_put_1caller_ratio.v, disk_put_1caller_ratio.min(), disk_put_1caller_ratio.max());
  std::printf("%-28s %10.2f %-22s %10.2f %7.3f  [%.3f..%.3f]\n", "disk get 1 caller",
              disk_get_gbps.v, "raw O_DIRECT read", raw_read_gbps.v, disk_get_ratio_round.v,
              disk_get_ratio_round.min(), disk_get_ratio_round.max());
  std::printf(
      "  (ratio = median of per-block ratios [min..max]; %llu records in %llu group commits)\n",
      static_cast<unsigned long long>(gx.group_committed_records),
      static_cast<unsigned long long>(gx.group_commits));
  std::printf(
      "  CPU ms per GB (all threads): put %.1f beside raw write %.1f; get %.1f beside raw "
      "read %.1f\n",
      per_gb(put_1caller_cpu_s, cpu_put_bytes), per_gb(raw_write_cpu_s, cpu_put_bytes),
      per_gb(get_cpu_s, cpu_get_bytes), per_gb(raw_read_cpu_s, cpu_get_bytes));
  row("host put", host_put_gbps.v, "memcpy (1 thread)", memcpy_gbps.v);
  row("host put (cold arena)", host_put_cold_gbps.v, "memcpy (1 thread)", memcpy_gbps.v);
  row("host get", host_get_gbps.v, "memcpy (1 thread)", memcpy_gbps.v);
  row("disk put (store, 1 caller)", disk_put_gbps.v, "raw O_DIRECT write", raw_write_gbps.v);
  row("disk get (load, 1 caller)", disk_get_gbps.v, "raw O_DIRECT read", raw_read_gbps.v);
  row("disk get (load, 1 caller)", disk_get_gbps.v, "raw read, drain/record", raw_read_each_gbps.v);
  row("disk put (store, 1 caller)", disk_put_gbps.v, "raw write+sync/chunk", raw_write_sync_gbps.v);
  row("store load, verify once", store_load_gbps.v, "disk get", disk_get_gbps.v);
  row("store load, +2 verifies (old)", store_load_rehash_gbps.v, "disk get", disk_get_gbps.v);
  std::printf("%-28s %10.2f %-22s %10.2f %7.3f  [min %.3f, target >= 0.95]\n",
              "store disk hit (View)", view_gbps.v, "disk tier get, same", view_limit_gbps.v,
              view_ratio.v, view_ratio.min());
  std::printf(
      "  CPU copies per loaded byte: View of a disk hit %.3f (target 1); the copy-out "
      "Get %.3f\n",
      view_copies, alloc_get_copies);
  for (const Multi& m : multi) {
    const std::string put = "disk put (" + std::to_string(m.n) + " callers)";
    const std::string get = "disk get (" + std::to_string(m.n) + " callers)";
    const std::string lw = "raw write qd " + std::to_string(qd * m.n);
    const std::string lr = "raw read qd " + std::to_string(qd * m.n);
    row(put.c_str(), m.disk_put.v, "raw O_DIRECT write", raw_write_gbps.v);
    row(put.c_str(), m.disk_put.v, lw.c_str(), m.raw_write_qdn.v);
    row(get.c_str(), m.disk_get.v, "raw O_DIRECT read", raw_read_gbps.v);
    row(get.c_str(), m.disk_get.v, lr.c_str(), m.raw_read_qdn.v);
  }
  return 0;
}

}  // namespace

KVT_BENCH_MODE(tiers, "host/disk tier bandwidth vs memcpy and raw O_DIRECT io_uring", RunTiers);

}  // namespace kvt::bench
