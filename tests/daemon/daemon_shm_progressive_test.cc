// Progressive shm transfers (kvstore/shm_progress.h, docs/daemon.md "Progressive
// transfers") against a real kvtierd: records round-trip byte for byte through
// PutShmFrom / GetShmInto (host tier: pipelined; disk tier after a restart: written
// whole), RemoteTier uses them through slots, and a client that breaks the protocol (stops
// publishing, abandons, publishes past the record, puts its control block inside the data) gets a
// clear error while nothing is stored and the daemon goes on serving.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <thread>

#include "daemon_harness.h"
#include "kvstore/remote_tier.h"
#include "kvstore/shm_progress.h"
#include "proto/kvtier.grpc.pb.h"

namespace kvt::testing {
namespace {

namespace pb = ::kvtier::v1;

constexpr uint32_t kTokens = 1000;  // ~1 MiB records (SmallLayout: 1 KiB per token): 4 pieces

class DaemonShmProgressiveTest : public ::testing::Test {
 protected:
  void StartDaemon(const std::string& extra = "") {
    daemon_ = std::make_unique<Daemon>(dir_.path(), extra);
    std::string err;
    ASSERT_TRUE(daemon_->Start(&err)) << err;
  }
  // A progressive Put request for `length` bytes at slot 0 (control block at 0, data at
  // 64), sent on a raw stream the test then drives by hand.
  struct RawPut {
    grpc::ClientContext ctx;
    pb::PutResponse resp;
    std::unique_ptr<grpc::ClientWriter<pb::PutRequest>> writer;
  };
  std::unique_ptr<RawPut> StartRawPut(pb::KvTier::Stub& stub, uint64_t region_id, uint64_t length,
                                      uint64_t progress_offset = 0) {
    auto p = std::make_unique<RawPut>();
    p->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    p->writer = stub.Put(&p->ctx, &p->resp);
    pb::PutRequest req;
    req.set_protocol_version(kKvtierProtocolVersion);
    req.set_record_bytes(length);
    auto* sl = req.mutable_shm();
    sl->set_region_id(region_id);
    sl->set_offset(kShmProgressBlockBytes);
    sl->set_length(length);
    sl->set_progressive(true);
    sl->set_progress_offset(progress_offset);
    EXPECT_TRUE(p->writer->Write(req));
    return p;
  }
  std::unique_ptr<pb::KvTier::Stub> Stub() {
    return pb::KvTier::NewStub(
        grpc::CreateChannel(daemon_->target(), grpc::InsecureChannelCredentials()));
  }
  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(DaemonShmProgressiveTest, RecordsRoundTripByteForByteFromHostAndDiskTiers) {
  StartDaemon("durability: sync\n");
  auto client = Connect(daemon_->target(), "", std::chrono::seconds(30));
  Chain chain = MakeChain(TestNamespace("m"), 6, kTokens, 31);
  const uint64_t slot = 2 << 20;
  auto session = client->AttachShm(2 * slot);
  ASSERT_TRUE(session.ok()) << session.status();
  for (size_t i = 0; i < chain.records.size(); ++i)
    ASSERT_TRUE(client->PutShmFrom(**session, (i % 2) * slot, slot, chain.records[i]).ok()) << i;
  for (int pass = 0; pass < 2; ++pass) {
    SCOPED_TRACE(pass == 0 ? "host tier (pipelined)" : "after restart (disk tier, written whole)");
    std::vector<std::byte> out(slot);
    for (size_t i = 0; i < chain.records.size(); ++i) {
      std::fill(out.begin(), out.end(), std::byte{0});
      auto n = client->GetShmInto(**session, chain.keys[i], (i % 2) * slot, slot, out);
      ASSERT_TRUE(n.ok()) << i << ": " << n.status();
      ASSERT_EQ(*n, chain.records[i].size());
      EXPECT_TRUE(std::equal(chain.records[i].begin(), chain.records[i].end(), out.begin()))
          << "record " << i << " differs";
      EXPECT_EQ(*client->Get(chain.keys[i]), chain.records[i]) << i;  // what gRPC serves
    }
    // A miss is NotFound and leaves the session usable.
    EXPECT_EQ(client->GetShmInto(**session, ChunkKey{7, 7}, 0, slot, out).status().code(),
              absl::StatusCode::kNotFound);
    EXPECT_FALSE((*session)->broken.load());
    // Too small a buffer: OutOfRange, nothing written past it.
    std::vector<std::byte> small(1000);
    EXPECT_EQ(client->GetShmInto(**session, chain.keys[0], 0, slot, small).status().code(),
              absl::StatusCode::kOutOfRange);
    if (pass == 0) {
      ASSERT_EQ(daemon_->Kill(SIGTERM), 0) << daemon_->Log();
      std::string err;
      ASSERT_TRUE(daemon_->Start(&err)) << err;
      client = Connect(daemon_->target(), "", std::chrono::seconds(30));
      session = client->AttachShm(2 * slot);
      ASSERT_TRUE(session.ok()) << session.status();
    }
  }
  // A slot the record does not fit, or a misaligned one: InvalidArgument before any call.
  EXPECT_EQ(client->PutShmFrom(**session, 0, 4096, chain.records[0]).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client->PutShmFrom(**session, 8, slot, chain.records[0]).code(),
            absl::StatusCode::kInvalidArgument);
}

// The client sends the request, publishes half the record, then stops: the Put fails
// with DeadlineExceeded after shm.stall_timeout_ms, nothing is stored, and the worker is
// free again (the next Put works).
TEST_F(DaemonShmProgressiveTest, StalledWriterFailsAfterStallTimeoutAndStoresNothing) {
  StartDaemon("shm:\n  stall_timeout_ms: 300\nworkers: 1\n");
  auto client = Connect(daemon_->target(), "", std::chrono::seconds(30));
  Chain chain = MakeChain(TestNamespace("m"), 2, kTokens, 32);
  const auto& rec = chain.records[0];
  auto session = client->AttachShm(4 << 20);
  ASSERT_TRUE(session.ok()) << session.status();
  std::byte* region = (*session)->region->data();
  ShmProgress progress(region);
  progress.Reset(kShmProgressBlockBytes);
  auto stub = Stub();
  auto put = StartRawPut(*stub, (*session)->region_id, rec.size());
  std::memcpy(region + kShmProgressBlockBytes, rec.data(), rec.size() / 2);
  progress.Publish(kShmProgressBlockBytes + rec.size() / 2);
  put->writer->WritesDone();
  grpc::Status st = put->writer->Finish();
  // The stall path, named with its timeout (no wall time is asserted: the daemon's clock
  // is its own).
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
  EXPECT_NE(st.error_message().find("no progress for 300ms"), std::string::npos)
      << st.error_message();
  EXPECT_NE(st.error_message().find("after " + std::to_string(rec.size() / 2)), std::string::npos)
      << st.error_message();
  EXPECT_EQ(client->Get(chain.keys[0]).status().code(), absl::StatusCode::kNotFound);
  // The only worker is free: a whole progressive Put goes through.
  ASSERT_TRUE(client->PutShmFrom(**session, 0, 4 << 20, chain.records[1]).ok());
  EXPECT_EQ(*client->Get(chain.keys[1]), chain.records[1]);
}

// Protocol violations by the writer: each refused with its reason, nothing stored.
TEST_F(DaemonShmProgressiveTest, BrokenProtocolIsRefusedAndStoresNothing) {
  StartDaemon("shm:\n  stall_timeout_ms: 5000\n");
  auto client = Connect(daemon_->target(), "", std::chrono::seconds(30));
  Chain chain = MakeChain(TestNamespace("m"), 1, kTokens, 33);
  const auto& rec = chain.records[0];
  auto session = client->AttachShm(4 << 20);
  ASSERT_TRUE(session.ok()) << session.status();
  std::byte* region = (*session)->region->data();
  std::memcpy(region + kShmProgressBlockBytes, rec.data(), rec.size());  // a valid record
  ShmProgress progress(region);
  auto stub = Stub();
  struct Case {
    const char* name;
    std::function<void()> act;     // after the request is sent
    std::function<void()> before;  // after Reset, before the request is sent
    uint64_t progress_offset;
    grpc::StatusCode code;
    const char* message;
  };
  const uint64_t end = kShmProgressBlockBytes + rec.size();
  const std::vector<Case> cases = {
      {"abandoned", [&] { progress.Abandon(); }, {}, 0, grpc::StatusCode::ABORTED, "abandoned"},
      {"beyond the record",
       [&] { progress.Publish(end + 4096); },
       {},
       0,
       grpc::StatusCode::INVALID_ARGUMENT,
       "beyond the transfer's end"},
      // 4 KiB are published before the request, so the daemon's first read sees them;
      // once it sleeps for more (the waiters word: it has read the 4 KiB), the progress
      // goes back. Waiting for that event, not for a time, is what makes the daemon see
      // the value before it goes back (a 200 ms sleep here raced on a loaded machine).
      {"went back",
       [&] {
         while (!progress.reader_waiting()) std::this_thread::yield();
         progress.Publish(kShmProgressBlockBytes);
       },
       [&] { progress.Publish(kShmProgressBlockBytes + 4096); }, 0,
       grpc::StatusCode::INVALID_ARGUMENT, "went back"},
      {"block inside the data", [] {}, {}, 128, grpc::StatusCode::INVALID_ARGUMENT, "overlaps"},
      {"block misaligned", [] {}, {}, 8, grpc::StatusCode::INVALID_ARGUMENT, "64-byte aligned"},
      {"block past the region",
       [] {},
       {},
       4 << 20,
       grpc::StatusCode::INVALID_ARGUMENT,
       "64-byte aligned"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    progress.Reset(kShmProgressBlockBytes);  // also clears the waiters word
    if (c.before) c.before();
    auto put = StartRawPut(*stub, (*session)->region_id, rec.size(), c.progress_offset);
    c.act();
    put->writer->WritesDone();
    grpc::Status st = put->writer->Finish();
    EXPECT_EQ(st.error_code(), c.code) << st.error_message();
    EXPECT_NE(st.error_message().find(c.message), std::string::npos) << st.error_message();
    EXPECT_EQ(client->Get(chain.keys[0]).status().code(), absl::StatusCode::kNotFound);
  }
  // The same bytes published properly are stored.
  progress.Reset(kShmProgressBlockBytes);
  auto put = StartRawPut(*stub, (*session)->region_id, rec.size());
  progress.Publish(end);
  put->writer->WritesDone();
  ASSERT_TRUE(put->writer->Finish().ok());
  EXPECT_EQ(*client->Get(chain.keys[0]), rec);
}

// RemoteTier with shm slots (what a connector uses): records go through shared memory,
// byte for byte and verified; one too big for a slot goes through gRPC; concurrent
// calls share the slots; after a daemon restart the stale region is noticed, that call
// is served over gRPC and the next one attaches a new region.
TEST_F(DaemonShmProgressiveTest, RemoteTierMovesRecordsThroughShmSlotsAndSurvivesARestart) {
  StartDaemon("durability: sync\n");
  RemoteTierOptions o;
  o.client.target = daemon_->target();
  o.client.deadline = std::chrono::seconds(30);
  o.shm_slots = 2;
  o.shm_slot_bytes = 2 << 20;
  auto tier = RemoteTier::Create(o);
  ASSERT_TRUE(tier.ok()) << tier.status();
  RemoteTier& t = **tier;
  Chain chain = MakeChain(TestNamespace("m"), 8, kTokens, 34);
  for (const auto& r : chain.records) ASSERT_TRUE(t.Put(r).ok());
  EXPECT_EQ(t.shm_puts(), chain.records.size());
  // Four threads, two slots: every Get returns its own record, through shm or gRPC.
  std::atomic<int> wrong{0};
  std::vector<std::thread> readers;
  for (int th = 0; th < 4; ++th)
    readers.emplace_back([&, th] {
      std::vector<std::byte> out(2 << 20);
      for (int round = 0; round < 3; ++round)
        for (size_t i = th % 2; i < chain.records.size(); i += 2) {
          auto n = t.Get(chain.keys[i], out);
          if (!n.ok() || *n != chain.records[i].size() ||
              !std::equal(chain.records[i].begin(), chain.records[i].end(), out.begin()))
            wrong.fetch_add(1);
        }
    });
  for (auto& r : readers) r.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GE(t.shm_gets(), chain.records.size());  // most of the 48 found a free slot
  std::printf("RemoteTier: %llu of 48 Gets through shm\n",
              static_cast<unsigned long long>(t.shm_gets()));

  // A record larger than a slot: gRPC, same result.
  Chain big = MakeChain(TestNamespace("m"), 1, 2100, 35);  // ~2.1 MiB > 2 MiB slot
  const uint64_t puts_before = t.shm_puts();
  ASSERT_TRUE(t.Put(big.records[0]).ok());
  EXPECT_EQ(t.shm_puts(), puts_before);
  std::vector<std::byte> out(4 << 20);
  ASSERT_EQ(*t.Get(big.keys[0], out), big.records[0].size());
  EXPECT_TRUE(std::equal(big.records[0].begin(), big.records[0].end(), out.begin()));

  // Restart: the region the tier holds is unknown to the new daemon process.
  ASSERT_EQ(daemon_->Kill(SIGTERM), 0) << daemon_->Log();
  std::string err;
  ASSERT_TRUE(daemon_->Start(&err)) << err;
  const uint64_t gets_before = t.shm_gets();
  auto n = t.Get(chain.keys[0], out);  // shm: "not attached" -> the same call over gRPC
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_TRUE(std::equal(chain.records[0].begin(), chain.records[0].end(), out.begin()));
  EXPECT_EQ(t.shm_gets(), gets_before);
  n = t.Get(chain.keys[1], out);  // a new region
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_TRUE(std::equal(chain.records[1].begin(), chain.records[1].end(), out.begin()));
  EXPECT_EQ(t.shm_gets(), gets_before + 1);
}

}  // namespace
}  // namespace kvt::testing
