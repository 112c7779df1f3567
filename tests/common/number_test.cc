#include "common/number.h"

#include <gtest/gtest.h>

namespace dgpu::common {
namespace {

TEST(NumberTest, ParsesWholeNumbers) {
  EXPECT_EQ(*ParseInt64("12", "etcd lease ID"), 12);
  EXPECT_EQ(*ParseInt64("-7", "etcd lease ID"), -7);
  EXPECT_EQ(*ParseInt64("9223372036854775807", "x"), INT64_MAX);
  EXPECT_EQ(*ParseUint64("18446744073709551615", "x"), UINT64_MAX);
  EXPECT_EQ(*ParseUint64("0", "x"), 0u);
}

TEST(NumberTest, RejectsGarbageNamingTheSource) {
  struct Case {
    const char* text;
    const char* message;
  };
  for (const Case& c : {
           Case{"12x", "etcd key /dgpu/epoch: \"12x\" is not a whole number"},
           Case{"", "etcd key /dgpu/epoch: \"\" is not a whole number"},
           Case{" 5", "etcd key /dgpu/epoch: \" 5\" is not a whole number"},
           Case{"5 ", "etcd key /dgpu/epoch: \"5 \" is not a whole number"},
           Case{"-1", "etcd key /dgpu/epoch: \"-1\" is not a whole number"},
           Case{"+1", "etcd key /dgpu/epoch: \"+1\" is not a whole number"},
           Case{"1.5", "etcd key /dgpu/epoch: \"1.5\" is not a whole number"},
           Case{"99999999999999999999",
                "etcd key /dgpu/epoch: \"99999999999999999999\" is out of range"},
       }) {
    StatusOr<uint64_t> parsed = ParseUint64(c.text, "etcd key /dgpu/epoch");
    ASSERT_FALSE(parsed.ok()) << c.text;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(parsed.status().message(), c.message);
  }
  StatusOr<int64_t> huge = ParseInt64("9223372036854775808", "limit");
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().message(), "limit: \"9223372036854775808\" is out of range");
}

}  // namespace
}  // namespace dgpu::common
