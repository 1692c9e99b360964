#include "prompt_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gguf_shape.h"
#include "spdlog/spdlog.h"

#ifdef KVT_CLI_HAVE_LLAMA
#include "llama.h"
#endif

namespace kvt::cli {

namespace {

absl::StatusOr<std::string> ReadWholeFile(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), " '", path, "': cannot open (", std::strerror(errno), ")"));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool IsSep(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ','; }

}  // namespace

absl::StatusOr<std::vector<TokenId>> ParseTokenIds(std::string_view text, std::string_view source) {
  std::vector<TokenId> out;
  size_t i = 0;
  int line = 1;
  // Optional JSON-style brackets around the whole list.
  bool opened = false;
  while (i < text.size() && IsSep(text[i])) {
    if (text[i] == '\n') ++line;
    ++i;
  }
  if (i < text.size() && text[i] == '[') {
    opened = true;
    ++i;
  }
  bool closed = false;
  while (i < text.size()) {
    if (IsSep(text[i])) {
      if (text[i] == '\n') ++line;
      ++i;
      continue;
    }
    if (closed) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad token file ", std::string(source), ": text after the closing ']' on line ", line));
    }
    if (opened && text[i] == ']') {
      closed = true;
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && !IsSep(text[j]) && !(opened && text[j] == ']')) ++j;
    const std::string_view item = text.substr(i, j - i);
    int64_t v;
    if (!absl::SimpleAtoi(std::string(item), &v) || v < 0 ||
        v > std::numeric_limits<TokenId>::max()) {
      std::string shown(item.substr(0, 40));
      return absl::InvalidArgumentError(absl::StrCat(
          "bad token file ", std::string(source), ": item ", out.size() + 1, " ('", shown,
          "' on line ", line,
          ") is not a token id (expected an integer 0..2147483647, separated by spaces, "
          "newlines or commas)"));
    }
    out.push_back(static_cast<TokenId>(v));
    i = j;
  }
  if (opened && !closed) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad token file ", std::string(source), ": missing ']'"));
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad token file ", std::string(source), ": no token ids in it"));
  }
  return out;
}

absl::StatusOr<std::vector<TokenId>> ReadTokenFile(const std::string& path) {
  auto text = ReadWholeFile(path, "token file");
  if (!text.ok()) return text.status();
  return ParseTokenIds(*text, path);
}

#ifdef KVT_CLI_HAVE_LLAMA
bool HaveTokenizer() { return true; }

// llama_tokenize takes the text's length as int32_t.
constexpr size_t kMaxTextBytes = 256u << 20;

absl::StatusOr<std::vector<TokenId>> TokenizeTextFile(const std::string& text_path,
                                                      const std::string& gguf_path,
                                                      bool add_special) {
  auto text = ReadWholeFile(text_path, "text file");
  if (!text.ok()) return text.status();
  if (text->size() > kMaxTextBytes) {
    return absl::InvalidArgumentError(absl::StrCat("text file '", text_path, "': ", text->size(),
                                                   " bytes; at most ", kMaxTextBytes));
  }
  // Checked here, not by llama.cpp: a GGUF without a tokenizer loads, then aborts the
  // process (GGML_ABORT) in llama_tokenize.
  if (auto tok = ReadGgufTokenizer(gguf_path); !tok.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--tokenizer: ", tok.status().message()));
  }
  // llama.cpp's loader prints ~50 lines per model: only with -v (spdlog info), and its
  // errors always.
  llama_log_set(
      [](ggml_log_level level, const char* text, void*) {
        if (level == GGML_LOG_LEVEL_ERROR) {
          spdlog::error("llama.cpp: {}", text);
        } else if (spdlog::should_log(spdlog::level::info)) {
          std::fputs(text, stderr);
        }
      },
      nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.vocab_only = true;
  llama_model* model = llama_model_load_from_file(gguf_path.c_str(), mp);
  if (model == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tokenizer '", gguf_path, "': llama.cpp could not load its vocabulary"));
  }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int32_t n = static_cast<int32_t>(text->size());
  std::vector<llama_token> toks(static_cast<size_t>(n) + 8);
  int32_t got =
      llama_tokenize(vocab, text->data(), n, toks.data(), static_cast<int32_t>(toks.size()),
                     add_special, /*parse_special=*/false);
  if (got < 0) {
    toks.resize(static_cast<size_t>(-got));
    got = llama_tokenize(vocab, text->data(), n, toks.data(), static_cast<int32_t>(toks.size()),
                         add_special, false);
  }
  llama_model_free(model);
  if (got <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("text file '", text_path, "': no tokens"));
  }
  toks.resize(static_cast<size_t>(got));
  return std::vector<TokenId>(toks.begin(), toks.end());
}
#else
bool HaveTokenizer() { return false; }

absl::StatusOr<std::vector<TokenId>> TokenizeTextFile(const std::string&, const std::string&,
                                                      bool) {
  return absl::UnimplementedError(
      "this kvtier was built without llama.cpp, so it cannot tokenize text; give token ids "
      "with --tokens FILE (e.g. from the engine's tokenizer) or rebuild with "
      "-DKVT_BUILD_LLAMACPP=ON");
}
#endif

}  // namespace kvt::cli
