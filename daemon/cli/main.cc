// kvtier: the operator's CLI for the kvtier cache (docs/cli.md).
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "commands.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace {

using kvt::cli::NamespaceFlags;
using kvt::cli::PromptFlags;

void AddNamespaceFlags(CLI::App* app, NamespaceFlags* ns) {
  app->add_option("--ns", ns->ns_hex, "Namespace as 32 hex digits (instead of the model flags)")
      ->group("Namespace");
  app->add_option("--from-server", ns->from_server,
                  "http://host:port of a running kvtier-llama-server: use the namespace and "
                  "chunk size it reports at /kvtier")
      ->group("Namespace");
  app->add_option("--model", ns->model_id, "Model id as the engine hashes it (name + revision)")
      ->group("Namespace");
  app->add_option("--layers", ns->layers, "Number of layers")->group("Namespace");
  app->add_option("--kv-heads", ns->kv_heads, "KV heads (per TP rank)")->group("Namespace");
  app->add_option("--head-dim", ns->head_dim, "head_dim (MLA: latent dim)")->group("Namespace");
  app->add_option("--dtype", ns->dtype, "KV dtype: f32 f16 bf16 fp8_e4m3 fp8_e5m2 i8 bytes")
      ->capture_default_str()
      ->group("Namespace");
  app->add_option("--layout", ns->layout,
                  "Engine layout kind: flash_attn_nhd, flash_attn_hnd, flashinfer, mla, "
                  "cross_layer, llamacpp_rows")
      ->capture_default_str()
      ->group("Namespace");
  app->add_option("--tp-rank", ns->tp_rank, "Tensor-parallel rank")
      ->capture_default_str()
      ->group("Namespace");
  app->add_option("--tp-size", ns->tp_size, "Tensor-parallel world size")
      ->capture_default_str()
      ->group("Namespace");
  app->add_option("--chunk-tokens", ns->chunk_tokens, "Tokens per chunk")
      ->capture_default_str()
      ->group("Namespace");
  app->add_option("--tenant", ns->tenant, "Tenant the chunks belong to (\"\" = default)")
      ->group("Namespace");
  app->add_option("--engine-extra", ns->engine_extra,
                  "Engine-specific namespace string, as the engine passes it")
      ->group("Namespace");
}

void AddPromptFlags(CLI::App* app, PromptFlags* p, const std::string& tokens_flag,
                    const std::string& text_flag) {
  app->add_option(tokens_flag, p->tokens_file,
                  "File of token ids (integers separated by spaces, newlines or commas)")
      ->group("Prompt");
  app->add_option(text_flag, p->text_file,
                  "Text file, tokenized with --tokenizer (builds with llama.cpp)")
      ->group("Prompt");
  app->add_option("--tokenizer", p->tokenizer_gguf,
                  "GGUF model whose vocabulary tokenizes the text")
      ->group("Prompt");
  app->add_flag("--no-bos", p->no_bos, "Do not add BOS/special tokens when tokenizing text")
      ->group("Prompt");
}

// Refuses negative values for unsigned options: CLI11 would otherwise wrap "-1" to 2^64-1
// (e.g. `watch --count -1` ran forever). No help text, so --help stays clean.
CLI::Validator NonNegative() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        if (!value.empty() && value[0] == '-') return "expected a number >= 0, got " + value;
        return "";
      },
      "");
}

// The first word of argv that is not an option nor the value of a global option that
// takes one: the subcommand the user meant ("" when none).
std::string FirstCommandWord(int argc, char** argv) {
  static const char* const kValued[] = {"--daemon", "--token", "--disk-dir", "--disk-capacity",
                                        "--timeout"};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.empty() || a[0] != '-') return a;
    for (const char* v : kValued) {
      if (a == v) {
        ++i;  // skip its value
        break;
      }
    }
  }
  return "";
}

// True when argv gives `flag` ("--daemon x" or "--daemon=x"), so a value CLI11 holds for
// it came from the command line rather than from its environment variable.
bool GivenOnCommandLine(int argc, char** argv, const std::string& flag) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") return false;
    if (a == flag || a.rfind(flag + "=", 0) == 0) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  // Logs (e.g. the disk tier's open/recovery messages) go to stderr so stdout stays a
  // clean table or JSON document.
  auto logger = spdlog::stderr_color_mt("kvtier");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::warn);

  CLI::App app{
      "kvtier: inspect, evict and watch the kvtier KV cache.\n"
      "Exit codes: 0 ok, 1 runtime error (daemon unreachable, I/O), 2 bad usage or input, "
      "3 not found (key, namespace or prompt not cached)."};
  app.require_subcommand(1);
  app.fallthrough();
  kvt::cli::GlobalFlags g;
  bool verbose = false;
  app.add_option("--daemon", g.daemon,
                 "kvtierd address: unix:/path/to.sock, unix:///path/to.sock or host:port "
                 "(default: kvtierd's default socket, unix://$XDG_RUNTIME_DIR/kvtierd.sock or "
                 "unix:///tmp/kvtierd-UID.sock)")
      ->envname("KVTIER_DAEMON");
  app.add_option("--token", g.token, "Tenant token sent as 'authorization: Bearer <token>'")
      ->envname("KVTIER_TOKEN");
  app.add_option("--disk-dir", g.disk_dir,
                 "Open a disk tier directory offline (no daemon running on it)");
  app.add_option("--disk-capacity", g.disk_capacity,
                 "Capacity to open --disk-dir with, e.g. 2TB (default: its record files' size)");
  app.add_option("--timeout", g.timeout_s,
                 "Seconds to wait for kvtierd to answer each request, connecting included")
      ->capture_default_str();
  app.add_flag("--json", g.json, "Machine-readable JSON output");
  app.add_flag("-v,--verbose", verbose, "Log info messages to stderr");

  auto* stats = app.add_subcommand(
      "stats", "Capacity, use, chunks, hit rates, integrity errors, pins per tier");

  kvt::cli::LsFlags ls;
  auto* ls_cmd = app.add_subcommand("ls", "Cached chunks grouped by namespace and tier");
  AddNamespaceFlags(ls_cmd, &ls.ns);
  ls_cmd->add_option("--tier", ls.tier, "Only this tier: host, disk, remote (the cluster)");
  ls_cmd->add_option("--older-than", ls.older_than,
                     "Only chunks not accessed for this long (90s, 30m, 2h, 7d)");
  ls_cmd->add_option("--newer-than", ls.newer_than, "Only chunks accessed within this long");
  ls_cmd->add_flag("--chunks", ls.chunks, "One row per chunk instead of per namespace");
  ls_cmd->add_flag("--show-layout", ls.layout,
                   "Show each namespace's KV layout (peeks at one record header per "
                   "namespace; counts no hit)");
  ls_cmd->add_option("--limit", ls.limit, "Rows per page (namespaces, or chunks with --chunks)")
      ->capture_default_str()
      ->check(NonNegative());
  ls_cmd->add_option("--offset", ls.offset, "Namespaces to skip (pagination)")
      ->check(NonNegative());
  ls_cmd->add_option("--page-token", ls.page_token,
                     "With --chunks: the 'more' token of the previous page");

  kvt::cli::InspectFlags insp;
  auto* insp_cmd = app.add_subcommand(
      "inspect", "Which leading chunks of a prompt are cached, where, and why the others are not");
  AddNamespaceFlags(insp_cmd, &insp.ns);
  AddPromptFlags(insp_cmd, &insp.prompt, "--tokens", "--text");
  insp_cmd->add_flag("--include-partial", insp.include_partial,
                     "Also look up the tail record an engine stores after the last full chunk "
                     "(kvtier-llama-server's: every token but the last)");

  kvt::cli::EvictFlags ev;
  auto* ev_cmd = app.add_subcommand(
      "evict",
      "Evict by --key, by --prefix (its chunks and everything cached after it), by namespace "
      "(namespace flags alone) or by --older-than");
  ev_cmd->add_option("--key", ev.keys, "Chunk key (32 hex digits); repeatable");
  AddNamespaceFlags(ev_cmd, &ev.ns);
  AddPromptFlags(ev_cmd, &ev.prefix, "--prefix", "--prefix-text");
  ev_cmd->add_option("--older-than", ev.older_than,
                     "Chunks not accessed for this long (90s, 30m, 2h, 7d)");
  ev_cmd->add_flag("--include-orphans", ev.include_orphans,
                   "With --prefix: also evict other branches that lose an ancestor");
  ev_cmd->add_flag("--dry-run,-n", ev.dry_run, "Show what would be evicted; change nothing");

  kvt::cli::WatchFlags w;
  auto* watch_cmd = app.add_subcommand("watch", "Live stats, refreshed in place");
  watch_cmd->add_option("--interval", w.interval_s, "Seconds between refreshes")
      ->capture_default_str();
  watch_cmd->add_option("--count", w.count, "Stop after this many samples (0 = until Ctrl-C)")
      ->capture_default_str()
      ->check(NonNegative());
  watch_cmd->add_flag("--no-clear", w.no_clear, "Append samples instead of redrawing the screen");

  kvt::cli::PlanFlags plan;
  auto* plan_cmd = app.add_subcommand(
      "plan", "Capacity planning: KV bytes per token/chunk/context and what tiers hold");
  plan_cmd->add_option("--gguf", plan.gguf,
                       "Read layers, KV heads and head_dim from a GGUF model file");
  plan_cmd->add_option("--layers", plan.layers, "Number of layers");
  plan_cmd->add_option("--kv-heads", plan.kv_heads, "KV heads");
  plan_cmd->add_option("--head-dim", plan.head_dim, "head_dim");
  plan_cmd->add_option("--dtype", plan.dtype, "KV dtype")->capture_default_str();
  plan_cmd->add_option("--layout", plan.layout, "Layout kind (mla: one latent per token)")
      ->capture_default_str();
  plan_cmd->add_option("--chunk-tokens", plan.chunk_tokens, "Tokens per chunk")
      ->capture_default_str();
  plan_cmd
      ->add_option("--context", plan.context_tokens, "Context length for the per-context figures")
      ->capture_default_str();
  plan_cmd->add_option("--tier", plan.tiers,
                       "Tier capacity NAME=SIZE (host=64GiB, disk=2TB); repeatable. "
                       "Default: the tiers of --daemon/--disk-dir");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const std::string word = FirstCommandWord(argc, argv);
    bool known = word.empty();
    std::string names;
    for (const CLI::App* sub : app.get_subcommands({})) {
      known = known || sub->get_name() == word;
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::cerr << "kvtier: unknown command '" << word << "' (expected one of " << names
                << "; see kvtier --help)\n";
    } else {
      app.exit(e);  // prints CLI11's message; its own exit codes (105, 109, ...) are not used
    }
    return kvt::cli::kExitUsage;
  }
  if (verbose) spdlog::set_level(spdlog::level::info);
  if (!g.daemon.empty() && !GivenOnCommandLine(argc, argv, "--daemon"))
    g.daemon_source = "KVTIER_DAEMON";

  std::ostream& out = std::cout;
  std::ostream& err = std::cerr;
  if (stats->parsed()) return kvt::cli::RunStats(g, out, err);
  if (ls_cmd->parsed()) return kvt::cli::RunLs(ls, g, out, err);
  if (insp_cmd->parsed()) return kvt::cli::RunInspect(insp, g, out, err);
  if (ev_cmd->parsed()) return kvt::cli::RunEvict(ev, g, out, err);
  if (watch_cmd->parsed()) return kvt::cli::RunWatch(w, g, out, err);
  if (plan_cmd->parsed()) return kvt::cli::RunPlan(plan, g, out, err);
  return kvt::cli::kExitUsage;
}
