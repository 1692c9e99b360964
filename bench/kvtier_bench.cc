// kvtier-bench: benchmarks that print kvtier's figures beside the physical limits
// measured in the same run. Usage: kvtier-bench <mode> [--json] [mode flags].
#include <cstdio>
#include <cstring>

#include "bench_mode.h"

int main(int argc, char** argv) {
  auto& modes = kvt::bench::Modes();
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fprintf(
        stderr,
        "usage: kvtier-bench <mode> [--json] [flags]   (<mode> --help for flags)\nmodes:\n");
    for (const auto& [name, mode] : modes)
      std::fprintf(stderr, "  %-10s %s\n", name.c_str(), mode.help.c_str());
    return argc < 2 ? 2 : 0;
  }
  auto it = modes.find(argv[1]);
  if (it == modes.end()) {
    std::fprintf(stderr, "kvtier-bench: unknown mode '%s' (try --help)\n", argv[1]);
    return 2;
  }
  return it->second.run(argc - 1, argv + 1);
}
