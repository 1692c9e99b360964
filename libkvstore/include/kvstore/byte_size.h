// One parser for byte sizes, used by kvtierd's config and flags and by the kvtier CLI,
// so "8G" means the same number of bytes everywhere.
#ifndef KVSTORE_BYTE_SIZE_H_
#define KVSTORE_BYTE_SIZE_H_

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvt {

// Parses a byte size: a non-negative number, optionally with a decimal fraction,
// optionally followed (after optional spaces) by a unit. Units are case-insensitive:
//   B                      1
//   KiB MiB GiB TiB        2^10, 2^20, 2^30, 2^40 (IEC)
//   K   M   G   T          2^10, 2^20, 2^30, 2^40 (as kvtierd has always read them)
//   KB  MB  GB  TB         10^3, 10^6, 10^9, 10^12 (SI)
// Examples: "4096", "512MiB", "8G" (= 8 GiB), "2TB" (= 2·10^12), "1.5 MiB" (= 1572864).
// The result must be a whole number of bytes ("1.5" or "0.1KiB" are rejected).
// Leading and trailing whitespace is ignored.
// Errors: InvalidArgument naming `text` and the accepted forms for an empty, negative
// or non-numeric value, an unknown unit, a fractional byte count, or a value above
// 2^64 - 1 bytes.
absl::StatusOr<uint64_t> ParseByteSize(std::string_view text);

}  // namespace kvt

#endif  // KVSTORE_BYTE_SIZE_H_
