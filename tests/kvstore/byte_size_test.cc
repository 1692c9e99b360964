#include "kvstore/byte_size.h"

#include <gtest/gtest.h>

#include <string>

namespace kvt {
namespace {

TEST(ByteSizeTest, PlainIntegerIsBytes) {
  EXPECT_EQ(*ParseByteSize("0"), 0u);
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_EQ(*ParseByteSize("  4096 "), 4096u);
  EXPECT_EQ(*ParseByteSize("17B"), 17u);
  EXPECT_EQ(*ParseByteSize("18446744073709551615"), UINT64_MAX);
}

TEST(ByteSizeTest, IecUnitsArePowersOf1024) {
  EXPECT_EQ(*ParseByteSize("1KiB"), 1024u);
  EXPECT_EQ(*ParseByteSize("512MiB"), 512ull << 20);
  EXPECT_EQ(*ParseByteSize("64GiB"), 64ull << 30);
  EXPECT_EQ(*ParseByteSize("1TiB"), 1ull << 40);
  EXPECT_EQ(*ParseByteSize("8gib"), 8ull << 30);  // case-insensitive
}

TEST(ByteSizeTest, BareLettersAreBinaryAsKvtierdReadsThem) {
  EXPECT_EQ(*ParseByteSize("4K"), 4ull << 10);
  EXPECT_EQ(*ParseByteSize("3M"), 3ull << 20);
  EXPECT_EQ(*ParseByteSize("8G"), 8ull << 30);
  EXPECT_EQ(*ParseByteSize("2t"), 2ull << 40);
}

TEST(ByteSizeTest, SiUnitsArePowersOf1000) {
  EXPECT_EQ(*ParseByteSize("1kB"), 1000u);
  EXPECT_EQ(*ParseByteSize("5MB"), 5000000u);
  EXPECT_EQ(*ParseByteSize("8GB"), 8000000000u);
  EXPECT_EQ(*ParseByteSize("2TB"), 2000000000000ull);
}

TEST(ByteSizeTest, FractionsThatGiveWholeBytes) {
  EXPECT_EQ(*ParseByteSize("1.5 MiB"), 1572864u);
  EXPECT_EQ(*ParseByteSize("0.5K"), 512u);
  EXPECT_EQ(*ParseByteSize("1.25GB"), 1250000000u);
  EXPECT_EQ(*ParseByteSize("2."), 2u);
  EXPECT_EQ(*ParseByteSize(".5KiB"), 512u);
}

void ExpectRejected(const std::string& text, const std::string& why) {
  const auto r = ParseByteSize(text);
  ASSERT_FALSE(r.ok()) << text << " parsed as " << *r;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << text;
  const std::string msg(r.status().message());
  EXPECT_NE(msg.find("'" + text + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(why), std::string::npos) << msg;
}

TEST(ByteSizeTest, RejectsNegative) {
  ExpectRejected("-1", "negative");
  ExpectRejected("-4GiB", "negative");
}

TEST(ByteSizeTest, RejectsOverflow) {
  ExpectRejected("18446744073709551616", "too large");
  ExpectRejected("16777216TiB", "too large");  // 2^24 * 2^40 = 2^64
  ExpectRejected("99999999999999999999999", "too large");
  ExpectRejected("18446744073709551615.5K", "too large");
}

TEST(ByteSizeTest, RejectsJunk) {
  ExpectRejected("", "expected a number");
  ExpectRejected("   ", "expected a number");
  ExpectRejected("GiB", "expected a number");
  ExpectRejected("12 furlongs", "unknown unit 'furlongs'");
  ExpectRejected("1e9", "unknown unit 'e9'");
  ExpectRejected("0x100", "unknown unit 'x100'");
  ExpectRejected("1.2.3", "unknown unit '.3'");
  ExpectRejected("8 G B", "unknown unit 'g b'");
  ExpectRejected("1.5", "whole number of bytes");
  ExpectRejected("0.1KiB", "whole number of bytes");
}

}  // namespace
}  // namespace kvt
