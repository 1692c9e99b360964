#include "kvstore/types.h"

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace kvt {

template <typename Tag>
std::string Hash128<Tag>::ToHex() const {
  return absl::StrFormat("%016x%016x", hi, lo);
}

template <typename Tag>
absl::StatusOr<Hash128<Tag>> Hash128<Tag>::FromHex(std::string_view hex) {
  if (hex.size() != 32) {
    return absl::InvalidArgumentError(
        absl::StrFormat("hash '%s': expected 32 hex digits, got %d", hex, hex.size()));
  }
  uint64_t parts[2] = {0, 0};
  for (size_t i = 0; i < 32; ++i) {
    const char c = hex[i];
    uint64_t v;
    if (c >= '0' && c <= '9') {
      v = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      v = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      v = c - 'A' + 10;
    } else {
      return absl::InvalidArgumentError(
          absl::StrFormat("hash '%s': character %d is not a hex digit", hex, i));
    }
    parts[i / 16] = (parts[i / 16] << 4) | v;
  }
  return Hash128<Tag>{parts[1], parts[0]};
}

template struct Hash128<ChunkKeyTag>;
template struct Hash128<NamespaceTag>;

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kFP8E4M3:
    case DType::kFP8E5M2:
    case DType::kI8:
    case DType::kBytes:
      return 1;
  }
  return 0;
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kFP8E4M3:
      return "fp8_e4m3";
    case DType::kFP8E5M2:
      return "fp8_e5m2";
    case DType::kI8:
      return "i8";
    case DType::kBytes:
      return "bytes";
  }
  return "unknown";
}

std::string_view LayoutKindName(LayoutKind kind) {
  switch (kind) {
    case LayoutKind::kFlashAttnNHD:
      return "flash_attn_nhd";
    case LayoutKind::kFlashAttnHND:
      return "flash_attn_hnd";
    case LayoutKind::kFlashInfer:
      return "flashinfer";
    case LayoutKind::kMLA:
      return "mla";
    case LayoutKind::kCrossLayer:
      return "cross_layer";
    case LayoutKind::kLlamaCppRows:
      return "llamacpp_rows";
  }
  return "unknown";
}

uint64_t KvLayout::bytes_per_token_per_layer() const {
  return uint64_t{kv_planes()} * num_kv_heads * head_dim * DTypeSize(dtype);
}

uint64_t KvLayout::bytes_per_token() const { return bytes_per_token_per_layer() * num_layers; }

absl::Status KvLayout::Validate() const {
  if (num_layers == 0) return absl::InvalidArgumentError("layout: num_layers must be > 0");
  if (num_kv_heads == 0) return absl::InvalidArgumentError("layout: num_kv_heads must be > 0");
  if (head_dim == 0) return absl::InvalidArgumentError("layout: head_dim must be > 0");
  if (DTypeSize(dtype) == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("layout: unknown dtype %d", static_cast<int>(dtype)));
  }
  if (LayoutKindName(kind) == "unknown") {
    return absl::InvalidArgumentError(
        absl::StrFormat("layout: unknown layout kind %d", static_cast<int>(kind)));
  }
  if (kind == LayoutKind::kMLA && num_kv_heads != 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("layout: mla needs num_kv_heads == 1, got %d", num_kv_heads));
  }
  return absl::OkStatus();
}

std::string KvLayout::DebugString() const {
  return absl::StrFormat("%s{layers=%d kv_heads=%d head_dim=%d dtype=%s}", LayoutKindName(kind),
                         num_layers, num_kv_heads, head_dim, DTypeName(dtype));
}

}  // namespace kvt
