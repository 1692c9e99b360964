// Slot routing without a server: CRC16, hash tags, CLUSTER SLOTS parsing, redirects.
#include "kvstore/cluster_slots.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include "kvstore/cluster_client.h"

namespace kvt::cluster {
namespace {

// A reply parsed from RESP text by hiredis' own reader.
Reply Parse(const std::string& resp) {
  redisReader* r = redisReaderCreate();
  redisReaderFeed(r, resp.data(), resp.size());
  void* out = nullptr;
  EXPECT_EQ(redisReaderGetReply(r, &out), REDIS_OK);
  redisReaderFree(r);
  return Reply(static_cast<redisReply*>(out));
}

TEST(Crc16Test, MatchesTheSpecCheckValue) {
  EXPECT_EQ(Crc16("123456789"), 0x31C3);  // cluster spec, Appendix A
  EXPECT_EQ(Crc16(""), 0);
}

TEST(KeyHashSlotTest, KnownSlots) {
  // Values from `redis-cli CLUSTER KEYSLOT` on redis 7.0.
  EXPECT_EQ(KeyHashSlot("foo"), 12182);
  EXPECT_EQ(KeyHashSlot("bar"), 5061);
  EXPECT_EQ(KeyHashSlot("123456789"), 0x31C3 & 16383);
}

TEST(KeyHashSlotTest, HashTags) {
  EXPECT_EQ(KeyHashSlot("{user1000}.following"), KeyHashSlot("user1000"));
  EXPECT_EQ(KeyHashSlot("{user1000}.followers"), KeyHashSlot("{user1000}.following"));
  EXPECT_EQ(KeyHashSlot("foo{}{bar}"), KeyHashSlot("foo{}{bar}"));  // empty tag: the whole key
  EXPECT_NE(KeyHashSlot("foo{}{bar}"), KeyHashSlot("bar"));
  EXPECT_EQ(KeyHashSlot("foo{{bar}}zap"), KeyHashSlot("{bar"));  // first '{' to the next '}'
  EXPECT_EQ(KeyHashSlot("foo{bar}{zap}"), KeyHashSlot("bar"));   // only the first tag
  EXPECT_EQ(KeyHashSlot("no}tag{"), Crc16("no}tag{") & 16383);
  // All pieces of one chunk share a slot.
  EXPECT_EQ(KeyHashSlot("kvt:{default:0123456789abcdef0123456789abcdef}:0"),
            KeyHashSlot("kvt:{default:0123456789abcdef0123456789abcdef}:17"));
}

TEST(SlotMapTest, ParsesClusterSlots) {
  // Two ranges on one master, one on another (with a replica), one with an empty ip.
  Reply r = Parse(
      "*3\r\n"
      "*3\r\n:0\r\n:5460\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$2\r\nid\r\n"
      "*4\r\n:5461\r\n:10922\r\n*3\r\n$9\r\n127.0.0.1\r\n:7001\r\n$2\r\nid\r\n*3\r\n$9\r\n127.0.0."
      "1\r\n:7004\r\n$2\r\nid\r\n"
      "*3\r\n:10923\r\n:16383\r\n*3\r\n$0\r\n\r\n:7002\r\n$2\r\nid\r\n");
  ASSERT_NE(r, nullptr);
  auto m = SlotMap::FromClusterSlots(r.get(), "10.0.0.9");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->covered_slots(), 16384);
  EXPECT_EQ(m->masters().size(), 3u);
  EXPECT_EQ(m->MasterOf(0)->port, 7000);
  EXPECT_EQ(m->MasterOf(5460)->port, 7000);
  EXPECT_EQ(m->MasterOf(5461)->port, 7001);
  EXPECT_EQ(m->MasterOf(16383)->host, "10.0.0.9");
  EXPECT_FALSE(m->MasterOf(16384).has_value());
  m->Assign(5461, NodeAddr{"127.0.0.1", 7000});
  EXPECT_EQ(m->MasterOf(5461)->port, 7000);
  EXPECT_EQ(m->MasterOf(5462)->port, 7001);
}

TEST(SlotMapTest, PartialCoverageAndMalformed) {
  Reply r = Parse("*1\r\n*3\r\n:0\r\n:99\r\n*2\r\n$9\r\n127.0.0.1\r\n:7000\r\n");
  auto m = SlotMap::FromClusterSlots(r.get(), "h");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->covered_slots(), 100);
  EXPECT_FALSE(m->MasterOf(100).has_value());
  Reply bad = Parse("*1\r\n*3\r\n:10\r\n:5\r\n*2\r\n$1\r\nh\r\n:1\r\n");
  EXPECT_EQ(SlotMap::FromClusterSlots(bad.get(), "h").status().code(), absl::StatusCode::kDataLoss);
  Reply not_array = Parse("-ERR This instance has cluster support disabled\r\n");
  EXPECT_EQ(SlotMap::FromClusterSlots(not_array.get(), "h").status().code(),
            absl::StatusCode::kDataLoss);
  Reply bad_port = Parse("*1\r\n*3\r\n:0\r\n:5\r\n*2\r\n$1\r\nh\r\n:70000\r\n");
  EXPECT_EQ(SlotMap::FromClusterSlots(bad_port.get(), "h").status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(RedirectTest, MovedAskTryAgainClusterDown) {
  auto m = ParseRedirect("MOVED 3999 127.0.0.1:6381");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->kind, Redirect::kMoved);
  EXPECT_EQ(m->slot, 3999);
  EXPECT_EQ(m->node, (NodeAddr{"127.0.0.1", 6381}));
  auto a = ParseRedirect("ASK 12 [::1]:7000");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->kind, Redirect::kAsk);
  EXPECT_EQ(a->node, (NodeAddr{"::1", 7000}));
  auto e = ParseRedirect("MOVED 7 :7001");  // a node that does not know its ip
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->node.host, "");
  EXPECT_EQ(ParseRedirect("TRYAGAIN Multiple keys request during rehashing of slot")->kind,
            Redirect::kTryAgain);
  EXPECT_EQ(ParseRedirect("CLUSTERDOWN The cluster is down")->kind, Redirect::kClusterDown);
  EXPECT_FALSE(ParseRedirect("ERR wrong number of arguments").has_value());
  EXPECT_FALSE(ParseRedirect("MOVED x 127.0.0.1:1").has_value());
  EXPECT_FALSE(ParseRedirect("MOVED 16384 127.0.0.1:1").has_value());
  EXPECT_FALSE(ParseRedirect("ASK 1 127.0.0.1").has_value());
  EXPECT_FALSE(ParseRedirect("").has_value());
}

TEST(NodeAddrTest, ParseAndOptions) {
  EXPECT_EQ(*ParseNodeAddr("127.0.0.1:7000"), (NodeAddr{"127.0.0.1", 7000}));
  EXPECT_EQ(*ParseNodeAddr("[::1]:7000"), (NodeAddr{"::1", 7000}));
  EXPECT_EQ(ParseNodeAddr("[::1]:7000")->ToString(), "[::1]:7000");
  for (const char* bad : {"", "host", "host:", ":7000", "h:0", "h:65536", "h:12x", "[::1]7000"})
    EXPECT_EQ(ParseNodeAddr(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  ClusterClientOptions o;
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);  // no nodes
  o.nodes = {"127.0.0.1:7000"};
  EXPECT_TRUE(o.Validate().ok());
  o.nodes = {"127.0.0.1"};
  EXPECT_NE(o.Validate().message().find("127.0.0.1"), std::string::npos);
  o.nodes = {"127.0.0.1:7000"};
  o.deadline = std::chrono::milliseconds(0);
  EXPECT_NE(o.Validate().message().find("deadline"), std::string::npos);
  o.deadline = std::chrono::milliseconds(100);
  o.username = "kvt";
  EXPECT_NE(o.Validate().message().find("username"), std::string::npos);
}

}  // namespace
}  // namespace kvt::cluster
