// kvtierd answers Lookups on their own threads: a Lookup does not queue behind store
// workers that wait on a slow client (a progressive shm Put holds its worker until the
// client publishes the next piece or shm.stall_timeout_ms passes). Found with
// `kvtier-bench load` (docs/performance.md "kvtierd under many clients"): with 16 shm
// clients and 4 workers, Lookup p50 went from 0.5 ms to 39 ms.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "daemon_harness.h"
#include "kvstore/shm_progress.h"
#include "proto/kvtier.grpc.pb.h"

namespace kvt::testing {
namespace {

namespace pb = ::kvtier::v1;

TEST(DaemonLookupPoolTest, LookupAnswersWhileEveryWorkerWaitsOnAStalledShmPut) {
  TempDir dir;
  // One store worker; a stalled progressive Put holds it for 5 s.
  Daemon daemon(dir.path(), "shm:\n  stall_timeout_ms: 5000\nworkers: 1\n");
  std::string err;
  ASSERT_TRUE(daemon.Start(&err)) << err;
  auto client = Connect(daemon.target(), "", std::chrono::seconds(30));
  ASSERT_NE(client, nullptr);
  Chain chain = MakeChain(TestNamespace("m"), 2, 1000, 41);
  ASSERT_TRUE(client->Put(chain.records[0]).ok());
  auto session = client->AttachShm(4 << 20);
  ASSERT_TRUE(session.ok()) << session.status();
  ShmProgress progress((*session)->region->data());
  progress.Reset(kShmProgressBlockBytes);

  // A progressive Put of record 1 whose writer never publishes a byte.
  auto stub =
      pb::KvTier::NewStub(grpc::CreateChannel(daemon.target(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  pb::PutResponse resp;
  auto writer = stub->Put(&ctx, &resp);
  pb::PutRequest req;
  req.set_protocol_version(kKvtierProtocolVersion);
  req.set_record_bytes(chain.records[1].size());
  auto* sl = req.mutable_shm();
  sl->set_region_id((*session)->region_id);
  sl->set_offset(kShmProgressBlockBytes);
  sl->set_length(chain.records[1].size());
  sl->set_progressive(true);
  sl->set_progress_offset(0);
  ASSERT_TRUE(writer->Write(req));
  // The worker has taken it once it sleeps waiting for the first byte (the progress
  // block's waiters word): wait for that event, not for a time.
  while (!progress.reader_waiting()) std::this_thread::yield();

  // A Lookup with a 2 s deadline, well inside the 5 s the worker stays held: it answers
  // (on the store worker it would wait out its deadline: DeadlineExceeded).
  auto quick = Connect(daemon.target(), "", std::chrono::seconds(2));
  ASSERT_NE(quick, nullptr);
  auto lookup = quick->Lookup(chain.keys);
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  EXPECT_EQ(lookup->num_leading_hits, 1u);

  writer->WritesDone();
  grpc::Status st = writer->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << st.error_message();
  EXPECT_EQ(client->Get(chain.keys[1]).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvt::testing
