// Test helper: prints the chunk keys of a deterministic token sequence, one hex key per
// line, so a test can compare keys computed in two different processes.
// Usage: kvt_keys_tool <num_tokens> <chunk_tokens> <model_id>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kvstore/chunk_key.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s <num_tokens> <chunk_tokens> <model_id>\n", argv[0]);
    return 2;
  }
  const size_t n = std::strtoul(argv[1], nullptr, 10);
  kvt::NamespaceParams p;
  p.model_id = argv[3];
  p.layout = {32, 8, 128, kvt::DType::kBF16, kvt::LayoutKind::kFlashAttnNHD};
  p.chunk_tokens = static_cast<uint32_t>(std::strtoul(argv[2], nullptr, 10));
  std::vector<kvt::TokenId> tokens(n);
  for (size_t i = 0; i < n; ++i) tokens[i] = static_cast<kvt::TokenId>((i * 7919u + 13u) % 128256u);
  const kvt::NamespaceId ns = kvt::ComputeNamespace(p);
  std::printf("%s\n", ns.ToHex().c_str());
  for (const kvt::ChunkKey& k :
       kvt::ComputeChunkKeys(ns, tokens, {.chunk_tokens = p.chunk_tokens})) {
    std::printf("%s\n", k.ToHex().c_str());
  }
  return 0;
}
