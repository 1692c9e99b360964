// kvt::PrometheusText (kvstore/prometheus_text.h): the one writer of /metrics text.
#include "kvstore/prometheus_text.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

namespace kvt {
namespace {

TEST(PrometheusTextTest, FamilyThenSamplesWithEscapedLabels) {
  PrometheusText p;
  p.Family("kvtier_tier_chunks", PrometheusText::Type::kGauge,
           "Chunks a tier holds.\nNot \\ bytes.");
  p.Sample("kvtier_tier_chunks", {{"tier", "host"}}, uint64_t{3});
  p.Sample("kvtier_tier_chunks", {{"tier", "a\"b\\c\nd"}, {"x", "y"}}, 0);
  EXPECT_EQ(p.text(),
            "# HELP kvtier_tier_chunks Chunks a tier holds.\\nNot \\\\ bytes.\n"
            "# TYPE kvtier_tier_chunks gauge\n"
            "kvtier_tier_chunks{tier=\"host\"} 3\n"
            "kvtier_tier_chunks{tier=\"a\\\"b\\\\c\\nd\",x=\"y\"} 0\n");
}

TEST(PrometheusTextTest, NumbersAreExactOrFullPrecision) {
  PrometheusText p;
  p.Family("c", PrometheusText::Type::kCounter);  // no HELP line without help
  p.Sample("c", std::numeric_limits<uint64_t>::max());
  p.Sample("c", int64_t{-5});
  p.Sample("c", 0.1);
  p.Sample("c", std::numeric_limits<double>::infinity());
  p.Sample("c", std::numeric_limits<double>::quiet_NaN());
  p.Sample("c", true);
  EXPECT_EQ(p.Take(),
            "# TYPE c counter\nc 18446744073709551615\nc -5\nc 0.10000000000000001\nc +Inf\n"
            "c NaN\nc 1\n");
  EXPECT_EQ(PrometheusText::BucketBound(0.00025), "0.00025");
  EXPECT_EQ(PrometheusText::BucketBound(std::numeric_limits<double>::infinity()), "+Inf");
}

}  // namespace
}  // namespace kvt
