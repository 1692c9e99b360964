#include "workload.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace kvt::llamacpp::demo {
namespace {

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("demo text '", path, "' not found"));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Message {
  std::string role;
  std::string text;
};

// chat.txt: '#' comment lines; "user:" / "assistant:" lines start a message.
std::vector<Message> ParseChat(const std::string& text) {
  std::vector<Message> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] == '#') continue;
    if (line == "user:" || line == "assistant:") {
      out.push_back({line.substr(0, line.size() - 1), ""});
    } else if (!out.empty() && !line.empty()) {
      if (!out.back().text.empty()) out.back().text += "\n";
      out.back().text += line;
    }
  }
  return out;
}

void Append(std::vector<TokenId>& dst, const std::vector<TokenId>& src) {
  dst.insert(dst.end(), src.begin(), src.end());
}

}  // namespace

absl::StatusOr<std::vector<TokenId>> TextToIds(const LlamaEngine& engine, const std::string& text,
                                               bool add_bos) {
  if (engine.has_vocab()) return engine.Tokenize(text, add_bos);
  std::vector<TokenId> ids;
  const int32_t n = engine.n_vocab();
  if (add_bos) ids.push_back(1 % n);
  for (unsigned char c : text) ids.push_back(static_cast<TokenId>((3 + c) % n));
  return ids;
}

absl::StatusOr<std::vector<Request>> BuildWorkloads(const LlamaEngine& engine,
                                                    const WorkloadOptions& options) {
  std::vector<Request> out;
  // Multi-turn chat: prompt k = system + messages up to user turn k + "assistant:".
  // Each message is tokenized on its own so a turn's ids extend the previous turn's.
  {
    absl::StatusOr<std::string> text = ReadText(options.data_dir + "/chat.txt");
    if (!text.ok()) return text.status();
    absl::StatusOr<std::vector<TokenId>> sys = TextToIds(
        engine, "system: You are a helpful, concise gardening assistant.", /*add_bos=*/true);
    if (!sys.ok()) return sys.status();
    absl::StatusOr<std::vector<TokenId>> cue = TextToIds(engine, "\nassistant:", false);
    if (!cue.ok()) return cue.status();
    std::vector<TokenId> history = *sys;
    int turn = 0;
    for (const Message& m : ParseChat(*text)) {
      absl::StatusOr<std::vector<TokenId>> ids =
          TextToIds(engine, "\n" + m.role + ": " + m.text, false);
      if (!ids.ok()) return ids.status();
      Append(history, *ids);
      if (m.role == "user") {
        Request r{"chat", ++turn, history};
        Append(r.tokens, *cue);
        out.push_back(std::move(r));
      }
    }
  }
  // Long-document QA: the same document, then different questions.
  {
    absl::StatusOr<std::string> text = ReadText(options.data_dir + "/gpl-3.0.txt");
    if (!text.ok()) return text.status();
    absl::StatusOr<std::vector<TokenId>> doc = TextToIds(engine, *text, /*add_bos=*/true);
    if (!doc.ok()) return doc.status();
    if (doc->size() > options.doc_tokens) doc->resize(options.doc_tokens);
    const char* questions[] = {
        "What freedoms does this license want to guarantee to users of free software?",
        "Under which conditions may I convey a covered work in object code form?",
        "What happens to my rights under the license if I violate its terms, and can they be "
        "reinstated?",
    };
    int q = 0;
    for (const char* question : questions) {
      absl::StatusOr<std::vector<TokenId>> ids =
          TextToIds(engine, absl::StrCat("\n\nQuestion: ", question, "\nAnswer:"), false);
      if (!ids.ok()) return ids.status();
      Request r{"doc-qa", ++q, *doc};
      Append(r.tokens, *ids);
      out.push_back(std::move(r));
    }
  }
  // No reuse: distinct slices of another text; no two share a first chunk.
  {
    absl::StatusOr<std::string> text = ReadText(options.data_dir + "/apache-2.0.txt");
    if (!text.ok()) return text.status();
    absl::StatusOr<std::vector<TokenId>> ids = TextToIds(engine, *text, false);
    if (!ids.ok()) return ids.status();
    for (size_t i = 0; i < options.no_reuse_prompts; ++i) {
      const size_t begin = i * options.no_reuse_tokens;
      if (begin + options.no_reuse_tokens > ids->size()) break;
      Request r{"no-reuse", static_cast<int>(i + 1), {}};
      absl::StatusOr<std::vector<TokenId>> bos = TextToIds(engine, "", true);
      if (!bos.ok()) return bos.status();
      r.tokens = *bos;
      r.tokens.insert(r.tokens.end(), ids->begin() + static_cast<long>(begin),
                      ids->begin() + static_cast<long>(begin + options.no_reuse_tokens));
      out.push_back(std::move(r));
    }
  }
  return out;
}

}  // namespace kvt::llamacpp::demo
