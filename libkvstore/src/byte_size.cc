#include "kvstore/byte_size.h"

#include <array>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace kvt {
namespace {

constexpr std::string_view kForms =
    "expected a number with an optional unit: B, KiB/MiB/GiB/TiB or K/M/G/T (powers of 1024), "
    "KB/MB/GB/TB (powers of 1000), e.g. 512MiB, 8G, 2TB";

struct Unit {
  std::string_view name;  // lowercase
  uint64_t multiplier;
};
constexpr std::array<Unit, 14> kUnits = {{
    {"", 1},
    {"b", 1},
    {"k", 1ull << 10},
    {"kib", 1ull << 10},
    {"m", 1ull << 20},
    {"mib", 1ull << 20},
    {"g", 1ull << 30},
    {"gib", 1ull << 30},
    {"t", 1ull << 40},
    {"tib", 1ull << 40},
    {"kb", 1000ull},
    {"mb", 1000ull * 1000},
    {"gb", 1000ull * 1000 * 1000},
    {"tb", 1000ull * 1000 * 1000 * 1000},
}};

// absl here may not alias std::string_view, so messages are built from std::string.
absl::Status Bad(std::string_view text, std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("byte size '", std::string(text), "': ", std::string(why)));
}

}  // namespace

absl::StatusOr<uint64_t> ParseByteSize(std::string_view text) {
  const std::string trimmed(absl::StripAsciiWhitespace(std::string(text)));
  const std::string_view t = trimmed;
  size_t i = 0;
  // Integer part and fraction digits, kept exact: value = whole + frac / 10^frac_digits.
  unsigned __int128 whole = 0;
  unsigned __int128 frac = 0;
  unsigned __int128 frac_scale = 1;
  size_t digits = 0;
  constexpr unsigned __int128 kLimit = static_cast<unsigned __int128>(UINT64_MAX);
  while (i < t.size() && absl::ascii_isdigit(static_cast<unsigned char>(t[i]))) {
    whole = whole * 10 + static_cast<unsigned>(t[i] - '0');
    if (whole > kLimit) return Bad(text, "too large (at most 2^64 - 1 bytes)");
    ++i;
    ++digits;
  }
  if (i < t.size() && t[i] == '.') {
    ++i;
    while (i < t.size() && absl::ascii_isdigit(static_cast<unsigned char>(t[i]))) {
      // 18 fraction digits are more than any unit here can turn into whole bytes.
      if (frac_scale < static_cast<unsigned __int128>(1000000000000000000ull)) {
        frac = frac * 10 + static_cast<unsigned>(t[i] - '0');
        frac_scale *= 10;
      } else if (t[i] != '0') {
        return Bad(text, "too many fraction digits");
      }
      ++i;
      ++digits;
    }
  }
  if (digits == 0) {
    if (!t.empty() && t[0] == '-')
      return Bad(text, absl::StrCat("must not be negative; ", std::string(kForms)));
    return Bad(text, kForms);
  }
  const std::string unit =
      absl::AsciiStrToLower(absl::StripLeadingAsciiWhitespace(trimmed.substr(i)));
  const Unit* found = nullptr;
  for (const Unit& u : kUnits) {
    if (unit == u.name) found = &u;
  }
  if (found == nullptr)
    return Bad(text, absl::StrCat("unknown unit '", unit, "'; ", std::string(kForms)));
  const unsigned __int128 mult = found->multiplier;
  const unsigned __int128 frac_bytes = frac * mult;  // < 10^18 * 2^40 < 2^100
  if (frac_bytes % frac_scale != 0) return Bad(text, "is not a whole number of bytes");
  const unsigned __int128 bytes = whole * mult + frac_bytes / frac_scale;  // < 2^64 * 2^40 + 2^40
  if (bytes > kLimit) return Bad(text, "too large (at most 2^64 - 1 bytes)");
  return static_cast<uint64_t>(bytes);
}

}  // namespace kvt
