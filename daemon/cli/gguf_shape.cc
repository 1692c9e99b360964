#include "gguf_shape.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace kvt::cli {

namespace {

enum GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

constexpr uint64_t kMaxString = 1ull << 26;  // 64 MiB: bounds a corrupt length
constexpr uint64_t kMaxKvPairs = 1ull << 20;

class Reader {
 public:
  Reader(std::istream& in, std::string path) : in_(in), path_(std::move(path)) {}

  absl::Status Bytes(void* dst, size_t n) {
    in_.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
    if (static_cast<size_t>(in_.gcount()) != n) {
      return absl::InvalidArgumentError(
          absl::StrCat("GGUF file '", path_, "': truncated metadata"));
    }
    return absl::OkStatus();
  }
  template <typename T>
  absl::StatusOr<T> Pod() {
    T v;
    if (absl::Status s = Bytes(&v, sizeof(T)); !s.ok()) return s;
    return v;  // GGUF is little-endian, as is every platform kvtier builds for.
  }
  absl::StatusOr<std::string> String() {
    auto n = Pod<uint64_t>();
    if (!n.ok()) return n.status();
    if (*n > kMaxString) {
      return absl::InvalidArgumentError(
          absl::StrCat("GGUF file '", path_, "': string of ", *n, " bytes (corrupt?)"));
    }
    std::string s(*n, '\0');
    if (absl::Status st = Bytes(s.data(), s.size()); !st.ok()) return st;
    return s;
  }
  absl::Status Skip(uint64_t n) {
    in_.seekg(static_cast<std::streamoff>(n), std::ios::cur);
    if (!in_) return absl::InvalidArgumentError(absl::StrCat("GGUF file '", path_, "': truncated"));
    return absl::OkStatus();
  }
  const std::string& path() const { return path_; }

 private:
  std::istream& in_;
  std::string path_;
};

size_t ScalarSize(uint32_t type) {
  switch (type) {
    case kU8:
    case kI8:
    case kBool:
      return 1;
    case kU16:
    case kI16:
      return 2;
    case kU32:
    case kI32:
    case kF32:
      return 4;
    case kU64:
    case kI64:
    case kF64:
      return 8;
    default:
      return 0;
  }
}

// Reads one integer scalar of `type` as int64 (nullopt for non-integer types).
absl::StatusOr<std::optional<int64_t>> ReadInt(Reader& r, uint32_t type) {
  switch (type) {
    case kU8: {
      auto v = r.Pod<uint8_t>();
      if (!v.ok()) return v.status();
      return int64_t{*v};
    }
    case kI8: {
      auto v = r.Pod<int8_t>();
      if (!v.ok()) return v.status();
      return int64_t{*v};
    }
    case kU16: {
      auto v = r.Pod<uint16_t>();
      if (!v.ok()) return v.status();
      return int64_t{*v};
    }
    case kI16: {
      auto v = r.Pod<int16_t>();
      if (!v.ok()) return v.status();
      return int64_t{*v};
    }
    case kU32: {
      auto v = r.Pod<uint32_t>();
      if (!v.ok()) return v.status();
      return int64_t{*v};
    }
    case kI32: {
      auto v = r.Pod<int32_t>();
      if (!v.ok()) return v.status();
      return int64_t{*v};
    }
    case kU64: {
      auto v = r.Pod<uint64_t>();
      if (!v.ok()) return v.status();
      return static_cast<int64_t>(*v);
    }
    case kI64: {
      auto v = r.Pod<int64_t>();
      if (!v.ok()) return v.status();
      return *v;
    }
    default:
      return std::optional<int64_t>();
  }
}

struct Value {
  std::optional<std::string> str;
  std::vector<int64_t> ints;  // one for a scalar, several for an integer array
  uint64_t array_len = 0;     // elements of an array (of any type)
};

// Reads (or skips) one value of `type`; integers and strings are kept.
absl::StatusOr<Value> ReadValue(Reader& r, uint32_t type) {
  Value v;
  if (type == kString) {
    auto s = r.String();
    if (!s.ok()) return s.status();
    v.str = std::move(*s);
    return v;
  }
  if (type == kArray) {
    auto et = r.Pod<uint32_t>();
    if (!et.ok()) return et.status();
    auto n = r.Pod<uint64_t>();
    if (!n.ok()) return n.status();
    v.array_len = *n;
    if (*et == kString) {
      for (uint64_t i = 0; i < *n; ++i) {
        auto len = r.Pod<uint64_t>();
        if (!len.ok()) return len.status();
        if (*len > kMaxString)
          return absl::InvalidArgumentError(
              absl::StrCat("GGUF file '", r.path(), "': corrupt string array"));
        if (absl::Status s = r.Skip(*len); !s.ok()) return s;
      }
      return v;
    }
    const size_t es = ScalarSize(*et);
    if (es == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("GGUF file '", r.path(), "': unsupported array element type ", *et));
    }
    if (*n > (1ull << 32))
      return absl::InvalidArgumentError(
          absl::StrCat("GGUF file '", r.path(), "': corrupt array length"));
    if (*et == kF32 || *et == kF64 || *et == kBool || *n > 4096) {
      if (absl::Status s = r.Skip(*n * es); !s.ok()) return s;
      return v;
    }
    for (uint64_t i = 0; i < *n; ++i) {
      auto x = ReadInt(r, *et);
      if (!x.ok()) return x.status();
      v.ints.push_back(x->value_or(0));
    }
    return v;
  }
  const size_t es = ScalarSize(type);
  if (es == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF file '", r.path(), "': unknown value type ", type));
  }
  if (type == kF32 || type == kF64 || type == kBool) {
    if (absl::Status s = r.Skip(es); !s.ok()) return s;
    return v;
  }
  auto x = ReadInt(r, type);
  if (!x.ok()) return x.status();
  v.ints.push_back(x->value_or(0));
  return v;
}

using Metadata = std::map<std::string, Value>;

// The key/value metadata of the GGUF stream `in` (`path` names it in messages).
absl::StatusOr<Metadata> ReadMetadata(std::istream& in, const std::string& path) {
  Reader r(in, path);
  char magic[4];
  if (!r.Bytes(magic, 4).ok() || std::memcmp(magic, "GGUF", 4) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a GGUF file (no GGUF magic)"));
  }
  auto version = r.Pod<uint32_t>();
  if (!version.ok()) return version.status();
  if (*version != 2 && *version != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF file '", path, "': version ", *version, " (expected 2 or 3)"));
  }
  auto tensors = r.Pod<uint64_t>();
  if (!tensors.ok()) return tensors.status();
  auto kvs = r.Pod<uint64_t>();
  if (!kvs.ok()) return kvs.status();
  if (*kvs > kMaxKvPairs) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF file '", path, "': ", *kvs, " metadata pairs (corrupt?)"));
  }
  Metadata meta;
  for (uint64_t i = 0; i < *kvs; ++i) {
    auto key = r.String();
    if (!key.ok()) return key.status();
    auto type = r.Pod<uint32_t>();
    if (!type.ok()) return type.status();
    auto value = ReadValue(r, *type);
    if (!value.ok()) return value.status();
    meta.emplace(std::move(*key), std::move(*value));
  }
  return meta;
}

absl::StatusOr<Metadata> ReadMetadataFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF file '", path, "': cannot open (", std::strerror(errno), ")"));
  }
  return ReadMetadata(in, path);
}

absl::StatusOr<GgufModelShape> ShapeOf(const Metadata& meta, const std::string& path) {
  GgufModelShape shape;
  auto it = meta.find("general.architecture");
  if (it == meta.end() || !it->second.str) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF file '", path, "': no general.architecture"));
  }
  shape.architecture = *it->second.str;
  if (auto n = meta.find("general.name"); n != meta.end() && n->second.str)
    shape.name = *n->second.str;
  const std::string& a = shape.architecture;
  auto ints = [&](const std::string& k) -> const std::vector<int64_t>* {
    auto f = meta.find(absl::StrCat(a, ".", k));
    if (f == meta.end() || f->second.ints.empty()) return nullptr;
    return &f->second.ints;
  };
  auto need = [&](const std::string& k) -> absl::StatusOr<int64_t> {
    const auto* v = ints(k);
    if (v == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("GGUF file '", path, "': no integer ", a, ".", k));
    }
    return *std::max_element(v->begin(), v->end());
  };
  auto layers = need("block_count");
  if (!layers.ok()) return layers.status();
  shape.num_layers = static_cast<uint32_t>(*layers);
  auto heads = need("attention.head_count");
  if (!heads.ok()) return heads.status();
  if (const auto* kv = ints("attention.head_count_kv")) {
    shape.num_kv_heads = static_cast<uint32_t>(*std::max_element(kv->begin(), kv->end()));
    if (kv->size() > 1 &&
        std::adjacent_find(kv->begin(), kv->end(), std::not_equal_to<>()) != kv->end()) {
      shape.notes.push_back(absl::StrCat("KV heads vary per layer; using the maximum (",
                                         shape.num_kv_heads, "), so figures are an upper bound"));
    }
  } else {
    shape.num_kv_heads = static_cast<uint32_t>(*heads);
  }
  if (const auto* rank = ints("attention.kv_lora_rank")) {
    const auto* rope = ints("rope.dimension_count");
    shape.mla = true;
    shape.num_kv_heads = 1;
    shape.head_dim = static_cast<uint32_t>((*rank)[0] + (rope ? (*rope)[0] : 0));
    shape.notes.push_back(absl::StrCat("MLA: one latent vector per token (kv_lora_rank ",
                                       (*rank)[0], " + rope dims ", rope ? (*rope)[0] : 0, ")"));
  } else if (const auto* kl = ints("attention.key_length")) {
    shape.head_dim = static_cast<uint32_t>((*kl)[0]);
    if (const auto* vl = ints("attention.value_length"); vl && (*vl)[0] != (*kl)[0]) {
      shape.notes.push_back(absl::StrCat("K head_dim ", (*kl)[0], " != V head_dim ", (*vl)[0],
                                         "; figures use the K head_dim for both"));
    }
  } else {
    auto emb = need("embedding_length");
    if (!emb.ok()) return emb.status();
    if (*heads <= 0 || *emb % *heads != 0) {
      return absl::InvalidArgumentError(absl::StrCat("GGUF file '", path, "': embedding_length ",
                                                     *emb, " is not a multiple of head_count ",
                                                     *heads));
    }
    shape.head_dim = static_cast<uint32_t>(*emb / *heads);
  }
  if (shape.num_layers == 0 || shape.num_kv_heads == 0 || shape.head_dim == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF file '", path, "': zero layers, KV heads or head_dim"));
  }
  return shape;
}

absl::StatusOr<GgufTokenizer> TokenizerOf(const Metadata& meta, const std::string& path) {
  auto model = meta.find("tokenizer.ggml.model");
  if (model == meta.end() || !model->second.str) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF file '", path,
                     "' has no tokenizer (no tokenizer.ggml.model): give the GGUF of "
                     "the model the engine runs, or token ids with --tokens FILE"));
  }
  const std::string& name = *model->second.str;
  // llama.cpp's llama-vocab.cpp: "none" and "no_vocab" mean LLAMA_VOCAB_TYPE_NONE, a model
  // driven by token ids only, which llama_tokenize aborts on (GGML_ABORT).
  if (name == "none" || name == "no_vocab") {
    return absl::InvalidArgumentError(absl::StrCat(
        "GGUF file '", path, "' has no tokenizer (tokenizer.ggml.model = ", name,
        "): it cannot tokenize text; give token ids in a file (--tokens FILE; --prefix FILE for "
        "evict), or a GGUF with a "
        "vocabulary as --tokenizer"));
  }
  auto tokens = meta.find("tokenizer.ggml.tokens");
  if (tokens == meta.end() || tokens->second.array_len == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF file '", path,
                     "' has no vocabulary (tokenizer.ggml.tokens is missing or empty, "
                     "tokenizer.ggml.model = ",
                     name, ")"));
  }
  return GgufTokenizer{name, tokens->second.array_len};
}

}  // namespace

absl::StatusOr<GgufModelShape> ReadGgufShape(const std::string& path) {
  auto meta = ReadMetadataFile(path);
  if (!meta.ok()) return meta.status();
  return ShapeOf(*meta, path);
}

absl::StatusOr<GgufTokenizer> ReadGgufTokenizer(const std::string& path) {
  auto meta = ReadMetadataFile(path);
  if (!meta.ok()) return meta.status();
  return TokenizerOf(*meta, path);
}

absl::Status CheckGgufBytes(std::string_view bytes, const std::string& name) {
  std::istringstream in{std::string(bytes)};
  auto meta = ReadMetadata(in, name);
  if (!meta.ok()) return meta.status();
  auto shape = ShapeOf(*meta, name);
  auto tok = TokenizerOf(*meta, name);
  if (!shape.ok()) return shape.status();
  if (!tok.ok()) return tok.status();
  return absl::OkStatus();
}

}  // namespace kvt::cli
