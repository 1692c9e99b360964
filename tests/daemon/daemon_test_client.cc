// Helper process for the two-process test:
//   daemon_test_client put <target> <seed> <n>   stores a chain of n records from seed
//   daemon_test_client get <target> <seed> <n>   loads them; exit 0 iff every record is
//                                                 present and byte-identical
#include <cstdio>
#include <cstdlib>
#include <string>

#include "daemon_harness.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s put|get <target> <seed> <n>\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  auto client = kvt::testing::Connect(argv[2]);
  if (client == nullptr) return 3;
  const uint64_t seed = std::strtoull(argv[3], nullptr, 10);
  const int n = std::atoi(argv[4]);
  kvt::testing::Chain chain =
      kvt::testing::MakeChain(kvt::testing::TestNamespace("two-process"), n, 32, seed);
  for (int i = 0; i < n; ++i) {
    if (mode == "put") {
      if (auto s = client->Put(chain.records[i]); !s.ok()) {
        std::fprintf(stderr, "put %d: %s\n", i, s.ToString().c_str());
        return 1;
      }
    } else {
      auto got = client->Get(chain.keys[i]);
      if (!got.ok() || *got != chain.records[i]) {
        std::fprintf(stderr, "get %d: %s\n", i,
                     got.ok() ? "bytes differ" : got.status().ToString().c_str());
        return 1;
      }
    }
  }
  std::printf("%s %d ok\n", mode.c_str(), n);
  return 0;
}
