// Pieces every command shares: opening the backend, loading a prompt, failing.
#include <algorithm>
#include <filesystem>
#include <ostream>

#include "absl/strings/str_cat.h"
#include "commands.h"
#include "disk_backend.h"
#include "kvstore/daemon_address.h"
#include "prompt_file.h"
#ifdef KVT_CLI_HAVE_DAEMON
#include "daemon_backend.h"
#endif

namespace kvt::cli {

int Fail(std::ostream& err, std::string_view command, const absl::Status& status) {
  err << "kvtier " << command << ": " << status.message() << "\n";
  return ExitCodeFor(status);
}

absl::StatusOr<std::unique_ptr<CacheBackend>> OpenBackend(const GlobalFlags& flags) {
  if (!flags.daemon.empty() && !flags.disk_dir.empty()) {
    if (flags.daemon_source == "--daemon")
      return absl::InvalidArgumentError("give either --daemon or --disk-dir, not both");
    return absl::InvalidArgumentError(absl::StrCat(
        flags.daemon_source, " is set (", flags.daemon,
        ") and --disk-dir is given: give one, not both (unset ", flags.daemon_source,
        " to open --disk-dir, e.g. '", flags.daemon_source, "= kvtier --disk-dir ...')"));
  }
  if (!flags.disk_dir.empty()) {
    DiskBackendOptions o;
    o.dir = flags.disk_dir;
    if (!flags.disk_capacity.empty()) {
      auto c = ParseByteSize(flags.disk_capacity);
      if (!c.ok())
        return absl::InvalidArgumentError(absl::StrCat("--disk-capacity: ", c.status().message()));
      o.capacity_bytes = *c;
    }
    return OpenDiskBackend(o);
  }
  std::string address = flags.daemon;
  if (address.empty()) {
    // kvtierd's own default listen address (kvstore/daemon_address.h): a kvtierd started
    // without --listen by the same user is found without flags.
    const std::string fallback = DefaultDaemonAddress();
    absl::StatusOr<DaemonAddress> a = ParseDaemonAddress(fallback);
    std::error_code ec;
    if (!a.ok() || !std::filesystem::exists(a->unix_path, ec)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "no cache to talk to: no kvtierd socket at the default address ", fallback,
          " (kvtierd's default listen address); give --daemon unix:/path/to/kvtierd.sock (or "
          "host:port, or set KVTIER_DAEMON), or --disk-dir DIR to open a disk tier offline"));
    }
    address = fallback;
  }
#ifdef KVT_CLI_HAVE_DAEMON
  DaemonBackendOptions o;
  o.address = address;
  o.address_source = flags.daemon.empty() ? "the default address" : flags.daemon_source;
  o.token = flags.token;
  if (!(flags.timeout_s > 0 && flags.timeout_s <= 600)) {  // also refuses NaN
    return absl::InvalidArgumentError(
        absl::StrCat("--timeout ", flags.timeout_s, ": expected seconds in (0, 600]"));
  }
  o.timeout_ms = std::max<int64_t>(1, static_cast<int64_t>(flags.timeout_s * 1000));
  return OpenDaemonBackend(o);
#else
  return absl::UnimplementedError(
      "this kvtier was built without gRPC support (KVT_BUILD_DAEMON=OFF); use --disk-dir");
#endif
}

absl::StatusOr<std::vector<TokenId>> LoadPrompt(const PromptFlags& flags) {
  if (!flags.tokens_file.empty() && !flags.text_file.empty()) {
    return absl::InvalidArgumentError("give either a token file or a text file, not both");
  }
  if (!flags.tokens_file.empty()) return ReadTokenFile(flags.tokens_file);
  if (!flags.text_file.empty()) {
    if (flags.tokenizer_gguf.empty()) {
      return absl::InvalidArgumentError(
          "a text prompt needs --tokenizer MODEL.gguf (the engine's model, whose vocabulary "
          "tokenizes it), or give token ids in a file (--tokens FILE; --prefix FILE for evict)");
    }
    return TokenizeTextFile(flags.text_file, flags.tokenizer_gguf, !flags.no_bos);
  }
  return absl::InvalidArgumentError(
      "no prompt: give --tokens FILE (token ids) or --text FILE --tokenizer MODEL.gguf");
}

}  // namespace kvt::cli
