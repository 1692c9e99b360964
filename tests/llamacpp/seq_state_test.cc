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
  for (uint32_t l = 0; l < spec.n_layer; ++l) {
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

std::vector<std::byte> BuildBlob(const SeqStateSpec& spec, uint32_t cells) {
  auto b = SeqStateBuilder::Create(spec, cells);
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

INSTANTIATE_TEST_SUITE_P(VTrans, SeqStateTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "VTransposed" : "VRows"; });

}  // namespace
}  // namespace kvt::llamacpp
