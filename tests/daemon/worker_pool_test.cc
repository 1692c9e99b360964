// kvtierd's WorkerPool: a task that throws is counted, its RPC is answered INTERNAL at
// once (not left to the client's deadline), and the pool goes on. The second test runs
// the real service in-process over a tier that throws, with a real gRPC client.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>

#include "absl/synchronization/notification.h"
#include "daemon_harness.h"
#include "service.h"

namespace kvt::testing {
namespace {

using daemon::Catalog;
using daemon::DaemonConfig;
using daemon::KvTierService;
using daemon::Metrics;
using daemon::ServiceDeps;
using daemon::WorkerPool;

TEST(WorkerPoolTest, ThrowingTaskReportsInternalAndThePoolGoesOn) {
  absl::Status reported;
  absl::Notification thrown, after;
  {
    WorkerPool pool(1);
    pool.Submit([] { throw std::runtime_error("boom in a store call"); },
                [&](const absl::Status& s) {
                  reported = s;
                  thrown.Notify();
                });
    pool.Submit([&] { after.Notify(); });
    thrown.WaitForNotification();
    after.WaitForNotification();
    EXPECT_EQ(pool.task_failures(), 1u);
    EXPECT_EQ(pool.alive(), 1u);
  }
  EXPECT_EQ(reported.code(), absl::StatusCode::kInternal);
  EXPECT_NE(reported.message().find("boom in a store call"), std::string::npos) << reported;
}

// A tier whose presence check throws (a bug below the store, say): every method that a
// Lookup reaches throws; nothing else is called.
class ThrowingTier final : public Tier {
 public:
  TierCaps caps() const override { return TierCaps{.name = "throwing", .pinnable = true}; }
  using Tier::Put;
  absl::StatusOr<PutResult> Put(std::span<const std::byte>, const PutContext&) override {
    return PutResult{};
  }
  absl::StatusOr<uint64_t> Get(const ChunkKey&, std::span<std::byte>) override {
    return absl::NotFoundError("none");
  }
  std::vector<ChunkStat> Stat(std::span<const ChunkKey>) override {
    throw std::runtime_error("tier exploded in Stat");
  }
  absl::Status Erase(const ChunkKey&) override { return absl::OkStatus(); }
  absl::StatusOr<ListPage> List(const ListOptions&) override { return ListPage{}; }
  TierStats stats() const override { return {}; }
  PinHandle Pin(const ChunkKey&) override { return PinHandle(); }
};

TEST(WorkerPoolTest, RpcWhoseTaskThrowsIsAnsweredInternalBeforeItsDeadline) {
  TempDir dir;
  std::vector<TierFactory> tiers;
  tiers.push_back(UseTier(std::make_unique<ThrowingTier>()));
  auto store = TieredStore::Create(std::move(tiers), TieredStoreOptions{});
  ASSERT_TRUE(store.ok()) << store.status();
  auto catalog = Catalog::Open(dir.path() + "/namespaces.log");
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  DaemonConfig config;
  Metrics metrics;
  WorkerPool pool(1);
  ServiceDeps deps{.config = &config,
                   .store = store->get(),
                   .catalog = catalog->get(),
                   .metrics = &metrics,
                   .pool = &pool};
  KvTierService service(deps);
  const std::string target = "unix://" + dir.path() + "/kvtierd.sock";
  grpc::ServerBuilder builder;
  builder.AddListeningPort(target, grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);

  RemoteClientOptions o;
  o.target = target;
  o.deadline = std::chrono::seconds(120);  // far beyond the test's own timeout
  auto client = *RemoteClient::Create(o);
  Chain chain = MakeChain(TestNamespace("m"), 2, 16, 1);
  // Every Lookup asks the store (tenancy is answered there), whose tier throws.
  auto r = client->Lookup(chain.keys, /*per_key=*/false, /*pin=*/true);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal) << r.status();
  EXPECT_NE(r.status().message().find("tier exploded in Stat"), std::string::npos) << r.status();
  EXPECT_EQ(pool.task_failures(), 1u);
  EXPECT_EQ(pool.alive(), 1u);
  server->Shutdown();
  pool.Stop();
}

}  // namespace
}  // namespace kvt::testing
