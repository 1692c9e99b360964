// kvtier-llama-server: llama.cpp's llama-server with kvtier behind its prompt cache.
// Takes every llama-server flag plus the --kvtier-* flags (server_options.h); without
// them it is llama-server. docs/llama-server.md.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kvtier_server/server_kvtier.h"
#include "kvtier_server/server_options.h"

int llama_server(int argc, char** argv);  // tools/server/server.cpp

namespace {

bool HasFlag(const std::vector<std::string>& args, std::initializer_list<const char*> names) {
  for (size_t i = 1; i < args.size(); ++i) {
    for (const char* n : names) {
      const std::string& a = args[i];
      if (a == n || a.rfind(std::string(n) + "=", 0) == 0) return true;
    }
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  const bool help = HasFlag(args, {"-h", "--help", "--usage"});
  absl::StatusOr<kvt::llamacpp::ServerKvtierOptions> options =
      kvt::llamacpp::ExtractKvtierFlags(args);
  if (!options.ok()) {
    std::fprintf(stderr, "kvtier-llama-server: error: %s\n",
                 std::string(options.status().message()).c_str());
    return 2;
  }
  if (help) std::fputs(kvt::llamacpp::KvtierFlagsHelp().c_str(), stdout);
  std::unique_ptr<kvt::llamacpp::ServerKvtier> kvtier;
  if (options->enabled() && !help) {
    absl::StatusOr<std::unique_ptr<kvt::llamacpp::ServerKvtier>> k =
        kvt::llamacpp::ServerKvtier::Create(*options);
    if (!k.ok()) {
      std::fprintf(stderr, "kvtier-llama-server: error: %s\n",
                   std::string(k.status().message()).c_str());
      return 2;
    }
    kvtier = std::move(*k);
    // Prefill batches aligned to chunks (needed for exact reuse with flash attention).
    if (!HasFlag(args, {"-ub", "--ubatch-size"})) {
      args.push_back("-ub");
      args.push_back(std::to_string(options->chunk_tokens));
    }
    g_kvtier_server_hooks = kvtier.get();
  }
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  const int rc = llama_server(static_cast<int>(args.size()), cargs.data());
  if (kvtier) {
    kvtier->Flush();  // queued stores reach the tiers before exit
    g_kvtier_server_hooks = nullptr;
  }
  return rc;
}
