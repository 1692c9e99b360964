// Unit tests of the CLI's pure parts: token files, sizes, durations, formatting, GGUF.
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "cli_common.h"
#include "gguf_shape.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prompt_file.h"
#include "server_namespace.h"

namespace kvt::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(TokenFileTest, AcceptsSpacesNewlinesCommasAndBrackets) {
  auto a = ParseTokenIds("1 2\n3,4 ,5\r\n", "f");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(*a, ElementsAre(1, 2, 3, 4, 5));
  auto b = ParseTokenIds("[128000, 9906, 1917]\n", "f");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_THAT(*b, ElementsAre(128000, 9906, 1917));
}

TEST(TokenFileTest, RejectsNonIntegersNegativesOverflowAndEmpty) {
  auto a = ParseTokenIds("1 2\nx3", "toks.txt");
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(a.status().message()),
              HasSubstr("bad token file toks.txt: item 3 ('x3' on line 2)"));
  EXPECT_FALSE(ParseTokenIds("-1", "f").ok());
  EXPECT_FALSE(ParseTokenIds("2147483648", "f").ok());
  EXPECT_TRUE(ParseTokenIds("2147483647", "f").ok());
  EXPECT_FALSE(ParseTokenIds("1.5", "f").ok());
  EXPECT_THAT(std::string(ParseTokenIds(" \n ", "f").status().message()),
              HasSubstr("no token ids"));
  EXPECT_FALSE(ParseTokenIds("[1, 2", "f").ok());
  EXPECT_FALSE(ParseTokenIds("[1] 2", "f").ok());
}

TEST(CliParseTest, DurationsAndNames) {
  EXPECT_EQ(*ParseDurationMs("90s"), 90000);
  EXPECT_EQ(*ParseDurationMs("2h"), 7200000);
  EXPECT_EQ(*ParseDurationMs("7d"), 604800000);
  EXPECT_EQ(*ParseDurationMs("250ms"), 250);
  EXPECT_FALSE(ParseDurationMs("10").ok());  // a unit is required
  EXPECT_EQ(*ParseDType("bfloat16"), DType::kBF16);
  EXPECT_EQ(*ParseLayoutKind("llamacpp"), LayoutKind::kLlamaCppRows);
  EXPECT_EQ(*ParseLayoutKind("flash_attn_hnd"), LayoutKind::kFlashAttnHND);
  EXPECT_FALSE(ParseDType("q4").ok());
}

TEST(CliFormatTest, CommasAndHumanBytes) {
  EXPECT_EQ(WithCommas(0), "0");
  EXPECT_EQ(WithCommas(131072), "131,072");
  EXPECT_EQ(WithCommas(1073741824), "1,073,741,824");
  EXPECT_EQ(HumanBytes(131072), "128 KiB");
  EXPECT_EQ(HumanBytes(1073741824), "1.00 GiB");
  EXPECT_EQ(HumanBytesDecimal(4294967296ull), "4.29 GB");
  EXPECT_EQ(HumanBytes(512), "512 B");
}

TEST(CliExitCodeTest, MapsStatusCodes) {
  EXPECT_EQ(ExitCodeFor(absl::OkStatus()), 0);
  EXPECT_EQ(ExitCodeFor(absl::UnavailableError("x")), 1);
  EXPECT_EQ(ExitCodeFor(absl::InvalidArgumentError("x")), 2);
  EXPECT_EQ(ExitCodeFor(absl::NotFoundError("x")), 3);
}

TEST(NamespaceFlagsTest, ResolvesToTheEngineNamespace) {
  NamespaceFlags f;
  f.model_id = "meta-llama/Meta-Llama-3-8B@main";
  f.layers = 32;
  f.kv_heads = 8;
  f.head_dim = 128;
  f.tenant = "acme";
  NamespaceParams p;
  p.model_id = f.model_id;
  p.layout = KvLayout{32, 8, 128, DType::kBF16, LayoutKind::kFlashAttnNHD};
  p.tenant = "acme";
  auto ns = f.Resolve();
  ASSERT_TRUE(ns.ok()) << ns.status();
  EXPECT_EQ(*ns, ComputeNamespace(p));
  NamespaceFlags hex;
  hex.ns_hex = ns->ToHex();
  EXPECT_EQ(*hex.Resolve(), *ns);
  NamespaceFlags none;
  EXPECT_EQ(none.Resolve().status().code(), absl::StatusCode::kInvalidArgument);
  f.tp_rank = 1;  // tp_rank >= tp_size
  EXPECT_EQ(f.Resolve().status().code(), absl::StatusCode::kInvalidArgument);
}

// Writes a GGUF v3 header with the given metadata.
class GgufWriter {
 public:
  explicit GgufWriter(const std::string& path) : o_(path, std::ios::binary) {}
  void Header(uint64_t kvs) {
    o_.write("GGUF", 4);
    U32(3);
    U64(0);
    U64(kvs);
  }
  void Str(const std::string& s) {
    U64(s.size());
    o_.write(s.data(), static_cast<std::streamsize>(s.size()));
  }
  void KvStr(const std::string& k, const std::string& v) {
    Str(k);
    U32(8);
    Str(v);
  }
  void KvU32(const std::string& k, uint32_t v) {
    Str(k);
    U32(4);
    U32(v);
  }
  void KvI32Array(const std::string& k, const std::vector<int32_t>& v) {
    Str(k);
    U32(9);
    U32(5);
    U64(v.size());
    for (int32_t x : v) o_.write(reinterpret_cast<const char*>(&x), 4);
  }
  void KvStrArray(const std::string& k, const std::vector<std::string>& v) {
    Str(k);
    U32(9);
    U32(8);
    U64(v.size());
    for (const auto& s : v) Str(s);
  }
  void U32(uint32_t v) { o_.write(reinterpret_cast<const char*>(&v), 4); }
  void U64(uint64_t v) { o_.write(reinterpret_cast<const char*>(&v), 8); }

 private:
  std::ofstream o_;
};

// A directory of this process's own under gtest's TempDir() (so concurrent runs do not
// share file names), removed with its files when the process exits.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = ::testing::TempDir() + "/kvtier-cli-lib-XXXXXX";
    path_ = ::mkdtemp(tmpl.data()) != nullptr ? tmpl : ::testing::TempDir();
  }
  ~ScratchDir() {
    std::error_code ec;
    if (path_ != ::testing::TempDir()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string TmpPath(const std::string& name) {
  static const ScratchDir dir;
  return dir.path() + "/" + name;
}

TEST(GgufShapeTest, PerLayerKvHeadsAndSkippedArrays) {
  const std::string path = TmpPath("perlayer.gguf");
  {
    GgufWriter w(path);
    w.Header(6);
    w.KvStr("general.architecture", "gemma");
    w.KvStrArray("tokenizer.ggml.tokens", {"a", "bb", "ccc"});
    w.KvU32("gemma.block_count", 3);
    w.KvU32("gemma.attention.head_count", 8);
    w.KvI32Array("gemma.attention.head_count_kv", {4, 2, 4});
    w.KvU32("gemma.attention.key_length", 256);
  }
  auto s = ReadGgufShape(path);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->architecture, "gemma");
  EXPECT_EQ(s->num_layers, 3u);
  EXPECT_EQ(s->num_kv_heads, 4u);
  EXPECT_EQ(s->head_dim, 256u);
  ASSERT_EQ(s->notes.size(), 1u);
  EXPECT_THAT(s->notes[0], HasSubstr("vary per layer"));
}

TEST(GgufShapeTest, MlaLatentIsLoraRankPlusRopeDims) {
  const std::string path = TmpPath("mla.gguf");
  {
    GgufWriter w(path);
    w.Header(5);
    w.KvStr("general.architecture", "deepseek2");
    w.KvU32("deepseek2.block_count", 61);
    w.KvU32("deepseek2.attention.head_count", 128);
    w.KvU32("deepseek2.attention.kv_lora_rank", 512);
    w.KvU32("deepseek2.rope.dimension_count", 64);
  }
  auto s = ReadGgufShape(path);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->mla);
  EXPECT_EQ(s->num_kv_heads, 1u);
  EXPECT_EQ(s->head_dim, 576u);
}

TEST(GgufShapeTest, TruncatedAndMissingKeysAreInvalidArgument) {
  const std::string path = TmpPath("trunc.gguf");
  {
    GgufWriter w(path);
    w.Header(3);
    w.KvStr("general.architecture", "llama");
  }
  auto s = ReadGgufShape(path);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("truncated"));
  const std::string path2 = TmpPath("nokeys.gguf");
  {
    GgufWriter w(path2);
    w.Header(1);
    w.KvStr("general.architecture", "llama");
  }
  auto s2 = ReadGgufShape(path2);
  EXPECT_THAT(std::string(s2.status().message()), HasSubstr("no integer llama.block_count"));
  const std::string path3 = TmpPath("v1.gguf");
  {
    GgufWriter w(path3);
    w.U32(0x46554747);  // "GGUF"
    w.U32(1);
  }
  EXPECT_THAT(std::string(ReadGgufShape(path3).status().message()), HasSubstr("version 1"));
}

TEST(GgufTokenizerTest, NoTokenizerIsInvalidArgumentNamingTheFile) {
  // kvtier-make-gguf --no-vocab writes tokenizer.ggml.model = none: llama.cpp loads such a
  // file and then aborts in llama_tokenize, so the CLI must refuse it first.
  const std::string none = TmpPath("ids-only.gguf");
  {
    GgufWriter w(none);
    w.Header(2);
    w.KvStr("general.architecture", "llama");
    w.KvStr("tokenizer.ggml.model", "none");
  }
  auto t = ReadGgufTokenizer(none);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()),
              HasSubstr("GGUF file '" + none + "' has no tokenizer (tokenizer.ggml.model = none)"));
  const std::string missing = TmpPath("no-model.gguf");
  {
    GgufWriter w(missing);
    w.Header(1);
    w.KvStr("general.architecture", "llama");
  }
  EXPECT_THAT(std::string(ReadGgufTokenizer(missing).status().message()),
              HasSubstr("has no tokenizer (no tokenizer.ggml.model)"));
  const std::string good = TmpPath("vocab.gguf");
  {
    GgufWriter w(good);
    w.Header(3);
    w.KvStr("general.architecture", "llama");
    w.KvStr("tokenizer.ggml.model", "llama");
    w.KvStrArray("tokenizer.ggml.tokens", {"<s>", "</s>", "a"});
  }
  auto ok = ReadGgufTokenizer(good);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->model, "llama");
  EXPECT_EQ(ok->vocab_size, 3u);
  EXPECT_THAT(std::string(ReadGgufTokenizer(TmpPath("absent.gguf")).status().message()),
              HasSubstr("cannot open"));
}

TEST(ServerNamespaceTest, ParsesKvtierLlamaServersStatus) {
  // The body of GET /kvtier as ServerKvtier::StatusJson writes it (trimmed).
  const std::string body = R"({"enabled":true,"state":"ready","tiers":["host","remote"],)"
                           R"("namespace":"0123456789abcdef0123456789abcdef","chunk_tokens":256,)"
                           R"("bytes_per_token":36864,"requests":3,"hits":1})";
  auto s = ParseServerStatus(body, "http://127.0.0.1:8081");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->ns.ToHex(), "0123456789abcdef0123456789abcdef");
  EXPECT_EQ(s->chunk_tokens, 256u);
  EXPECT_EQ(s->bytes_per_token, 36864u);
  auto loading = ParseServerStatus(R"({"enabled":false,"state":"loading","tiers":[]})", "u");
  EXPECT_EQ(loading.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(loading.status().message()), HasSubstr("'loading'"));
  EXPECT_EQ(ParseServerStatus("<html>", "u").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseServerStatus(R"({"namespace":"xyz","chunk_tokens":256})", "u").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(FetchServerNamespace("https://h:1", 1000).status().message()),
              HasSubstr("expected http://host:port"));
  EXPECT_THAT(std::string(FetchServerNamespace("http://h", 1000).status().message()),
              HasSubstr("no port"));
}

TEST(CliParseTest, TheClusterTierIsCalledRemote) {
  EXPECT_EQ(*ParseTierKind("remote"), TierKind::kRemote);
  auto c = ParseTierKind("cluster");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("cluster tier is called 'remote'"));
}

}  // namespace
}  // namespace kvt::cli
