#include "llamacpp/gguf_generator.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ggml.h"
#include "gguf.h"

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

}  // namespace

absl::Status SyntheticModelSpec::Validate() const {
  if (name.empty()) return absl::InvalidArgumentError("SyntheticModelSpec.name is empty");
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

uint64_t SyntheticModelParams(const SyntheticModelSpec& spec, uint32_t n_vocab) {
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

  const std::string tmp = path + ".tmp";
  std::error_code ec;
  const auto parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
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
