// Reading a prompt for `kvtier inspect` / `kvtier evict --prefix`: a file of token ids
// (integers separated by whitespace and/or commas; an optional surrounding [ ] is
// accepted so a JSON array works too), or a text file tokenized by a GGUF model's
// vocabulary when this build has llama.cpp (KVT_CLI_HAVE_LLAMA).
#ifndef KVTIER_CLI_PROMPT_FILE_H_
#define KVTIER_CLI_PROMPT_FILE_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kvstore/chunk_key.h"

namespace kvt::cli {

// Parses token ids from `text`. InvalidArgument naming the offending item (its index,
// line and text) for anything that is not an integer in [0, 2^31); for an empty list.
// `source` names the file in messages.
absl::StatusOr<std::vector<TokenId>> ParseTokenIds(std::string_view text, std::string_view source);

// Reads and parses a token id file. InvalidArgument when it cannot be read or parsed.
absl::StatusOr<std::vector<TokenId>> ReadTokenFile(const std::string& path);

// Tokenizes the UTF-8 text of `text_path` with the vocabulary of the GGUF model at
// `gguf_path` (llama.cpp, vocab only; BOS added per the model's metadata when
// `add_special`). Unimplemented when this build has no llama.cpp; InvalidArgument for
// unreadable files.
absl::StatusOr<std::vector<TokenId>> TokenizeTextFile(const std::string& text_path,
                                                      const std::string& gguf_path,
                                                      bool add_special);

// Whether TokenizeTextFile is available in this build.
bool HaveTokenizer();

}  // namespace kvt::cli

#endif  // KVTIER_CLI_PROMPT_FILE_H_
