// Test records shared by disk_tier_test.cc and kvt_disk_writer (disk_writer_main.cc).
#ifndef KVT_TESTS_KVSTORE_DISK_TEST_UTIL_H_
#define KVT_TESTS_KVSTORE_DISK_TEST_UTIL_H_

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kvstore/chunk_codec.h"
#include "kvstore/chunk_key.h"
#include "kvstore/types.h"
#include "test_records.h"

namespace kvt::testing {

// 2 layers x 2 KV heads x head_dim 64, bf16: 1,024 B per token.
inline KvLayout SmallLayout() {
  KvLayout l;
  l.num_layers = 2;
  l.num_kv_heads = 2;
  l.head_dim = 64;
  l.dtype = DType::kBF16;
  l.kind = LayoutKind::kFlashAttnNHD;
  return l;
}

// On-disk size of a MakeRecord() record of the default 256 tokens: 256 x 1 KiB payload +
// the 128-byte header, padded to the disk tier's 4 KiB blocks.
inline constexpr uint64_t kPaddedRecordBytes =
    ((256 * 1024 + kChunkHeaderBytes) + 4095) / 4096 * 4096;

inline NamespaceId TestNamespace(uint64_t n = 1) { return NamespaceId{0x1234 + n, 0xabcd00 + n}; }

inline ChunkKey TestKey(uint64_t seed, uint64_t ns = 1) {
  return ChunkKey{seed * 0x9E3779B97F4A7C15ull + ns, (seed + 1) * 0xC2B2AE3D27D4EB4Full ^ ns};
}

// A valid record whose bytes depend only on (seed, tokens, ns): the payload is a
// xorshift stream seeded by `seed`. Aborts if the codec refuses (a test bug).
inline std::vector<std::byte> MakeRecord(uint64_t seed, uint32_t tokens = 256, uint64_t ns = 1) {
  std::vector<std::byte> payload(SmallLayout().payload_bytes(tokens));
  uint64_t x = seed * 0x2545F4914F6CDD1Dull + 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < payload.size(); i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    for (size_t j = 0; j < 8 && i + j < payload.size(); ++j) {
      payload[i + j] = static_cast<std::byte>(x >> (8 * j));
    }
  }
  return TestRecord(TestNamespace(ns), SmallLayout(), TestKey(seed, ns),
                    seed == 0 ? RootKey(TestNamespace(ns)) : TestKey(seed - 1, ns), tokens,
                    payload);
}

// Starts the disk writer helper binary (`bin`, tests/kvstore/disk_writer_main.cc) on
// `dir` with the given capacity and file size, putting `puts` records, plus `extra`
// arguments. Its acknowledgement lines ("<index> <key hex>") arrive on *acks (fd 3 in the
// child). Returns the child's pid, or -1 (and *acks null) when it cannot be started.
inline pid_t StartDiskWriter(const char* bin, const std::string& dir, uint64_t capacity,
                             uint64_t file_bytes, uint64_t puts,
                             const std::vector<std::string>& extra, FILE** acks) {
  *acks = nullptr;
  int pipefd[2];
  if (::pipe(pipefd) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    // The write end becomes fd 3 (pipefd[0] may itself be 3, so move it out of the way first).
    const int w = ::fcntl(pipefd[1], F_DUPFD, 10);
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    ::dup2(w, 3);
    ::close(w);
    const std::string cap = std::to_string(capacity), fb = std::to_string(file_bytes),
                      n = std::to_string(puts);
    std::vector<const char*> argv{bin, dir.c_str(), cap.c_str(), fb.c_str(), n.c_str()};
    for (const std::string& a : extra) argv.push_back(a.c_str());
    argv.push_back(nullptr);
    ::execv(bin, const_cast<char* const*>(argv.data()));
    ::_exit(127);
  }
  ::close(pipefd[1]);
  *acks = ::fdopen(pipefd[0], "r");
  return pid;
}

}  // namespace kvt::testing

#endif  // KVT_TESTS_KVSTORE_DISK_TEST_UTIL_H_
