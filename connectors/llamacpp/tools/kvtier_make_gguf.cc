// kvtier-make-gguf: writes a synthetic GGUF with seeded random weights
// (see llamacpp/gguf_generator.h), of any architecture kvtier is tested on, and checks what
// the pinned llama.cpp makes of a model.
//
//   kvtier-make-gguf --size tiny --out /tmp/tiny.gguf
//   kvtier-make-gguf --size demo --out models/demo.gguf --seed 7
//   kvtier-make-gguf --size tiny --no-vocab --out ids-only.gguf   (tokenizer "none")
//   kvtier-make-gguf --arch gemma3 --size tiny --out /tmp/gemma3.gguf
//   kvtier-make-gguf --check /tmp/gemma3.gguf     (load, decode, print the memory kind)
//
// Exit codes: 0 ok, 1 the model could not be written / loaded / decoded (the engine's own
// error is printed), 2 bad usage.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "llama.h"
#include "llamacpp/gguf_generator.h"

namespace {

std::string g_log;  // llama.cpp's warnings and errors during --check

void CaptureLog(ggml_log_level level, const char* text, void* /*user*/) {
  if (level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN) g_log += text;
}

size_t StateBytes(llama_context* ctx, llama_state_seq_flags flags) {
  std::vector<uint8_t> buf(llama_state_seq_get_size_ext(ctx, 0, flags));
  return llama_state_seq_get_data_ext(ctx, buf.data(), buf.size(), 0, flags);
}

// Decodes tokens [from, to) of `t` into seq 0 in batches of 32 (logits for the last one
// when `logits`). False when llama_decode fails.
bool Decode(llama_context* ctx, const std::vector<llama_token>& t, int from, int to, bool logits) {
  llama_batch batch = llama_batch_init(32, 0, 1);
  int rc = 0;
  for (int start = from; start < to && rc == 0; start += 32) {
    batch.n_tokens = std::min(32, to - start);
    for (int i = 0; i < batch.n_tokens; ++i) {
      batch.token[i] = t[static_cast<size_t>(start + i)];
      batch.pos[i] = start + i;
      batch.n_seq_id[i] = 1;
      batch.seq_id[i][0] = 0;
      batch.logits[i] = logits && start + i == to - 1;
    }
    rc = llama_decode(ctx, batch);
  }
  llama_batch_free(batch);
  return rc == 0;
}

// The property kvtier's chunk records rely on, for this model: the whole sequence state
// saved at a chunk boundary (32-token chunks, after 1, 2 and 3 chunks), restored into
// a cache that held another prompt, then 40 more tokens decoded, gives the logits of the
// uninterrupted prefill bit for bit. Prints one line; false when it does not hold.
bool CheckBoundaryRestore(llama_context* ctx, int32_t n_vocab) {
  std::vector<llama_token> t;
  for (int i = 0; i < 200; ++i) t.push_back((i * 7919 + 13) % n_vocab);
  llama_memory_t mem = llama_get_memory(ctx);
  float max_diff = 0;
  bool all_same = true;
  for (int k : {1, 2, 3}) {
    const int b = 32 * k;
    llama_memory_seq_rm(mem, 0, -1, -1);
    if (!Decode(ctx, t, 0, b, false)) return false;
    std::vector<uint8_t> state(llama_state_seq_get_size(ctx, 0));
    llama_state_seq_get_data(ctx, state.data(), state.size(), 0);
    if (!Decode(ctx, t, b, b + 40, true)) return false;
    const float* l = llama_get_logits_ith(ctx, -1);
    const std::vector<float> cold(l, l + n_vocab);
    llama_memory_seq_rm(mem, 0, -1, -1);
    if (!Decode(ctx, t, 100, 200, false)) return false;  // another prompt in the cache
    llama_memory_seq_rm(mem, 0, -1, -1);
    if (llama_state_seq_set_data(ctx, state.data(), state.size(), 0) != state.size()) {
      std::printf("boundary restore: llama.cpp refused its own state\n");
      return false;
    }
    if (!Decode(ctx, t, b, b + 40, true)) return false;
    l = llama_get_logits_ith(ctx, -1);
    for (int i = 0; i < n_vocab; ++i) {
      if (std::memcmp(&l[i], &cold[static_cast<size_t>(i)], sizeof(float)) != 0) all_same = false;
      max_diff = std::max(max_diff, std::fabs(l[i] - cold[static_cast<size_t>(i)]));
    }
  }
  llama_memory_seq_rm(mem, 0, -1, -1);
  if (all_same) {
    std::printf("boundary restore (whole state after 1, 2, 3 chunks of 32): bit-identical\n");
  } else {
    std::printf(
        "boundary restore (whole state after 1, 2, 3 chunks of 32): DIFFERS (max |diff| %g)\n",
        max_diff);
  }
  return all_same;
}

// Loads `path` with the options kvtier's engine uses, decodes `n_tokens` tokens in
// batches of 32 and prints one line per fact. Returns the exit code.
int Check(const std::string& path, int n_tokens) {
  llama_backend_init();
  llama_log_set(CaptureLog, nullptr);
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  mp.use_extra_bufts = false;
  llama_model* model = llama_model_load_from_file(path.c_str(), mp);
  if (model == nullptr) {
    std::printf("load: FAILED\nengine error: %s\n", g_log.c_str());
    return 1;
  }
  char arch[64] = "?";
  llama_model_meta_val_str(model, "general.architecture", arch, sizeof arch);
  const bool recurrent = llama_model_is_recurrent(model);
  const bool hybrid = llama_model_is_hybrid(model);
  const int32_t n_swa = llama_model_n_swa(model);
  std::printf("arch: %s\nlayers: %d\nmemory: %s%s\nn_swa: %d\n", arch, llama_model_n_layer(model),
              recurrent ? "recurrent"
              : hybrid  ? "hybrid"
                        : "kv",
              n_swa > 0 && !recurrent ? " + sliding window" : "", n_swa);
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 512;
  cp.n_batch = 32;
  cp.n_ubatch = 32;
  cp.n_seq_max = 1;
  cp.n_threads = 1;
  cp.n_threads_batch = 1;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr) {
    std::printf("context: FAILED\nengine error: %s\n", g_log.c_str());
    llama_model_free(model);
    return 1;
  }
  const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  llama_batch batch = llama_batch_init(32, 0, 1);
  int rc = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int start = 0; start < n_tokens && rc == 0; start += 32) {
    batch.n_tokens = std::min(32, n_tokens - start);
    for (int i = 0; i < batch.n_tokens; ++i) {
      batch.token[i] = (start + i) * 7919 % n_vocab;
      batch.pos[i] = start + i;
      batch.n_seq_id[i] = 1;
      batch.seq_id[i][0] = 0;
      batch.logits[i] = i == batch.n_tokens - 1;
    }
    rc = llama_decode(ctx, batch);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  llama_batch_free(batch);
  if (rc != 0) {
    std::printf("decode: FAILED (llama_decode %d)\nengine error: %s\n", rc, g_log.c_str());
  } else {
    const float* logits = llama_get_logits_ith(ctx, -1);
    bool finite = logits != nullptr;
    for (int i = 0; finite && i < n_vocab; ++i) finite = std::isfinite(logits[i]);
    std::printf("decode: ok, %d tokens in %.3f s, logits %s\n", n_tokens, s,
                finite ? "finite" : "NOT finite");
    std::printf("state bytes (whole sequence): %zu\nstate bytes (partial only): %zu\n",
                StateBytes(ctx, 0), StateBytes(ctx, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY));
    if (!finite) rc = 1;
    if (rc == 0 && !CheckBoundaryRestore(ctx, n_vocab)) rc = 1;
  }
  llama_free(ctx);
  llama_model_free(model);
  return rc == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Write a GGUF with seeded random weights, or check one against llama.cpp",
               "kvtier-make-gguf"};  // usage names the tool, not the path it ran from
  std::string arch = "llama";
  std::string size = "tiny";
  std::string out;
  std::string check;
  int check_tokens = 96;
  std::string vocab = kvt::llamacpp::DefaultVocabPath();
  bool no_vocab = false;
  bool f32 = false;
  uint64_t seed = 0;
  bool seed_set = false;
  std::vector<std::string> archs(std::begin(kvt::llamacpp::kSyntheticArchs),
                                 std::end(kvt::llamacpp::kSyntheticArchs));
  app.add_option("--arch", arch, "model family (llama.cpp architecture name)")
      ->check(CLI::IsMember(archs))
      ->capture_default_str();
  app.add_option("--size", size, "tiny | demo")->check(CLI::IsMember({"tiny", "demo"}));
  app.add_option("--out", out, "output path");
  app.add_option("--check", check,
                 "load this GGUF with the pinned llama.cpp, decode --check-tokens tokens and "
                 "print its memory kind and state sizes (or the engine's error)");
  app.add_option("--check-tokens", check_tokens, "tokens --check decodes")
      ->check(CLI::Range(1, 480));
  // The default is a path on the machine kvtier was built on: --help names the file by
  // what it is, not by that path.
  app.add_option("--vocab", vocab, "vocab-only GGUF whose tokenizer is copied")
      ->default_str(vocab.empty() ? "none: no tokenizer (llama.cpp's vocab file was not found "
                                    "at build time)"
                                  : "llama.cpp's models/ggml-vocab-llama-spm.gguf, from the "
                                    "llama.cpp source kvtier was built with");
  app.add_flag("--no-vocab", no_vocab, "no tokenizer (tokenizer.ggml.model = none)");
  app.add_flag("--f32", f32, "F32 weight matrices instead of F16 (llama; the others are F32)");
  app.add_option_function<uint64_t>(
      "--seed",
      [&](uint64_t v) {
        seed = v;
        seed_set = true;
      },
      "weight seed");
  CLI11_PARSE(app, argc, argv);
  if (!check.empty()) return Check(check, check_tokens);
  if (out.empty()) {
    std::fprintf(stderr, "kvtier-make-gguf: --out is required (or --check PATH)\n");
    return 2;
  }

  auto spec = kvt::llamacpp::SyntheticArchPreset(arch, size, no_vocab ? "" : vocab);
  if (!spec.ok()) {
    std::fprintf(stderr, "kvtier-make-gguf: %s\n", spec.status().ToString().c_str());
    return 2;
  }
  if (seed_set) spec->seed = seed;
  if (arch == "llama") spec->f16 = !f32;
  if (absl::Status s = kvt::llamacpp::WriteSyntheticModel(*spec, out); !s.ok()) {
    std::fprintf(stderr, "kvtier-make-gguf: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("wrote %s (%s, %s, %u layers, embd %u, seed %llu)\n", out.c_str(), spec->arch.c_str(),
              spec->name.c_str(), spec->n_layer, spec->n_embd,
              static_cast<unsigned long long>(spec->seed));
  return 0;
}
