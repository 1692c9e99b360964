// Writes the binary seed corpora of the fuzzers into tests/fuzz/corpus/ (run by hand after
// a format change: `build/fuzz/tests/fuzz/kvt_fuzz_make_seeds tests/fuzz/corpus`). The
// text seeds (YAML configs, token files) are written by hand and checked in.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kvstore/chunk_codec.h"
#include "llamacpp/seq_state.h"
#include "proto/kvtier.pb.h"

namespace {
namespace pb = ::kvtier::v1;
std::filesystem::path g_root;

void Write(const std::string& fuzzer, const std::string& name, const std::string& bytes) {
  std::filesystem::create_directories(g_root / fuzzer);
  std::ofstream(g_root / fuzzer / name, std::ios::binary) << bytes;
}
std::string Str(const std::vector<std::byte>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size());
}

std::vector<std::byte> Record(uint32_t tokens, kvt::LayoutKind kind, uint64_t key_lo) {
  kvt::ChunkHeader h;
  h.ns = kvt::NamespaceId{0x1111, 0x2222};
  h.key = kvt::ChunkKey{key_lo, 0x4444};
  h.parent = kvt::ChunkKey{0x1111, 0x2222};
  h.token_count = tokens;
  h.layout = {2, kind == kvt::LayoutKind::kMLA ? 1u : 2u, 8, kvt::DType::kF16, kind};
  std::vector<std::byte> payload(h.layout.payload_bytes(tokens));
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = std::byte(i * 7);
  auto rec = kvt::EncodeChunk(h, payload);
  if (!rec.ok()) std::abort();
  return *rec;
}

void Key(pb::Key128* k, uint64_t lo, uint64_t hi) {
  k->set_lo(lo);
  k->set_hi(hi);
}
// fuzz_daemon_rpc input: method byte, flags byte, then u16-length-prefixed messages.
std::string Rpc(int method, uint8_t flags, const std::vector<std::string>& messages) {
  std::string out{char(method), char(flags)};
  for (const std::string& m : messages) {
    out += char(m.size() & 0xff);
    out += char(m.size() >> 8);
    out += m;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_ROOT\n", argv[0]);
    return 2;
  }
  g_root = argv[1];
  // Chunk codec: mode byte 0 (checksums as written) and 3 (fixed up by the fuzzer).
  Write("fuzz_chunk_codec", "nhd_4tok",
        std::string(1, '\0') + Str(Record(4, kvt::LayoutKind::kFlashAttnNHD, 1)));
  Write("fuzz_chunk_codec", "mla_3tok",
        std::string(1, '\3') + Str(Record(3, kvt::LayoutKind::kMLA, 2)));
  Write("fuzz_chunk_codec", "rows_1tok",
        std::string(1, '\1') + Str(Record(1, kvt::LayoutKind::kLlamaCppRows, 3)));

  // llama.cpp state blobs, V rows and V transposed.
  for (bool v_trans : {false, true}) {
    kvt::llamacpp::SeqStateSpec spec;
    spec.n_layer = 2;
    spec.type_k = 1;
    spec.type_v = 1;
    spec.k_row_bytes = 16;
    spec.v_row_bytes = 16;
    spec.n_embd_v_gqa = 8;
    spec.v_elem_bytes = 2;
    spec.v_trans = v_trans;
    auto b = kvt::llamacpp::SeqStateBuilder::Create(spec, 3, 0);
    if (!b.ok()) std::abort();
    std::vector<std::byte> payload(3 * spec.payload_bytes_per_token());
    for (size_t i = 0; i < payload.size(); ++i) payload[i] = std::byte(i);
    if (!b->PutChunk(0, 3, payload).ok()) std::abort();
    Write("fuzz_seq_state", v_trans ? "vtrans_3cells" : "rows_3cells",
          Str(std::vector<std::byte>(b->blob().begin(), b->blob().end())));
    if (v_trans) continue;
    // The same with M-RoPE cell records (x = y = pos, tok = 100 + pos).
    spec.cell_ext = true;
    const int32_t tokens[3] = {100, 101, 102};
    auto m = kvt::llamacpp::SeqStateBuilder::Create(spec, 3, 0, {}, tokens);
    if (!m.ok() || !m->PutChunk(0, 3, payload).ok()) std::abort();
    Write("fuzz_seq_state", "mrope_3cells",
          Str(std::vector<std::byte>(m->blob().begin(), m->blob().end())));
  }

  // kvtierd RPCs: 0 Lookup 1 Put 2 Get 3 Evict 4 List 5 Stats 6 Health 7 ShmAttach 8 ShmDetach.
  {
    pb::LookupRequest r;
    r.set_protocol_version(1);
    Key(r.add_keys(), 1, 0x4444);
    Key(r.add_keys(), 2, 0x4444);
    r.set_per_key(true);
    Write("fuzz_daemon_rpc", "lookup", Rpc(0, 1, {r.SerializeAsString()}));
  }
  {
    const std::vector<std::byte> rec = Record(4, kvt::LayoutKind::kFlashAttnNHD, 1);
    pb::PutRequest whole;
    whole.set_protocol_version(1);
    whole.set_record_bytes(rec.size());
    whole.set_data(Str(rec));
    Write("fuzz_daemon_rpc", "put_one", Rpc(1, 1 | 4, {whole.SerializeAsString()}));
    pb::PutRequest first, rest;
    first.set_protocol_version(1);
    first.set_record_bytes(rec.size());
    first.set_data(Str(rec).substr(0, 100));
    rest.set_data(Str(rec).substr(100));
    Write("fuzz_daemon_rpc", "put_parts",
          Rpc(1, 2 | 4, {first.SerializeAsString(), rest.SerializeAsString()}));
    pb::PutRequest shm;
    shm.set_protocol_version(1);
    shm.set_record_bytes(rec.size());
    shm.mutable_shm()->set_region_id(1);
    shm.mutable_shm()->set_offset(0);
    shm.mutable_shm()->set_length(rec.size());
    Write("fuzz_daemon_rpc", "put_shm", Rpc(1, 1, {shm.SerializeAsString()}));
    shm.mutable_shm()->set_offset(64);
    shm.mutable_shm()->set_progressive(true);
    shm.mutable_shm()->set_progress_offset(0);
    Write("fuzz_daemon_rpc", "put_shm_progressive", Rpc(1, 1, {shm.SerializeAsString()}));
  }
  {
    pb::GetRequest r;
    r.set_protocol_version(1);
    Key(r.add_keys(), 1, 0x4444);
    Key(r.add_keys(), 9, 9);
    r.set_max_part_bytes(64);
    Write("fuzz_daemon_rpc", "get", Rpc(2, 1, {r.SerializeAsString()}));
    r.mutable_shm()->set_region_id(1);
    r.mutable_shm()->set_length(4096);
    Write("fuzz_daemon_rpc", "get_shm", Rpc(2, 1, {r.SerializeAsString()}));
    r.mutable_shm()->set_offset(64);
    r.mutable_shm()->set_progressive(true);
    r.mutable_shm()->set_progress_offset(0);
    Write("fuzz_daemon_rpc", "get_shm_progressive", Rpc(2, 1, {r.SerializeAsString()}));
  }
  {
    pb::EvictRequest r;
    r.set_protocol_version(1);
    Key(r.mutable_keys()->add_keys(), 1, 0x4444);
    Write("fuzz_daemon_rpc", "evict_keys", Rpc(3, 1, {r.SerializeAsString()}));
    r.Clear();
    r.set_protocol_version(1);
    Key(r.mutable_prefix(), 0x1111, 0x2222);
    r.set_dry_run(true);
    Write("fuzz_daemon_rpc", "evict_prefix", Rpc(3, 2, {r.SerializeAsString()}));
    r.Clear();
    r.set_protocol_version(1);
    r.set_older_than_ms(1000);
    Write("fuzz_daemon_rpc", "evict_age", Rpc(3, 1, {r.SerializeAsString()}));
  }
  {
    pb::ListRequest r;
    r.set_protocol_version(1);
    r.set_page_size(2);
    Write("fuzz_daemon_rpc", "list", Rpc(4, 1, {r.SerializeAsString()}));
    r.set_page_token("00000000000000010000000000004444");
    Key(r.mutable_ns(), 0x1111, 0x2222);
    Write("fuzz_daemon_rpc", "list_token", Rpc(4, 1, {r.SerializeAsString()}));
  }
  pb::StatsRequest stats;
  stats.set_protocol_version(1);
  Write("fuzz_daemon_rpc", "stats", Rpc(5, 2, {stats.SerializeAsString()}));
  pb::HealthRequest health;
  health.set_protocol_version(1);
  Write("fuzz_daemon_rpc", "health", Rpc(6, 0, {health.SerializeAsString()}));
  pb::ShmAttachRequest attach;
  attach.set_protocol_version(1);
  attach.set_bytes(1 << 20);
  Write("fuzz_daemon_rpc", "shm_attach", Rpc(7, 1, {attach.SerializeAsString()}));
  pb::ShmDetachRequest detach;
  detach.set_protocol_version(1);
  detach.set_region_id(1);
  Write("fuzz_daemon_rpc", "shm_detach", Rpc(8, 1, {detach.SerializeAsString()}));
  return 0;
}
