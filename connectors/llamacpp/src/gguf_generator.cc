#include "llamacpp/gguf_generator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ggml-backend.h"
#include "ggml.h"
#include "gguf.h"
#include "llama.h"

namespace kvt::llamacpp {
namespace {

// xoshiro256** (Blackman & Vigna), seeded by splitmix64: portable and fast, so a spec
// yields the same bytes everywhere (std::normal_distribution is implementation-defined).
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (auto& word : s_) {
      seed += 0x9E3779B97F4A7C15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      word = z ^ (z >> 31);
    }
  }
  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }
  // Uniform in (0, 1].
  double Uniform() { return (static_cast<double>(Next() >> 11) + 1.0) * 0x1.0p-53; }
  // Two N(0, 1) samples (Box-Muller).
  void Normal2(float* a, float* b) {
    const double r = std::sqrt(-2.0 * std::log(Uniform()));
    const double theta = 2.0 * M_PI * Uniform();
    *a = static_cast<float>(r * std::cos(theta));
    *b = static_cast<float>(r * std::sin(theta));
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

struct GgufDeleter {
  void operator()(gguf_context* ctx) const { gguf_free(ctx); }
};
struct GgmlDeleter {
  void operator()(ggml_context* ctx) const { ggml_free(ctx); }
};
struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};

struct TensorPlan {
  std::string name;
  int64_t ne0 = 0;
  int64_t ne1 = 1;  // 1 for vectors
  bool is_norm = false;
};

std::vector<TensorPlan> PlanTensors(const SyntheticModelSpec& spec, uint32_t n_vocab) {
  const int64_t e = spec.n_embd;
  const int64_t kv = static_cast<int64_t>(spec.head_dim()) * spec.n_head_kv;
  std::vector<TensorPlan> plan;
  plan.push_back({"token_embd.weight", e, n_vocab, false});
  plan.push_back({"output_norm.weight", e, 1, true});
  for (uint32_t l = 0; l < spec.n_layer; ++l) {
    const std::string p = absl::StrCat("blk.", l, ".");
    plan.push_back({p + "attn_norm.weight", e, 1, true});
    plan.push_back({p + "attn_q.weight", e, e, false});
    plan.push_back({p + "attn_k.weight", e, kv, false});
    plan.push_back({p + "attn_v.weight", e, kv, false});
    plan.push_back({p + "attn_output.weight", e, e, false});
    plan.push_back({p + "ffn_norm.weight", e, 1, true});
    plan.push_back({p + "ffn_gate.weight", e, spec.n_ff, false});
    plan.push_back({p + "ffn_up.weight", e, spec.n_ff, false});
    plan.push_back({p + "ffn_down.weight", spec.n_ff, e, false});
  }
  return plan;
}

bool IsKnownArch(std::string_view arch) {
  for (const char* a : kSyntheticArchs) {
    if (arch == a) return true;
  }
  return false;
}

// FNV-1a of a tensor name: each tensor draws from its own stream, so the weights do not
// depend on the order in which llama.cpp creates tensors.
uint64_t NameHash(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

struct FillParams {
  uint64_t seed = 0;
  float init_std = 0.02f;
};

// llama_model_init_from_user's tensor initialiser: norm weights 1.0, SSM A (state decay)
// in [-3, -1], everything else N(0, init_std).
void FillTensor(ggml_tensor* tensor, void* user) {
  const auto* p = static_cast<const FillParams*>(user);
  const std::string name = ggml_get_name(tensor);
  const int64_t n = ggml_nelements(tensor);
  std::vector<float> v(static_cast<size_t>(n) + 1);
  Rng rng(p->seed ^ NameHash(name));
  const bool norm = absl::StrContains(name, "norm");
  const bool ssm_a = absl::StrContains(name, "ssm_a");
  for (int64_t j = 0; j < n; j += 2) {
    float a = 0, b = 0;
    rng.Normal2(&a, &b);
    v[static_cast<size_t>(j)] = a;
    v[static_cast<size_t>(j) + 1] = b;
  }
  for (int64_t j = 0; j < n; ++j) {
    float& x = v[static_cast<size_t>(j)];
    if (norm) {
      x = 1.0f;
    } else if (ssm_a) {
      x = -1.0f - std::min(2.0f, std::fabs(x));
    } else {
      x *= p->init_std;
    }
  }
  if (tensor->type == GGML_TYPE_F32) {
    ggml_backend_tensor_set(tensor, v.data(), 0, ggml_nbytes(tensor));
  } else if (tensor->type == GGML_TYPE_F16) {
    std::vector<ggml_fp16_t> h(static_cast<size_t>(n));
    ggml_fp32_to_fp16_row(v.data(), h.data(), n);
    ggml_backend_tensor_set(tensor, h.data(), 0, ggml_nbytes(tensor));
  }
}

// llama.cpp's log lines while it builds a model, so a refusal can be quoted.
struct LogCapture {
  std::string text;
  static void Callback(ggml_log_level level, const char* line, void* user) {
    if (level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN) {
      static_cast<LogCapture*>(user)->text += line;
    }
  }
};

// The hyperparameter keys of `spec.arch` (llama.cpp src/llama-arch.cpp LLM_KV_NAMES, read
// by src/models/<arch>.cpp load_arch_hparams).
void SetArchKeys(gguf_context* g, const SyntheticModelSpec& spec, uint32_t n_vocab) {
  const std::string& a = spec.arch;
  auto k = [&a](std::string_view key) { return absl::StrCat(a, ".", std::string(key)); };
  auto u32 = [&](std::string_view key, uint32_t v) { gguf_set_val_u32(g, k(key).c_str(), v); };
  auto f32 = [&](std::string_view key, float v) { gguf_set_val_f32(g, k(key).c_str(), v); };
  auto arr = [&](std::string_view key, const std::vector<uint32_t>& v) {
    gguf_set_arr_data(g, k(key).c_str(), GGUF_TYPE_UINT32, v.data(), v.size());
  };
  u32("vocab_size", n_vocab);
  u32("context_length", spec.n_ctx_train);
  u32("embedding_length", spec.n_embd);
  u32("block_count", spec.n_layer);
  u32("feed_forward_length", spec.n_ff);
  f32("attention.layer_norm_rms_epsilon", spec.rms_eps);
  f32("attention.layer_norm_epsilon", spec.rms_eps);
  f32("rope.freq_base", spec.rope_freq_base);
  const bool ssm = a == "mamba2" || a == "granitehybrid" || a == "qwen35";
  if (a != "mamba2") {
    u32("attention.head_count", spec.n_head);
    if (a == "granitehybrid" || a == "lfm2") {
      // A layer with 0 KV heads is the recurrent (Mamba2 / short-convolution) kind.
      std::vector<uint32_t> kv(spec.n_layer, 0);
      for (uint32_t l = 0; l < spec.n_layer; ++l) {
        if ((l + 1) % spec.attn_interval == 0) kv[l] = spec.n_head_kv;
      }
      arr("attention.head_count_kv", kv);
    } else {
      u32("attention.head_count_kv", spec.n_head_kv);
    }
    u32("rope.dimension_count", a == "deepseek2" ? spec.mla_rope_dim : spec.head_dim());
  }
  if (spec.n_swa > 0) {
    u32("attention.sliding_window", spec.n_swa);
    if (spec.swa_pattern > 0) u32("attention.sliding_window_pattern", spec.swa_pattern);
  }
  if (spec.n_expert > 0) {
    u32("expert_count", spec.n_expert);
    u32("expert_used_count", spec.n_expert_used);
    u32("expert_feed_forward_length", spec.n_ff_exp);
  }
  if (ssm) {
    u32("ssm.conv_kernel", spec.ssm_d_conv);
    u32("ssm.inner_size", spec.ssm_d_inner);
    u32("ssm.state_size", spec.ssm_d_state);
    u32("ssm.time_step_rank", spec.ssm_n_head);
    u32("ssm.group_count", spec.ssm_n_group);
  }
  if (a == "qwen35") {
    u32("full_attention_interval", spec.attn_interval);
    const uint32_t q = spec.head_dim() / 8;
    arr("rope.dimension_sections", {q, q, q, q});
  }
  if (a == "lfm2") u32("shortconv.l_cache", 3);
  if (a == "deepseek2") {
    u32("leading_dense_block_count", 1);
    u32("attention.q_lora_rank", spec.q_lora_rank);
    u32("attention.kv_lora_rank", spec.kv_lora_rank);
    u32("attention.key_length", spec.kv_lora_rank + spec.mla_rope_dim);
    u32("attention.value_length", spec.kv_lora_rank);
    u32("attention.key_length_mla", spec.mla_key_nope + spec.mla_rope_dim);
    u32("attention.value_length_mla", spec.mla_value_dim);
    u32("expert_shared_count", 1);
    u32("expert_gating_func", 1);  // softmax
    f32("expert_weights_scale", 1.0f);
  }
}

// Every architecture but llama: llama.cpp builds the model from `g`'s keys (its loader
// creates the architecture's tensors) and saves it.
absl::Status WriteThroughLlamaCpp(const SyntheticModelSpec& spec, gguf_context* g,
                                  const std::string& tmp) {
  static std::once_flag once;
  std::call_once(once, [] { llama_backend_init(); });
  ggml_log_callback saved_cb = nullptr;
  void* saved_ud = nullptr;
  llama_log_get(&saved_cb, &saved_ud);
  LogCapture log;
  llama_log_set(&LogCapture::Callback, &log);
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  mp.use_extra_bufts = false;
  FillParams fill{spec.seed, spec.init_std};
  llama_model* model = llama_model_init_from_user(g, &FillTensor, &fill, mp);
  if (model != nullptr) {
    llama_model_save_to_file(model, tmp.c_str());
    llama_model_free(model);
  }
  llama_log_set(saved_cb, saved_ud);
  if (model == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("llama.cpp ", "could not build a '", spec.arch,
                                                   "' model from the generated keys: ", log.text));
  }
  if (!std::filesystem::exists(tmp)) {
    return absl::InternalError(absl::StrCat("llama_model_save_to_file did not write '", tmp, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SyntheticModelSpec::Validate() const {
  if (name.empty()) return absl::InvalidArgumentError("SyntheticModelSpec.name is empty");
  if (!IsKnownArch(arch)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SyntheticModelSpec.arch '", arch,
        "' is not one kvtier generates (llama, gemma3, gpt-oss, qwen35, granitehybrid, mamba2, "
        "lfm2, deepseek2)"));
  }
  if (n_layer == 0 || n_embd == 0 || n_ff == 0 || n_head == 0 || n_head_kv == 0 ||
      n_ctx_train == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SyntheticModelSpec: n_layer, n_embd, n_ff, n_head, n_head_kv, n_ctx_train must be > 0 "
        "(got ",
        n_layer, ", ", n_embd, ", ", n_ff, ", ", n_head, ", ", n_head_kv, ", ", n_ctx_train, ")"));
  }
  if (n_embd % n_head != 0) {
    return absl::InvalidArgumentError(absl::StrCat("SyntheticModelSpec: n_embd ", n_embd,
                                                   " is not a multiple of n_head ", n_head));
  }
  if (n_head % n_head_kv != 0) {
    return absl::InvalidArgumentError(absl::StrCat("SyntheticModelSpec: n_head ", n_head,
                                                   " is not a multiple of n_head_kv ", n_head_kv));
  }
  if (head_dim() % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("SyntheticModelSpec: head_dim ", head_dim(), " must be even (RoPE)"));
  }
  if ((arch == "granitehybrid" || arch == "lfm2" || arch == "qwen35") &&
      (attn_interval == 0 || attn_interval > n_layer)) {
    return absl::InvalidArgumentError(absl::StrCat("SyntheticModelSpec.attn_interval ",
                                                   attn_interval, " must be in 1..n_layer (",
                                                   n_layer, ") for ", arch));
  }
  if (vocab_gguf.empty() && vocab_size < 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("SyntheticModelSpec: vocab_size ", vocab_size, " must be >= 4"));
  }
  if (!(init_std > 0.0f) || !(rms_eps > 0.0f) || !(rope_freq_base > 0.0f)) {
    return absl::InvalidArgumentError(
        "SyntheticModelSpec: init_std, rms_eps and rope_freq_base must be > 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<SyntheticModelSpec> SyntheticModelPreset(std::string_view name,
                                                        std::string vocab_gguf) {
  SyntheticModelSpec spec;
  spec.vocab_gguf = std::move(vocab_gguf);
  if (name == "tiny") {
    spec.name = "kvtier-tiny";
    return spec;
  }
  if (name == "demo") {
    spec.name = "kvtier-demo-270m";
    spec.n_layer = 16;
    spec.n_embd = 1024;
    spec.n_ff = 4096;
    spec.n_head = 16;
    spec.n_head_kv = 4;
    spec.seed = 270;
    return spec;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown synthetic model size '", std::string(name), "' (expected 'tiny' or 'demo')"));
}

absl::StatusOr<SyntheticModelSpec> SyntheticArchPreset(std::string_view arch, std::string_view size,
                                                       std::string vocab_gguf) {
  absl::StatusOr<SyntheticModelSpec> spec = SyntheticModelPreset(size, std::move(vocab_gguf));
  if (!spec.ok() || arch == "llama") return spec;
  if (!IsKnownArch(arch)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown architecture '", std::string(arch),
        "' (expected llama, gemma3, gpt-oss, qwen35, granitehybrid, mamba2, lfm2, deepseek2)"));
  }
  SyntheticModelSpec& s = *spec;
  s.arch = std::string(arch);
  s.name = absl::StrCat("kvtier-", std::string(arch), "-", std::string(size));
  s.f16 = false;  // llama.cpp creates user-initialised tensors as F32
  if (size == "demo") s.n_layer = 8;
  s.attn_interval = 2;
  if (arch == "gemma3") {
    s.n_swa = size == "demo" ? 512 : 48;
    s.swa_pattern = 2;
  } else if (arch == "gpt-oss") {
    s.n_swa = size == "demo" ? 512 : 48;
    s.n_expert = 4;
    s.n_expert_used = 2;
    s.n_ff_exp = s.n_ff / 2;
  } else if (arch == "qwen35" || arch == "granitehybrid" || arch == "mamba2") {
    s.ssm_d_conv = 4;
    s.ssm_d_inner = arch == "qwen35" ? s.n_embd : 2 * s.n_embd;
    s.ssm_d_state = arch == "qwen35" ? s.head_dim() : 32;
    s.ssm_n_head = arch == "qwen35" ? s.n_head : s.ssm_d_inner / 64;
    s.ssm_n_group = arch == "qwen35" ? s.n_head_kv : 1;
  } else if (arch == "deepseek2") {
    s.kv_lora_rank = 64;
    s.q_lora_rank = 128;
    s.mla_rope_dim = 32;
    s.mla_key_nope = 64;
    s.mla_value_dim = 64;
    s.n_head_kv = 1;  // one shared latent per token (the KV cache row is kv_lora + rope)
    s.n_expert = 4;
    s.n_expert_used = 2;
    s.n_ff_exp = s.n_ff / 2;
  }
  return spec;
}

uint64_t SyntheticModelParams(const SyntheticModelSpec& spec, uint32_t n_vocab) {
  if (spec.arch != "llama") return 0;
  uint64_t total = 0;
  for (const TensorPlan& t : PlanTensors(spec, n_vocab)) {
    total += static_cast<uint64_t>(t.ne0) * static_cast<uint64_t>(t.ne1);
  }
  return total;
}

std::string DefaultVocabPath() {
#ifdef KVT_LLAMACPP_DEFAULT_VOCAB
  return KVT_LLAMACPP_DEFAULT_VOCAB;
#else
  return "";
#endif
}

absl::Status WriteSyntheticModel(const SyntheticModelSpec& spec, const std::string& path) {
  if (absl::Status s = spec.Validate(); !s.ok()) return s;

  std::unique_ptr<gguf_context, GgufDeleter> gguf(gguf_init_empty());
  uint32_t n_vocab = spec.vocab_size;
  if (!spec.vocab_gguf.empty()) {
    if (!std::filesystem::exists(spec.vocab_gguf)) {
      return absl::NotFoundError(absl::StrCat("vocab GGUF '", spec.vocab_gguf, "' does not exist"));
    }
    gguf_init_params params = {/*no_alloc=*/true, /*ctx=*/nullptr};
    std::unique_ptr<gguf_context, GgufDeleter> vocab(
        gguf_init_from_file(spec.vocab_gguf.c_str(), params));
    if (!vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocab GGUF '", spec.vocab_gguf, "' is not a readable GGUF file"));
    }
    const int64_t tokens_id = gguf_find_key(vocab.get(), "tokenizer.ggml.tokens");
    if (tokens_id < 0 || gguf_get_kv_type(vocab.get(), tokens_id) != GGUF_TYPE_ARRAY) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocab GGUF '", spec.vocab_gguf, "' has no tokenizer.ggml.tokens array"));
    }
    n_vocab = static_cast<uint32_t>(gguf_get_arr_n(vocab.get(), tokens_id));
    // Copy everything, then keep only the tokenizer keys.
    gguf_set_kv(gguf.get(), vocab.get());
    for (int64_t i = gguf_get_n_kv(gguf.get()) - 1; i >= 0; --i) {
      const std::string key = gguf_get_key(gguf.get(), i);
      if (key.rfind("tokenizer.", 0) != 0) gguf_remove_key(gguf.get(), key.c_str());
    }
  } else {
    gguf_set_val_str(gguf.get(), "tokenizer.ggml.model", "none");
  }

  const std::string tmp = path + ".tmp";
  std::error_code ec;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (spec.arch != "llama") {
    gguf_set_val_str(gguf.get(), "general.architecture", spec.arch.c_str());
    gguf_set_val_str(gguf.get(), "general.name", spec.name.c_str());
    SetArchKeys(gguf.get(), spec, n_vocab);
    std::filesystem::remove(tmp, ec);
    if (absl::Status s = WriteThroughLlamaCpp(spec, gguf.get(), tmp); !s.ok()) {
      std::filesystem::remove(tmp, ec);
      return s;
    }
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("renaming '", tmp, "' to '", path, "' failed: ", ec.message()));
    }
    return absl::OkStatus();
  }
  gguf_set_val_str(gguf.get(), "general.architecture", "llama");
  gguf_set_val_str(gguf.get(), "general.name", spec.name.c_str());
  gguf_set_val_u32(gguf.get(), "general.file_type", spec.f16 ? 1u : 0u);  // MOSTLY_F16 / ALL_F32
  gguf_set_val_u32(gguf.get(), "llama.context_length", spec.n_ctx_train);
  gguf_set_val_u32(gguf.get(), "llama.embedding_length", spec.n_embd);
  gguf_set_val_u32(gguf.get(), "llama.block_count", spec.n_layer);
  gguf_set_val_u32(gguf.get(), "llama.feed_forward_length", spec.n_ff);
  gguf_set_val_u32(gguf.get(), "llama.attention.head_count", spec.n_head);
  gguf_set_val_u32(gguf.get(), "llama.attention.head_count_kv", spec.n_head_kv);
  gguf_set_val_f32(gguf.get(), "llama.attention.layer_norm_rms_epsilon", spec.rms_eps);
  gguf_set_val_u32(gguf.get(), "llama.rope.dimension_count", spec.head_dim());
  gguf_set_val_f32(gguf.get(), "llama.rope.freq_base", spec.rope_freq_base);
  gguf_set_val_u32(gguf.get(), "llama.vocab_size", n_vocab);

  const std::vector<TensorPlan> plan = PlanTensors(spec, n_vocab);
  ggml_init_params mparams = {/*mem_size=*/ggml_tensor_overhead() * (plan.size() + 8),
                              /*mem_buffer=*/nullptr, /*no_alloc=*/true};
  std::unique_ptr<ggml_context, GgmlDeleter> meta(ggml_init(mparams));
  if (!meta) return absl::InternalError("ggml_init failed for the tensor metadata context");
  for (const TensorPlan& t : plan) {
    const ggml_type type = (t.is_norm || !spec.f16) ? GGML_TYPE_F32 : GGML_TYPE_F16;
    ggml_tensor* tensor = t.ne1 == 1 ? ggml_new_tensor_1d(meta.get(), type, t.ne0)
                                     : ggml_new_tensor_2d(meta.get(), type, t.ne0, t.ne1);
    ggml_set_name(tensor, t.name.c_str());
    gguf_add_tensor(gguf.get(), tensor);
  }

  {
    std::unique_ptr<FILE, FileCloser> f(std::fopen(tmp.c_str(), "wb"));
    if (!f) return absl::InternalError(absl::StrCat("cannot create '", tmp, "'"));
    if (!gguf_write_to_file_ptr(gguf.get(), f.get(), /*only_meta=*/true)) {
      return absl::InternalError(absl::StrCat("writing GGUF metadata to '", tmp, "' failed"));
    }
    const size_t alignment = gguf_get_alignment(gguf.get());
    Rng rng(spec.seed);
    std::vector<float> values;
    std::vector<ggml_fp16_t> halves;
    uint64_t written = 0;
    for (size_t i = 0; i < plan.size(); ++i) {
      const TensorPlan& t = plan[i];
      const size_t n = static_cast<size_t>(t.ne0 * t.ne1);
      values.resize(n + 1);
      if (t.is_norm) {
        std::fill(values.begin(), values.end(), 1.0f);
      } else {
        for (size_t j = 0; j < n; j += 2) {
          rng.Normal2(&values[j], &values[j + 1]);
          values[j] *= spec.init_std;
          values[j + 1] *= spec.init_std;
        }
      }
      const void* data = values.data();
      size_t bytes = n * sizeof(float);
      if (!t.is_norm && spec.f16) {
        halves.resize(n);
        ggml_fp32_to_fp16_row(values.data(), halves.data(), static_cast<int64_t>(n));
        data = halves.data();
        bytes = n * sizeof(ggml_fp16_t);
      }
      if (gguf_get_tensor_offset(gguf.get(), static_cast<int64_t>(i)) != written) {
        return absl::InternalError(absl::StrCat("GGUF offset mismatch at tensor ", t.name));
      }
      if (std::fwrite(data, 1, bytes, f.get()) != bytes) {
        return absl::InternalError(
            absl::StrCat("short write of tensor ", t.name, " to '", tmp, "'"));
      }
      written += bytes;
      const size_t pad = (alignment - written % alignment) % alignment;
      const std::vector<char> zeros(pad, 0);
      if (pad > 0 && std::fwrite(zeros.data(), 1, pad, f.get()) != pad) {
        return absl::InternalError(absl::StrCat("short write of padding to '", tmp, "'"));
      }
      written += pad;
    }
    if (std::fflush(f.get()) != 0) {
      return absl::InternalError(absl::StrCat("flushing '", tmp, "' failed"));
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("renaming '", tmp, "' to '", path, "' failed: ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace kvt::llamacpp
