// Unit tests of the llama.cpp sequence-state parser, slicer and builder on synthetic
// blobs (no engine needed).
#include "llamacpp/seq_state.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace kvt::llamacpp {
namespace {

SeqStateSpec Spec(bool v_trans) {
  SeqStateSpec s;
  s.n_layer = 3;
  s.type_k = 1;  // GGML_TYPE_F16
  s.type_v = 1;
  s.k_row_bytes = 8 * 2;  // 8 f16 elements
  s.v_row_bytes = 8 * 2;
  s.n_embd_v_gqa = 8;
  s.v_elem_bytes = 2;
  s.v_trans = v_trans;
  return s;
}

// Payload whose every byte encodes (token, layer, plane, byte-in-row) so misplacement shows.
std::vector<std::byte> PatternPayload(const SeqStateSpec& spec, uint32_t first, uint32_t count) {
  std::vector<std::byte> p(uint64_t{count} * spec.payload_bytes_per_token());
  size_t i = 0;
  for (uint32_t l = 0; l < spec.total_layers(); ++l) {
    for (int plane = 0; plane < 2; ++plane) {
      const uint64_t row = plane == 0 ? spec.k_row_bytes : spec.v_row_bytes;
      for (uint32_t t = 0; t < count; ++t) {
        for (uint64_t b = 0; b < row; ++b) {
          p[i++] = static_cast<std::byte>(((first + t) * 7 + l * 31 + plane * 101 + b * 13) & 0xff);
        }
      }
    }
  }
  return p;
}

// Token ids of a synthetic prompt: cell i holds token 100 + i.
std::vector<int32_t> PromptTokens(uint32_t n) {
  std::vector<int32_t> t(n);
  for (uint32_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>(100 + i);
  return t;
}

std::vector<std::byte> BuildBlob(const SeqStateSpec& spec, uint32_t cells) {
  auto b = SeqStateBuilder::Create(spec, cells, 0, {}, PromptTokens(cells));
  EXPECT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(b->PutChunk(0, cells, PatternPayload(spec, 0, cells)).ok());
  return std::move(*b).TakeBlob();
}

class SeqStateTest : public ::testing::TestWithParam<bool> {};

TEST_P(SeqStateTest, SliceOfBuiltBlobReturnsSamePayload) {
  const SeqStateSpec spec = Spec(GetParam());
  const std::vector<std::byte> blob = BuildBlob(spec, 20);
  ASSERT_EQ(blob.size(), SeqStateBytes(spec, 20));
  auto view = ParseSeqState(blob, spec);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->cell_count, 20u);
  std::vector<std::byte> out(5 * spec.payload_bytes_per_token());
  ASSERT_TRUE(ExtractChunkPayload(*view, 10, 5, out).ok());
  EXPECT_EQ(out, PatternPayload(spec, 10, 5));
}

TEST_P(SeqStateTest, ChunksReassembleToSameBlobAsWholePrefix) {
  const SeqStateSpec spec = Spec(GetParam());
  const std::vector<std::byte> whole = BuildBlob(spec, 12);
  auto b = SeqStateBuilder::Create(spec, 12);
  ASSERT_TRUE(b.ok());
  for (uint32_t c = 0; c < 3; ++c) {
    ASSERT_TRUE(b->PutChunk(c * 4, 4, PatternPayload(spec, c * 4, 4)).ok());
  }
  EXPECT_EQ(std::vector<std::byte>(b->blob().begin(), b->blob().end()), whole);
  // Truncated(8) == a blob built for 8 cells directly.
  auto t = b->Truncated(8);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, BuildBlob(spec, 8));
}

// kvtier-llama-server builds every restore in the blob of the one before (no allocation,
// no page faults). A recycled blob, larger or smaller and full of other bytes, must give
// exactly the blob a fresh build gives, in the same memory.
TEST_P(SeqStateTest, RecycledStorageBuildsTheSameBlobWithoutAllocating) {
  const SeqStateSpec spec = Spec(GetParam());
  for (uint32_t cells : {12u, 5u, 12u}) {
    std::vector<std::byte> storage(SeqStateBytes(spec, 12), std::byte{0xAB});
    storage.resize(SeqStateBytes(spec, cells == 12 ? 5 : 12) / 2);  // other size, old bytes
    const std::byte* memory = storage.data();
    auto b = SeqStateBuilder::Create(spec, cells, 0, std::move(storage));
    ASSERT_TRUE(b.ok()) << b.status();
    for (uint32_t first = 0; first < cells; first += 4) {
      const uint32_t n = std::min(4u, cells - first);
      ASSERT_TRUE(b->PutChunk(first, n, PatternPayload(spec, first, n)).ok());
    }
    EXPECT_EQ(b->blob().data(), memory) << "the recycled storage was reallocated";
    EXPECT_EQ(std::vector<std::byte>(b->blob().begin(), b->blob().end()), BuildBlob(spec, cells));
    EXPECT_TRUE(ParseSeqState(b->blob(), spec).ok());
  }
  // The server's chain: each build in the storage of the one before, a shorter state in
  // a larger buffer (no zeroing), then a longer one again; TakeBlob is exactly the blob.
  std::vector<std::byte> storage;
  for (uint32_t cells : {12u, 5u, 12u, 3u}) {
    auto b = SeqStateBuilder::Create(spec, cells, 0, std::move(storage));
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_TRUE(b->PutChunk(0, cells, PatternPayload(spec, 0, cells)).ok());
    EXPECT_EQ(std::vector<std::byte>(b->blob().begin(), b->blob().end()), BuildBlob(spec, cells));
    storage = std::move(*b).TakeStorage();
    EXPECT_GE(storage.size(), SeqStateBytes(spec, 12));
  }
  auto exact = SeqStateBuilder::Create(spec, 5, 0, std::move(storage));
  ASSERT_TRUE(exact.ok());
  ASSERT_TRUE(exact->PutChunk(0, 5, PatternPayload(spec, 0, 5)).ok());
  EXPECT_EQ(std::move(*exact).TakeBlob(), BuildBlob(spec, 5));
  // Too small a buffer is replaced by a fresh, zeroed one.
  auto small = SeqStateBuilder::Create(spec, 12, 0, std::vector<std::byte>(3, std::byte{0xAB}));
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->blob().size(), SeqStateBytes(spec, 12));
  EXPECT_EQ(small->blob().back(), std::byte{0});
}

TEST_P(SeqStateTest, RejectsMalformedBlobsNamingTheField) {
  const SeqStateSpec spec = Spec(GetParam());
  const std::vector<std::byte> good = BuildBlob(spec, 6);

  auto code_and_msg = [&](std::vector<std::byte> blob) {
    auto v = ParseSeqState(blob, spec);
    return v.ok() ? absl::OkStatus() : v.status();
  };
  // Truncated by one byte.
  {
    auto s = code_and_msg(std::vector<std::byte>(good.begin(), good.end() - 1));
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(s.message().find("truncated"), std::string_view::npos) << s;
  }
  // Extra byte.
  {
    auto blob = good;
    blob.push_back(std::byte{0});
    auto s = code_and_msg(blob);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(s.message().find("left over"), std::string_view::npos) << s;
  }
  // Wrong magic.
  {
    auto blob = good;
    blob[0] ^= std::byte{1};
    auto s = code_and_msg(blob);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(s.message().find("magic"), std::string_view::npos) << s;
  }
  // n_stream = 2.
  {
    auto blob = good;
    const uint32_t two = 2;
    std::memcpy(blob.data() + 8, &two, 4);
    auto s = code_and_msg(blob);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(s.message().find("n_stream"), std::string_view::npos) << s;
  }
  // Cell 3 position not contiguous.
  {
    auto blob = good;
    const int32_t pos = 7;
    std::memcpy(blob.data() + 16 + 3 * 12, &pos, 4);
    auto s = code_and_msg(blob);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(s.message().find("cell[3].pos"), std::string_view::npos) << s;
  }
  // n_seq_id of cell 0 = 2.
  {
    auto blob = good;
    const uint32_t two = 2;
    std::memcpy(blob.data() + 16 + 4, &two, 4);
    auto s = code_and_msg(blob);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(s.message().find("n_seq_id"), std::string_view::npos) << s;
  }
  const size_t after_cells = 16 + 6 * 12;
  // v_trans flipped: a mismatch with this engine.
  {
    auto blob = good;
    const uint32_t vt = GetParam() ? 0 : 1;
    std::memcpy(blob.data() + after_cells, &vt, 4);
    auto s = code_and_msg(blob);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("v_trans"), std::string_view::npos) << s;
  }
  // n_layer differs.
  {
    auto blob = good;
    const uint32_t nl = 4;
    std::memcpy(blob.data() + after_cells + 4, &nl, 4);
    auto s = code_and_msg(blob);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("n_layer"), std::string_view::npos) << s;
  }
  // Layer 0 k_type differs (f32 = 0).
  {
    auto blob = good;
    const int32_t t = 0;
    std::memcpy(blob.data() + after_cells + 8, &t, 4);
    auto s = code_and_msg(blob);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("layer[0].k_type"), std::string_view::npos) << s;
  }
  // Layer 0 k_row_bytes differs.
  {
    auto blob = good;
    const uint64_t rb = 32;
    std::memcpy(blob.data() + after_cells + 12, &rb, 8);
    auto s = code_and_msg(blob);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("layer[0].k_row_bytes"), std::string_view::npos) << s;
  }
  // Empty sequence.
  {
    std::vector<std::byte> blob(good.begin(), good.begin() + 16);
    const uint32_t zero = 0;
    std::memcpy(blob.data() + 12, &zero, 4);
    auto s = code_and_msg(blob);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(s.message().find("cell_count"), std::string_view::npos) << s;
  }
  // Nothing at all.
  EXPECT_EQ(code_and_msg({}).code(), absl::StatusCode::kDataLoss);
}

TEST_P(SeqStateTest, InferSpecReadsTheHeaders) {
  const SeqStateSpec spec = Spec(GetParam());
  auto inferred = InferSeqStateSpec(BuildBlob(spec, 3));
  ASSERT_TRUE(inferred.ok()) << inferred.status();
  EXPECT_EQ(inferred->n_layer, 3u);
  EXPECT_EQ(inferred->k_row_bytes, 16u);
  EXPECT_EQ(inferred->v_row_bytes, 16u);
  EXPECT_EQ(inferred->v_trans, GetParam());
}

TEST_P(SeqStateTest, OutOfRangeSliceAndWrongPayloadSize) {
  const SeqStateSpec spec = Spec(GetParam());
  const std::vector<std::byte> blob = BuildBlob(spec, 4);
  auto view = ParseSeqState(blob, spec);
  ASSERT_TRUE(view.ok());
  std::vector<std::byte> out(2 * spec.payload_bytes_per_token());
  EXPECT_EQ(ExtractChunkPayload(*view, 3, 2, out).code(), absl::StatusCode::kOutOfRange);
  std::vector<std::byte> small(spec.payload_bytes_per_token());
  EXPECT_EQ(ExtractChunkPayload(*view, 0, 2, small).code(), absl::StatusCode::kInvalidArgument);
  auto b = SeqStateBuilder::Create(spec, 4);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->PutChunk(2, 4, PatternPayload(spec, 2, 4)).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(SeqStateBuilder::Create(spec, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

// Found by tests/fuzz/fuzz_seq_state: 3 cells of V rows of (2^64 + 2) / 3 bytes multiply
// to 2 (mod 2^64), so a 2-byte V section used to pass the length check and a blob of 89
// bytes was accepted with rows of 6e18 bytes (slicing one token then read far out of
// bounds). It must be refused as DataLoss naming the field.
TEST(SeqStateOverflowTest, RowSizesWhoseProductOverflowsAreRefused) {
  std::vector<std::byte> blob;
  auto put = [&blob](auto v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    blob.insert(blob.end(), p, p + sizeof(v));
  };
  put(kSeqStateMagic);
  put(int32_t{0});
  put(uint32_t{1});  // n_stream
  put(uint32_t{3});  // cell_count
  for (int32_t i = 0; i < 3; ++i) {
    put(i);
    put(uint32_t{1});
    put(int32_t{0});
  }
  put(uint32_t{0});  // v_trans
  put(uint32_t{1});  // n_layer
  put(int32_t{1});
  put(uint64_t{1});  // k_row_bytes
  for (int i = 0; i < 3; ++i) blob.push_back(std::byte{1});
  put(int32_t{1});
  const uint64_t v_row = 6148914691236517206ull;  // (2^64 + 2) / 3
  put(v_row);
  blob.push_back(std::byte{2});
  blob.push_back(std::byte{3});
  ASSERT_EQ(blob.size(), 89u);

  auto inferred = InferSeqStateSpec(blob);
  ASSERT_FALSE(inferred.ok());
  EXPECT_EQ(inferred.status().code(), absl::StatusCode::kDataLoss) << inferred.status();
  EXPECT_NE(inferred.status().message().find("v_data"), std::string_view::npos)
      << inferred.status();

  SeqStateSpec spec;
  spec.n_layer = 1;
  spec.type_k = 1;
  spec.type_v = 1;
  spec.k_row_bytes = 1;
  spec.v_row_bytes = v_row;
  spec.n_embd_v_gqa = static_cast<uint32_t>(v_row);
  spec.v_elem_bytes = 1;
  auto view = ParseSeqState(blob, spec);
  ASSERT_FALSE(view.ok());
  EXPECT_EQ(view.status().code(), absl::StatusCode::kDataLoss) << view.status();
}

// An iSWA cache: the full-attention section, then the sliding-window section with the
// same cells (every token: a full-size SWA cache). Payload layers: first section's, then
// the second's.
SeqStateSpec IswaSpec(bool v_trans) {
  SeqStateSpec s = Spec(v_trans);
  s.n_layer = 2;
  s.n_layer_swa = 3;
  return s;
}

TEST_P(SeqStateTest, TwoSectionsSliceReassembleAndInfer) {
  const SeqStateSpec spec = IswaSpec(GetParam());
  EXPECT_EQ(spec.payload_bytes_per_token(), 5u * 32);
  const std::vector<std::byte> blob = BuildBlob(spec, 9);
  ASSERT_EQ(blob.size(), SeqStateBytes(spec, 9));
  // One section more than the plain cache of the same 5 layers: its header and cells.
  SeqStateSpec plain = Spec(GetParam());
  plain.n_layer = 5;
  EXPECT_EQ(blob.size(), SeqStateBytes(plain, 9) + 16 + 9 * 12);
  auto view = ParseSeqState(blob, spec);
  ASSERT_TRUE(view.ok()) << view.status();
  std::vector<std::byte> out(4 * spec.payload_bytes_per_token());
  ASSERT_TRUE(ExtractChunkPayload(*view, 3, 4, out).ok());
  EXPECT_EQ(out, PatternPayload(spec, 3, 4));
  auto inferred = InferSeqStateSpec(blob);
  ASSERT_TRUE(inferred.ok()) << inferred.status();
  EXPECT_EQ(inferred->n_layer, 2u);
  EXPECT_EQ(inferred->n_layer_swa, 3u);
  // Read as a plain cache it has bytes left over; as another split, a layer count differs.
  EXPECT_EQ(ParseSeqState(blob, Spec(GetParam())).status().code(),
            absl::StatusCode::kFailedPrecondition);
  SeqStateSpec two = spec;
  two.n_layer = 2;
  two.n_layer_swa = 0;
  EXPECT_EQ(ParseSeqState(blob, two).status().code(), absl::StatusCode::kDataLoss);
  auto t = SeqStateBuilder::Create(spec, 9);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(t->PutChunk(0, 9, PatternPayload(spec, 0, 9)).ok());
  auto truncated = t->Truncated(4);
  ASSERT_TRUE(truncated.ok()) << truncated.status();
  EXPECT_EQ(*truncated, BuildBlob(spec, 4));
}

// llama_state_seq_get_data of an iSWA cache writes only the window in the second section:
// fewer cells than the first. kvtier cannot cut that per token and refuses it by name.
TEST_P(SeqStateTest, SecondSectionWithOtherCellsIsRefused) {
  const SeqStateSpec spec = IswaSpec(GetParam());
  SeqStateSpec first = spec;
  first.n_layer_swa = 0;
  SeqStateSpec second = spec;
  second.n_layer = 3;
  second.n_layer_swa = 0;
  const std::vector<std::byte> a = BuildBlob(first, 6);
  const std::vector<std::byte> b = BuildBlob(second, 4);  // the window: 4 of 6 tokens
  std::vector<std::byte> blob = a;
  blob.insert(blob.end(), b.begin() + 8, b.end());  // without magic and seq_id
  auto view = ParseSeqState(blob, spec);
  ASSERT_FALSE(view.ok());
  EXPECT_EQ(view.status().code(), absl::StatusCode::kFailedPrecondition) << view.status();
  EXPECT_NE(view.status().message().find("swa.cell_count"), std::string_view::npos)
      << view.status();
  EXPECT_FALSE(InferSeqStateSpec(blob).ok());
}

// A whole-context state (llama_state_get_data): every cell of every sequence, in cell
// order, with their sequence ids; each section in its own order and streams.
struct ContextCell {
  int32_t pos;
  std::vector<int32_t> seqs;
  uint32_t stream = 0;
  // With spec.cell_ext: false writes a text cell's record (x = y = pos, tok = 100 + pos),
  // true an image embedding's (x = pos + 1, tok -1).
  bool image = false;
};

std::byte CellByte(int32_t pos, uint32_t layer, int plane, uint64_t b, int32_t seq) {
  // Seq 0 matches PatternPayload's bytes of token `pos`.
  return static_cast<std::byte>((pos * 7 + layer * 31 + plane * 101 + b * 13 + seq * 57) & 0xff);
}

std::vector<std::byte> ContextState(const SeqStateSpec& spec, uint32_t n_stream,
                                    const std::vector<ContextCell> (&sections)[2]) {
  std::vector<std::byte> out;
  auto put = [&out](auto v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    out.insert(out.end(), p, p + sizeof(v));
  };
  put(uint32_t{6});
  for (char c : std::string("gemma3")) out.push_back(static_cast<std::byte>(c));
  for (int sec = 0; sec < 2; ++sec) {
    const uint32_t layer0 = sec == 0 ? 0 : spec.n_layer;
    const uint32_t n_layer = sec == 0 ? spec.n_layer : spec.n_layer_swa;
    put(n_stream);
    for (uint32_t s = 0; s < n_stream; ++s) {
      std::vector<ContextCell> cells;
      for (const ContextCell& c : sections[sec]) {
        if (c.stream == s) cells.push_back(c);
      }
      put(static_cast<uint32_t>(cells.size()));
      if (cells.empty()) continue;
      for (const ContextCell& c : cells) {
        put(c.pos);
        put(static_cast<uint32_t>(c.seqs.size()));
        if (spec.cell_ext) {
          put(c.image ? c.pos + 1 : c.pos);
          put(c.pos);
          put(c.image ? int32_t{-1} : 100 + c.pos);
        }
        for (int32_t id : c.seqs) put(id);
      }
      put(uint32_t{spec.v_trans ? 1u : 0u});
      put(n_layer);
      for (uint32_t l = layer0; l < layer0 + n_layer; ++l) {
        put(spec.type_k);
        put(spec.k_row_bytes);
        for (const ContextCell& c : cells) {
          for (uint64_t b = 0; b < spec.k_row_bytes; ++b)
            out.push_back(CellByte(c.pos, l, 0, b, c.seqs[0]));
        }
      }
      for (uint32_t l = layer0; l < layer0 + n_layer; ++l) {
        put(spec.type_v);
        if (!spec.v_trans) {
          put(spec.v_row_bytes);
          for (const ContextCell& c : cells) {
            for (uint64_t b = 0; b < spec.v_row_bytes; ++b)
              out.push_back(CellByte(c.pos, l, 1, b, c.seqs[0]));
          }
        } else {
          put(spec.v_elem_bytes);
          put(spec.n_embd_v_gqa);
          for (uint32_t j = 0; j < spec.n_embd_v_gqa; ++j) {
            for (const ContextCell& c : cells) {
              for (uint32_t e = 0; e < spec.v_elem_bytes; ++e)
                out.push_back(CellByte(c.pos, l, 1, j * spec.v_elem_bytes + e, c.seqs[0]));
            }
          }
        }
      }
    }
  }
  return out;
}

TEST_P(SeqStateTest, SequenceCutFromTheWholeContextState) {
  const SeqStateSpec spec = IswaSpec(GetParam());
  // Seq 0 holds positions 0..4 in the first section (two streams, any cell order, one cell
  // shared with seq 1); the second section lost position 4 (a cell reused by seq 1).
  const std::vector<ContextCell> sections[2] = {
      {{2, {0}, 0}, {5, {1}, 0}, {0, {0}, 0}, {3, {0}, 1}, {1, {0}, 1}, {4, {0}, 0}},
      {{3, {0}}, {1, {0}}, {9, {1}}, {0, {0}}, {2, {0}}, {4, {1}}}};
  const std::vector<std::byte> state = ContextState(spec, 2, sections);
  auto blob = SeqStateFromContextState(state, 0, spec);
  ASSERT_TRUE(blob.ok()) << blob.status();
  EXPECT_EQ(*blob, BuildBlob(spec, 4));  // tokens 0..3, seq 0's rows only
  // Seq 1 has no position 0 in the first section.
  EXPECT_EQ(SeqStateFromContextState(state, 1, spec).status().code(), absl::StatusCode::kDataLoss);
  // Two cells claiming one position; a truncated state; another layer split.
  const std::vector<ContextCell> twice[2] = {{{0, {0}}, {0, {0}}}, {{0, {0}}}};
  EXPECT_EQ(SeqStateFromContextState(ContextState(spec, 1, twice), 0, spec).status().code(),
            absl::StatusCode::kDataLoss);
  std::vector<std::byte> cut(state.begin(), state.end() - 3);
  EXPECT_EQ(SeqStateFromContextState(cut, 0, spec).status().code(), absl::StatusCode::kDataLoss);
  SeqStateSpec other = spec;
  other.n_layer = 3;
  other.n_layer_swa = 2;
  EXPECT_EQ(SeqStateFromContextState(state, 0, other).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// M-RoPE cells (llama_kv_cell_ext after n_seq_id: i32 x, i32 y, i32 tok).
SeqStateSpec MropeSpec(bool v_trans) {
  SeqStateSpec s = Spec(v_trans);
  s.cell_ext = true;
  return s;
}

struct CellRecord {
  int32_t pos;
  uint32_t n_seq_id;
  int32_t x, y, tok, seq_id;
};
// Cell i of a one-section blob: after magic, seq_id, n_stream, cell_count.
CellRecord ReadCell(const std::vector<std::byte>& blob, uint32_t i) {
  CellRecord c;
  std::memcpy(&c, blob.data() + 16 + 24 * i, sizeof c);
  return c;
}
void WriteCell(std::vector<std::byte>& blob, uint32_t i, const CellRecord& c) {
  std::memcpy(blob.data() + 16 + 24 * i, &c, sizeof c);
}

TEST_P(SeqStateTest, MropeCellsAreWrittenAsTextTokensAndReadBack) {
  const SeqStateSpec spec = MropeSpec(GetParam());
  SeqStateSpec plain = spec;
  plain.cell_ext = false;
  EXPECT_EQ(SeqStateBytes(spec, 12), SeqStateBytes(plain, 12) + 12 * 12);
  // The ext record needs each cell's token id.
  EXPECT_EQ(SeqStateBuilder::Create(spec, 12).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SeqStateBuilder::Create(spec, 12, 0, {}, PromptTokens(11)).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<int32_t> negative = PromptTokens(12);
  negative[3] = -1;
  EXPECT_EQ(SeqStateBuilder::Create(spec, 12, 0, {}, negative).status().code(),
            absl::StatusCode::kInvalidArgument);

  const std::vector<std::byte> blob = BuildBlob(spec, 12);
  ASSERT_EQ(blob.size(), SeqStateBytes(spec, 12));
  for (uint32_t i : {0u, 5u, 11u}) {
    const CellRecord c = ReadCell(blob, i);
    EXPECT_EQ(c.pos, static_cast<int32_t>(i));
    EXPECT_EQ(c.n_seq_id, 1u);
    EXPECT_EQ(c.x, static_cast<int32_t>(i));  // the position broadcast to the 2D position
    EXPECT_EQ(c.y, static_cast<int32_t>(i));
    EXPECT_EQ(c.tok, static_cast<int32_t>(100 + i));
    EXPECT_EQ(c.seq_id, 0);
  }
  auto inferred = InferSeqStateSpec(blob);
  ASSERT_TRUE(inferred.ok()) << inferred.status();
  EXPECT_TRUE(inferred->cell_ext);
  EXPECT_EQ(inferred->n_layer, spec.n_layer);
  EXPECT_EQ(inferred->k_row_bytes, spec.k_row_bytes);
  auto inferred_plain = InferSeqStateSpec(BuildBlob(plain, 12));
  ASSERT_TRUE(inferred_plain.ok()) << inferred_plain.status();
  EXPECT_FALSE(inferred_plain->cell_ext);
  // Read as 12-byte cells the blob does not parse.
  EXPECT_FALSE(ParseSeqState(blob, plain).ok());

  auto view = ParseSeqState(blob, spec);
  ASSERT_TRUE(view.ok()) << view.status();
  const std::vector<int32_t> tokens = PromptTokens(12);
  std::vector<std::byte> out(4 * spec.payload_bytes_per_token());
  ASSERT_TRUE(ExtractChunkPayload(*view, 4, 4, out, std::span(tokens).subspan(4, 4)).ok());
  EXPECT_EQ(out, PatternPayload(spec, 4, 4));
  // Another prompt's tokens: the cells are not theirs.
  const std::vector<int32_t> other(4, 7);
  EXPECT_EQ(ExtractChunkPayload(*view, 4, 4, out, other).code(),
            absl::StatusCode::kFailedPrecondition);
  // Truncated keeps the cells' token ids.
  auto b = SeqStateBuilder::Create(spec, 12, 0, {}, tokens);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(b->PutChunk(0, 12, PatternPayload(spec, 0, 12)).ok());
  auto t = b->Truncated(8);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, BuildBlob(spec, 8));
}

TEST_P(SeqStateTest, ChunkWithANonTextMropeCellIsNeverCut) {
  const SeqStateSpec spec = MropeSpec(GetParam());
  std::vector<std::byte> blob = BuildBlob(spec, 12);
  // Cell 5: an embedding input (token -1; its first patch has x = y = pos). Cell 9: an
  // image patch's 2D position.
  CellRecord c5 = ReadCell(blob, 5);
  c5.tok = -1;
  WriteCell(blob, 5, c5);
  CellRecord c9 = ReadCell(blob, 9);
  c9.x = 9 + 3;
  WriteCell(blob, 9, c9);
  auto view = ParseSeqState(blob, spec);  // well-formed: judged per chunk
  ASSERT_TRUE(view.ok()) << view.status();
  std::vector<std::byte> out(4 * spec.payload_bytes_per_token());
  EXPECT_TRUE(ExtractChunkPayload(*view, 0, 4, out).ok());
  absl::Status s = ExtractChunkPayload(*view, 4, 4, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("cell[5]"), std::string_view::npos) << s;
  s = ExtractChunkPayload(*view, 8, 4, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("cell[9]"), std::string_view::npos) << s;
  EXPECT_EQ(CheckTextCells(*view, 10, 2).code(), absl::StatusCode::kOk);
  // A load-while-compute join copies only rows: the front's cells must be the builder's.
  auto b = SeqStateBuilder::Create(spec, 12, 0, {}, PromptTokens(12));
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->CopyPrefixFrom(*view, 4).ok());
  EXPECT_EQ(b->CopyPrefixFrom(*view, 8).code(), absl::StatusCode::kFailedPrecondition);
  std::vector<int32_t> shifted = PromptTokens(12);
  shifted[0] = 1;
  auto b2 = SeqStateBuilder::Create(spec, 12, 0, {}, shifted);
  ASSERT_TRUE(b2.ok());
  EXPECT_EQ(b2->CopyPrefixFrom(*view, 4).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_P(SeqStateTest, MropeSequenceCutFromTheWholeContextStateStopsAtANonTextCell) {
  SeqStateSpec spec = IswaSpec(GetParam());
  spec.cell_ext = true;
  // Seq 0: text cells 0..5 in the first section; in the second, position 4 is an image's.
  const std::vector<ContextCell> sections[2] = {
      {{2, {0}}, {0, {0}}, {1, {0}}, {3, {0}}, {4, {0}}, {5, {0}}},
      {{0, {0}}, {1, {0}}, {2, {0}}, {3, {0}}, {4, {0}, 0, /*image=*/true}, {5, {0}}}};
  auto blob = SeqStateFromContextState(ContextState(spec, 1, sections), 0, spec);
  ASSERT_TRUE(blob.ok()) << blob.status();
  EXPECT_EQ(*blob, BuildBlob(spec, 4));  // tokens 0..3, with their text records
}

INSTANTIATE_TEST_SUITE_P(VTrans, SeqStateTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "VTransposed" : "VRows"; });

}  // namespace
}  // namespace kvt::llamacpp
