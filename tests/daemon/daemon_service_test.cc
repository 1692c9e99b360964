// kvtierd's service against a real daemon process: data path, Lookup/List/Evict/Stats,
// validation of malformed/oversized/truncated requests, shared memory, tenancy and auth,
// metrics.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <random>

#include "daemon_harness.h"
#include "proto/kvtier.grpc.pb.h"

namespace kvt::testing {
namespace {

namespace pb = ::kvtier::v1;

class DaemonServiceTest : public ::testing::Test {
 protected:
  void StartDaemon(const std::string& extra = "") {
    daemon_ = std::make_unique<Daemon>(dir_.path(), extra);
    std::string err;
    ASSERT_TRUE(daemon_->Start(&err)) << err;
  }
  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(DaemonServiceTest, PutThenGetReturnsSameBytesAndLookupCountsLeadingHits) {
  StartDaemon();
  auto client = Connect(daemon_->target());
  ASSERT_NE(client, nullptr);
  Chain chain = MakeChain(TestNamespace("m"), 4, 16, 1);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(client->Put(chain.records[i]).ok());
  for (int i = 0; i < 3; ++i) {
    auto got = client->Get(chain.keys[i]);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, chain.records[i]);
  }
  auto miss = client->Get(chain.keys[3]);
  EXPECT_EQ(miss.status().code(), absl::StatusCode::kNotFound);
  // `kvtier stats` counts what clients read: 3 hits, and the miss of a key the daemon
  // never had (answered before the tiers, so the store itself counts nothing for it).
  auto counted = client->Stats();
  ASSERT_TRUE(counted.ok()) << counted.status();
  EXPECT_EQ(counted->hits, 3u);
  EXPECT_EQ(counted->misses, 1u);

  auto lookup = client->Lookup(chain.keys);
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  EXPECT_EQ(lookup->num_leading_hits, 3u);
  ASSERT_EQ(lookup->tier.size(), 3u);
  EXPECT_EQ(lookup->tier[0], TierKind::kHost);

  auto per_key = client->Lookup(chain.keys, /*per_key=*/true);
  ASSERT_TRUE(per_key.ok());
  ASSERT_EQ(per_key->record_bytes.size(), 4u);
  EXPECT_EQ(per_key->record_bytes[0], chain.records[0].size());
  EXPECT_EQ(per_key->record_bytes[3], 0u);
  EXPECT_FALSE(per_key->tier[3].has_value());

  std::vector<std::byte> small(100);
  EXPECT_EQ(client->Get(chain.keys[0], small).status().code(), absl::StatusCode::kOutOfRange);
}

TEST_F(DaemonServiceTest, MultiPartRecordsAndMultiRecordStreams) {
  StartDaemon();
  RemoteClientOptions o;
  o.target = daemon_->target();
  o.put_part_bytes = 4096;
  o.get_part_bytes = 4096;
  auto client = *RemoteClient::Create(o);
  Chain chain = MakeChain(TestNamespace("m"), 3, 40, 2);  // 40 KiB payloads → 11 parts
  std::vector<std::span<const std::byte>> recs(chain.records.begin(), chain.records.end());
  ASSERT_TRUE(client->Put(recs).ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(*client->Get(chain.keys[i]), chain.records[i]);
}

// kvtierd writes Get responses as raw bytes (data field last, pointing into its record
// buffer); any GetResponse parser must read them as ordinary messages.
TEST_F(DaemonServiceTest, GetStreamReadsWithGeneratedStubAcrossParts) {
  StartDaemon();
  auto client = Connect(daemon_->target());
  ASSERT_NE(client, nullptr);
  Chain chain = MakeChain(TestNamespace("m"), 2, 40, 3);  // 40 KiB payloads
  ASSERT_TRUE(client->Put(chain.records[0]).ok());
  auto stub = pb::KvTier::NewStub(
      grpc::CreateChannel(daemon_->target(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  pb::GetRequest req;
  req.set_protocol_version(1);
  for (int i : {0, 1}) {
    req.add_keys()->set_lo(chain.keys[i].lo);
    req.mutable_keys(i)->set_hi(chain.keys[i].hi);
  }
  req.set_max_part_bytes(16384);
  auto reader = stub->Get(&ctx, req);
  std::vector<pb::GetResponse> msgs;
  pb::GetResponse resp;
  while (reader->Read(&resp)) msgs.push_back(resp);
  ASSERT_TRUE(reader->Finish().ok());
  const size_t rec = chain.records[0].size();
  const size_t parts = (rec + 16383) / 16384;
  ASSERT_EQ(msgs.size(), parts + 1);  // record 0 in parts, then the miss of key 1
  EXPECT_TRUE(msgs[0].header());
  EXPECT_TRUE(msgs[0].found());
  EXPECT_EQ(msgs[0].index(), 0u);
  EXPECT_EQ(msgs[0].record_bytes(), rec);
  EXPECT_EQ(msgs[0].tier(), pb::TIER_HOST);
  std::string bytes;
  for (size_t i = 0; i < parts; ++i) {
    EXPECT_EQ(msgs[i].header(), i == 0);
    EXPECT_EQ(msgs[i].data().size(), std::min<size_t>(16384, rec - bytes.size()));
    bytes += msgs[i].data();
  }
  EXPECT_EQ(bytes, std::string(reinterpret_cast<const char*>(chain.records[0].data()), rec));
  EXPECT_TRUE(msgs.back().header());
  EXPECT_FALSE(msgs.back().found());
  EXPECT_EQ(msgs.back().index(), 1u);
  EXPECT_EQ(msgs.back().tier(), pb::TIER_NONE);
  EXPECT_TRUE(msgs.back().data().empty());
}

// The raw Get handler parses the request itself: bytes that are no GetRequest are
// INVALID_ARGUMENT, and the daemon keeps serving.
TEST_F(DaemonServiceTest, GetWithUnparsableRequestBytesIsInvalidArgument) {
  StartDaemon();
  auto channel = grpc::CreateChannel(daemon_->target(), grpc::InsecureChannelCredentials());
  grpc::ClientContext ctx;
  const std::string garbage = "\x0a\xff\xff\xff\xff\x0f";  // field 1 with a bad length
  grpc::Slice slice(garbage);
  grpc::ByteBuffer raw(&slice, 1);
  const grpc::internal::RpcMethod method("/kvtier.v1.KvTier/Get",
                                         grpc::internal::RpcMethod::SERVER_STREAMING, channel);
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(channel.get(), method, &ctx,
                                                                    raw));
  grpc::ByteBuffer out;
  EXPECT_FALSE(reader->Read(&out));
  grpc::Status st = reader->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("GetRequest"), std::string::npos) << st.error_message();
  auto client = Connect(daemon_->target());
  ASSERT_NE(client, nullptr);
  Chain chain = MakeChain(TestNamespace("m"), 1, 4, 4);
  ASSERT_TRUE(client->Put(chain.records[0]).ok());
  EXPECT_EQ(*client->Get(chain.keys[0]), chain.records[0]);
}

TEST_F(DaemonServiceTest, ListEvictByKeysPrefixNamespaceAndAge) {
  StartDaemon();
  auto client = Connect(daemon_->target());
  NamespaceId ns = TestNamespace("m");
  Chain chain = MakeChain(ns, 6, 16, 3);
  Chain other = MakeChain(TestNamespace("other"), 2, 16, 4);
  for (auto& r : chain.records) ASSERT_TRUE(client->Put(r).ok());
  for (auto& r : other.records) ASSERT_TRUE(client->Put(r).ok());

  // Paginated list of one namespace: 6 chunks, pages of 4.
  auto p1 = client->List(ns, "", 4);
  ASSERT_TRUE(p1.ok()) << p1.status();
  EXPECT_EQ(p1->chunks.size(), 4u);
  ASSERT_FALSE(p1->next_page_token.empty());
  auto p2 = client->List(ns, p1->next_page_token, 4);
  ASSERT_TRUE(p2.ok());
  EXPECT_EQ(p2->chunks.size(), 2u);
  EXPECT_TRUE(p2->next_page_token.empty());
  for (const auto& c : p1->chunks) {
    EXPECT_EQ(c.info.ns, ns);
    EXPECT_EQ(c.info.token_count, 16u);
    EXPECT_EQ(c.info.record_bytes, chain.records[0].size());
  }
  auto all = client->List(std::nullopt, "", 100);
  EXPECT_EQ(all->chunks.size(), 8u);

  // Evict by prefix: chunk 3 and its descendants 4, 5.
  EvictSelector prefix;
  prefix.prefix = chain.keys[3];
  auto dry = client->Evict(prefix, /*dry_run=*/true);
  ASSERT_TRUE(dry.ok()) << dry.status();
  EXPECT_EQ(dry->chunks, 3u);
  auto ev = client->Evict(prefix);
  ASSERT_TRUE(ev.ok());
  EXPECT_EQ(ev->chunks, 3u);
  EXPECT_EQ(ev->bytes, 3 * chain.records[0].size());
  EXPECT_EQ(client->Lookup(chain.keys)->num_leading_hits, 3u);

  EvictSelector keys;
  keys.keys = {chain.keys[2]};
  EXPECT_EQ(client->Evict(keys)->chunks, 1u);
  EXPECT_EQ(client->Lookup(chain.keys)->num_leading_hits, 2u);

  EvictSelector age;
  age.older_than = std::chrono::hours(1);
  EXPECT_EQ(client->Evict(age)->chunks, 0u);

  EvictSelector by_ns;
  by_ns.ns = ns;
  EXPECT_EQ(client->Evict(by_ns)->chunks, 2u);
  EXPECT_EQ(client->List(std::nullopt, "", 100)->chunks.size(), 2u);  // the other namespace

  auto stats = client->Stats();
  ASSERT_TRUE(stats.ok());
  ASSERT_EQ(stats->tiers.size(), 2u);
  EXPECT_EQ(stats->tiers[0].kind, TierKind::kHost);
  EXPECT_EQ(stats->tiers[1].kind, TierKind::kDisk);
  EXPECT_EQ(stats->tiers[0].stats.capacity_bytes, 64u << 20);
  auto health = client->Health();
  ASSERT_TRUE(health.ok());
  EXPECT_TRUE(health->serving) << health->detail;
}

TEST_F(DaemonServiceTest, InvalidRequestsNameTheField) {
  StartDaemon();
  auto channel = grpc::CreateChannel(daemon_->target(), grpc::InsecureChannelCredentials());
  auto stub = pb::KvTier::NewStub(channel);
  {
    grpc::ClientContext ctx;
    pb::LookupRequest req;
    pb::LookupResponse resp;
    req.set_protocol_version(1);
    auto s = stub->Lookup(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("keys"), std::string::npos) << s.error_message();
  }
  {
    grpc::ClientContext ctx;
    pb::LookupRequest req;
    pb::LookupResponse resp;
    req.add_keys()->set_lo(1);
    auto s = stub->Lookup(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("protocol_version"), std::string::npos) << s.error_message();
  }
  {
    grpc::ClientContext ctx;
    pb::ListRequest req;
    pb::ListResponse resp;
    req.set_protocol_version(1);
    req.set_page_size(20000);
    auto s = stub->List(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("page_size"), std::string::npos);
  }
  {  // truncated record: the stream ends inside it
    grpc::ClientContext ctx;
    pb::PutResponse resp;
    auto w = stub->Put(&ctx, &resp);
    pb::PutRequest req;
    req.set_protocol_version(1);
    req.set_record_bytes(100000);
    req.set_data(std::string(1000, 'x'));
    w->Write(req);
    w->WritesDone();
    auto s = w->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("stream ended inside a record"), std::string::npos)
        << s.error_message();
  }
  {  // oversized record
    grpc::ClientContext ctx;
    pb::PutResponse resp;
    auto w = stub->Put(&ctx, &resp);
    pb::PutRequest req;
    req.set_protocol_version(1);
    req.set_record_bytes(1ull << 40);
    w->Write(req);
    w->WritesDone();
    auto s = w->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("record_bytes"), std::string::npos);
  }
  {  // a message over the gRPC limit is refused by the transport
    grpc::ClientContext ctx;
    pb::PutResponse resp;
    auto w = stub->Put(&ctx, &resp);
    pb::PutRequest req;
    req.set_protocol_version(1);
    req.set_record_bytes(16 << 20);
    req.set_data(std::string(16 << 20, 'x'));
    w->Write(req);
    w->WritesDone();
    auto s = w->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  }
  {  // a corrupted record (payload checksum) is refused, nothing stored
    Chain chain = MakeChain(TestNamespace("m"), 1, 16, 5);
    chain.records[0][500] ^= std::byte{1};
    auto client = Connect(daemon_->target());
    auto s = client->Put(chain.records[0]);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_EQ(client->Get(chain.keys[0]).status().code(), absl::StatusCode::kNotFound);
  }
  auto client = Connect(daemon_->target());
  EXPECT_TRUE(client->Health()->serving);
}

// A few thousand randomized malformed messages: every one gets an error, and the
// daemon keeps serving valid requests.
TEST_F(DaemonServiceTest, RandomizedMalformedRequestsGetErrorsAndDaemonStaysUp) {
  StartDaemon();
  auto channel = grpc::CreateChannel(daemon_->target(), grpc::InsecureChannelCredentials());
  auto stub = pb::KvTier::NewStub(channel);
  std::mt19937_64 rng(42);
  Chain good = MakeChain(TestNamespace("m"), 1, 16, 6);
  int errors = 0, total = 0;
  auto random_bytes = [&](size_t n) {
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    return s;
  };
  for (int i = 0; i < 2000; ++i) {
    const int kind = static_cast<int>(rng() % 6);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::Status s;
    if (kind ==
        0) {  // Put: garbage record of random announced size, sometimes truncated or overlong
      pb::PutResponse resp;
      auto w = stub->Put(&ctx, &resp);
      pb::PutRequest req;
      req.set_protocol_version(rng() % 4 == 0 ? static_cast<uint32_t>(rng() % 3) : 1);
      const uint64_t announced = rng() % 3 == 0 ? rng() : 128 + rng() % 20000;
      req.set_record_bytes(announced);
      std::string data = rng() % 2
                             ? random_bytes(rng() % 30000)
                             : std::string(reinterpret_cast<const char*>(good.records[0].data()),
                                           rng() % good.records[0].size());
      req.set_data(data);
      w->Write(req);
      if (rng() % 3 == 0) {  // a stray second record start
        req.set_record_bytes(1 + rng() % 100);
        w->Write(req);
      }
      w->WritesDone();
      s = w->Finish();
    } else if (kind == 1) {  // Put: data without a record start, or shm slices that do not exist
      pb::PutResponse resp;
      auto w = stub->Put(&ctx, &resp);
      pb::PutRequest req;
      req.set_protocol_version(1);
      if (rng() % 2) {
        req.set_data(random_bytes(1 + rng() % 1000));
      } else {
        req.set_record_bytes(128 + rng() % 1000);
        req.mutable_shm()->set_region_id(rng());
        req.mutable_shm()->set_offset(rng());
        req.mutable_shm()->set_length(rng());
      }
      w->Write(req);
      w->WritesDone();
      s = w->Finish();
    } else if (kind == 2) {  // Get: zero keys, too many keys, zero key, bad part size, bad shm
      pb::GetRequest req;
      req.set_protocol_version(1);
      const int sub = static_cast<int>(rng() % 4);
      if (sub == 1)
        for (int k = 0; k < 4097; ++k) req.add_keys()->set_lo(k + 1);
      if (sub == 2) req.add_keys();
      if (sub == 3) {
        req.add_keys()->set_lo(rng() | 1);
        if (rng() % 2)
          req.set_max_part_bytes(static_cast<uint32_t>(1 + rng() % 4000));
        else
          req.mutable_shm()->set_region_id(rng());
      }
      auto r = stub->Get(&ctx, req);
      pb::GetResponse resp;
      while (r->Read(&resp)) {
      }
      s = r->Finish();
    } else if (kind == 3) {  // Lookup with bad version or key lists
      pb::LookupRequest req;
      req.set_protocol_version(rng() % 2 ? 0 : 7);
      for (int k = 0; k < static_cast<int>(rng() % 5); ++k) req.add_keys()->set_lo(rng());
      pb::LookupResponse resp;
      s = stub->Lookup(&ctx, req, &resp);
    } else if (kind == 4) {  // Evict without selector / zero prefix / zero age
      pb::EvictRequest req;
      req.set_protocol_version(1);
      const int sub = static_cast<int>(rng() % 3);
      if (sub == 1) req.mutable_prefix();
      if (sub == 2) req.set_older_than_ms(0);
      pb::EvictResponse resp;
      s = stub->Evict(&ctx, req, &resp);
    } else {  // List with bad token / page size, ShmAttach with bad size
      if (rng() % 2) {
        pb::ListRequest req;
        req.set_protocol_version(1);
        std::string tok = random_bytes(1 + rng() % 40);
        for (auto& c : tok)
          c = static_cast<char>('!' + (static_cast<unsigned char>(c) %
                                       90));  // printable (proto3 strings must be UTF-8)
        req.set_page_token(tok);
        pb::ListResponse resp;
        s = stub->List(&ctx, req, &resp);
      } else {
        pb::ShmAttachRequest req;
        req.set_protocol_version(1);
        req.set_bytes(rng() % 2 ? rng() % (1 << 20) : (64ull << 30) + rng() % 1000);
        pb::ShmAttachResponse resp;
        s = stub->ShmAttach(&ctx, req, &resp);
      }
    }
    ++total;
    if (!s.ok())
      ++errors;
    else
      ADD_FAILURE() << "malformed request of kind " << kind << " was accepted";
  }
  EXPECT_EQ(errors, total);
  auto client = Connect(daemon_->target());
  ASSERT_TRUE(client->Put(good.records[0]).ok());
  EXPECT_EQ(*client->Get(good.keys[0]), good.records[0]);
  EXPECT_TRUE(client->Health()->serving);
}

TEST_F(DaemonServiceTest, SharedMemoryPutAndGetMoveTheSameBytes) {
  StartDaemon();
  auto client = Connect(daemon_->target());
  auto session = client->AttachShm(4 << 20);
  ASSERT_TRUE(session.ok()) << session.status();
  Chain chain = MakeChain(TestNamespace("m"), 2, 64, 7);
  std::byte* region = (*session)->region->data();
  std::memcpy(region, chain.records[0].data(), chain.records[0].size());
  ASSERT_TRUE(client->PutShm(**session, 0, chain.records[0].size()).ok());
  ASSERT_TRUE(client->Put(chain.records[1]).ok());
  std::memset(region, 0, 1 << 20);
  auto n = client->GetShm(**session, chain.keys[1], 1 << 20, 2 << 20);
  ASSERT_TRUE(n.ok()) << n.status();
  ASSERT_EQ(*n, chain.records[1].size());
  EXPECT_EQ(std::memcmp(region + (1 << 20), chain.records[1].data(), *n), 0);
  EXPECT_EQ(*client->Get(chain.keys[0]), chain.records[0]);
  // Too small a slice → OutOfRange; a region outside the mapping → InvalidArgument.
  EXPECT_EQ(client->GetShm(**session, chain.keys[1], 0, 1000).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(client->PutShm(**session, 4 << 20, 1000).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(client->DetachShm(**session).ok());
  EXPECT_EQ(client->PutShm(**session, 0, chain.records[0].size()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(DaemonServiceTest, TenantsCannotReadProbeOrEvictEachOther) {
  StartDaemon(
      "tenants:\n  - name: alice\n    tokens: [alice-token-1]\n  - name: bob\n    tokens: "
      "[bob-token-12]\n");
  auto anon = Connect(daemon_->target());
  EXPECT_EQ(anon->Health().status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Connect(daemon_->target(), "wrong-token")->Stats().status().code(),
            absl::StatusCode::kUnauthenticated);

  auto alice = Connect(daemon_->target(), "alice-token-1");
  auto bob = Connect(daemon_->target(), "bob-token-12");
  NamespaceId ns_a = TestNamespace("m", "alice");
  Chain chain = MakeChain(ns_a, 3, 16, 8);
  for (auto& r : chain.records) ASSERT_TRUE(alice->Put(r).ok());
  EXPECT_EQ(alice->Stats()->tenant, "alice");

  EXPECT_EQ(bob->Lookup(chain.keys)->num_leading_hits, 0u);
  auto per_key = bob->Lookup(chain.keys, true);
  for (auto t : per_key->tier) EXPECT_FALSE(t.has_value());
  EXPECT_EQ(bob->Get(chain.keys[0]).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(bob->List(std::nullopt, "", 100)->chunks.empty());
  EXPECT_TRUE(bob->List(ns_a, "", 100)->chunks.empty());
  EvictSelector sel;
  sel.keys = chain.keys;
  EXPECT_EQ(bob->Evict(sel)->chunks, 0u);
  EvictSelector pre;
  pre.prefix = chain.keys[0];
  EXPECT_EQ(bob->Evict(pre)->chunks, 0u);
  EvictSelector by_ns;
  by_ns.ns = ns_a;
  EXPECT_EQ(bob->Evict(by_ns)->chunks, 0u);
  EvictSelector all;
  all.all = true;
  EXPECT_EQ(bob->Evict(all)->chunks, 0u);
  // Bob cannot write into Alice's namespace.
  EXPECT_EQ(bob->Put(chain.records[0]).code(), absl::StatusCode::kPermissionDenied);
  // Bob's shm slices cannot name Alice's region.
  auto region = alice->AttachShm(1 << 20);
  ASSERT_TRUE(region.ok());
  ShmSession fake;
  fake.region_id = (*region)->region_id;
  EXPECT_EQ(bob->GetShm(fake, chain.keys[0], 0, 1 << 20).status().code(),
            absl::StatusCode::kInvalidArgument);

  // Alice still has everything.
  EXPECT_EQ(alice->Lookup(chain.keys)->num_leading_hits, 3u);
  EXPECT_EQ(*alice->Get(chain.keys[2]), chain.records[2]);
  EXPECT_EQ(alice->List(std::nullopt, "", 100)->chunks.size(), 3u);
}

TEST_F(DaemonServiceTest, MetricsAndHealthOverHttp) {
  StartDaemon();
  auto client = Connect(daemon_->target());
  Chain chain = MakeChain(TestNamespace("m"), 1, 16, 9);
  ASSERT_TRUE(client->Put(chain.records[0]).ok());
  ASSERT_TRUE(client->Get(chain.keys[0]).ok());
  ASSERT_GT(daemon_->metrics_port(), 0);
  httplib::Client http("127.0.0.1", daemon_->metrics_port());
  auto res = http.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  for (const char* name :
       {"kvtier_tier_hits_total{tier=\"host\"}", "kvtier_tier_misses_total{tier=\"disk\"}",
        "kvtier_bytes_in_total", "kvtier_bytes_out_total", "kvtier_tier_evictions_total",
        "kvtier_integrity_errors_total", "kvtier_pinned_bytes", "kvtier_connected_clients 1",
        "kvtier_rpc_latency_seconds_bucket{method=\"Get\"",
        "kvtier_rpc_total{method=\"Put\",code=\"OK\"} 1", "kvtier_healthy 1",
        // every supervised thread, by name
        "kvtier_thread_up{name=\"write-back\"} 1", "kvtier_thread_up{name=\"worker-0\"} 1",
        "kvtier_thread_up{name=\"lookup-1\"} 1", "kvtier_thread_up{name=\"metrics-http\"} 1",
        "kvtier_thread_failed{name=\"write-back\"} 0",
        "kvtier_thread_restarts_total{name=\"worker-0\"} 0"}) {
    EXPECT_NE(res->body.find(name), std::string::npos) << name;
  }
  auto health = http.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body.rfind("ok\n", 0), 0u) << health->body;
  for (const char* line : {"\nthread write-back running restarts=0 heartbeats=",
                           "\nthread worker-0 running", "\nthread metrics-http running"}) {
    EXPECT_NE(health->body.find(line), std::string::npos) << line << " in " << health->body;
  }
}

}  // namespace
}  // namespace kvt::testing
