// What kvtierd's streaming sessions (PutSession, GetSession) use: the parts of the
// service they call. Every pointer outlives the sessions (the service owns or borrows
// them, and the server waits for every call to end before destroying it).
#ifndef KVT_DAEMON_STREAM_DEPS_H_
#define KVT_DAEMON_STREAM_DEPS_H_

#include "authenticator.h"
#include "call_gate.h"
#include "daemon/config.h"
#include "kvstore/tiered_store.h"
#include "leases.h"
#include "metrics.h"
#include "record_writer.h"
#include "shm_registry.h"
#include "tenancy.h"
#include "worker_pool.h"

namespace kvt::daemon {

struct StreamDeps {
  const DaemonConfig* config = nullptr;
  WorkerPool* pool = nullptr;  // every store operation runs here
  Metrics* metrics = nullptr;
  const Authenticator* auth = nullptr;
  CallGate* gate = nullptr;
  ShmRegistry* shm = nullptr;
  RecordWriter* writer = nullptr;  // Put
  TieredStore* store = nullptr;    // Get
  const Tenancy* tenancy = nullptr;
  LeaseTable* leases = nullptr;  // Get: the lease a GetRequest names
};

}  // namespace kvt::daemon

#endif  // KVT_DAEMON_STREAM_DEPS_H_
