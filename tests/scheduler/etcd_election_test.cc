#include "scheduler/etcd_election.h"

#include <gtest/gtest.h>

namespace dgpu::scheduler {
namespace {

using nlohmann::json;

TEST(EtcdIntTest, ReadsStringAndNumberIntegers) {
  EXPECT_EQ(*EtcdInt(json("7587862342212"), "ID"), 7587862342212);
  EXPECT_EQ(*EtcdInt(json(-3), "TTL"), -3);
}

TEST(EtcdIntTest, MalformedValuesAreErrorsNamingTheField) {
  struct Case {
    json value;
    const char* message;
  };
  for (const Case& c : {
           Case{json("12x"), "etcd lease keepalive reply: TTL: \"12x\" is not a whole number"},
           Case{json(""), "etcd lease keepalive reply: TTL: \"\" is not a whole number"},
           Case{json("99999999999999999999"),
                "etcd lease keepalive reply: TTL: \"99999999999999999999\" is out of range"},
           Case{json(1.5), "etcd lease keepalive reply: TTL: 1.5 is not a whole number"},
           Case{json(nullptr), "etcd lease keepalive reply: TTL: null is not a whole number"},
       }) {
    StatusOr<int64_t> parsed = EtcdInt(c.value, "etcd lease keepalive reply: TTL");
    ASSERT_FALSE(parsed.ok()) << c.value.dump();
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(parsed.status().message(), c.message);
  }
}

}  // namespace
}  // namespace dgpu::scheduler
