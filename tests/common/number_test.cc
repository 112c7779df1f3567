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

TEST(NumberTest, ParsesDecimalNumbers) {
  EXPECT_EQ(*ParseDouble("1.5", "x"), 1.5);
  EXPECT_EQ(*ParseDouble(".5", "x"), 0.5);
  EXPECT_EQ(*ParseDouble("5.", "x"), 5.0);
  EXPECT_EQ(*ParseDouble("-0.25", "x"), -0.25);
  EXPECT_EQ(*ParseDouble("007", "x"), 7.0);
  EXPECT_EQ(*ParseDouble("1e3", "x"), 1000.0);
  EXPECT_EQ(*ParseDouble("2.5E-1", "x"), 0.25);
}

TEST(NumberTest, RejectsGarbageDecimalsNamingTheSource) {
  struct Case {
    const char* text;
    const char* message;
  };
  for (const Case& c : {
           Case{"", "--timeout: \"\" is not a number"},
           Case{".", "--timeout: \".\" is not a number"},
           Case{"-", "--timeout: \"-\" is not a number"},
           Case{"1.5.2", "--timeout: \"1.5.2\" is not a number"},
           Case{"1e", "--timeout: \"1e\" is not a number"},
           Case{"12s", "--timeout: \"12s\" is not a number"},
           Case{" 1", "--timeout: \" 1\" is not a number"},
           Case{"1 ", "--timeout: \"1 \" is not a number"},
           Case{"+1", "--timeout: \"+1\" is not a number"},
           Case{"0x10", "--timeout: \"0x10\" is not a number"},
           Case{"inf", "--timeout: \"inf\" is not a number"},
           Case{"-infinity", "--timeout: \"-infinity\" is not a number"},
           Case{"nan", "--timeout: \"nan\" is not a number"},
           Case{"1e400", "--timeout: \"1e400\" is out of range"},
           Case{"-1e400", "--timeout: \"-1e400\" is out of range"},
           Case{"1e-400", "--timeout: \"1e-400\" is out of range"},
       }) {
    StatusOr<double> parsed = ParseDouble(c.text, "--timeout");
    ASSERT_FALSE(parsed.ok()) << c.text;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(parsed.status().message(), c.message);
  }
}

TEST(ByteSizeTest, UnitsArePowersOfAThousandOrOf1024) {
  EXPECT_EQ(*ParseByteSize("0", "x"), 0);
  EXPECT_EQ(*ParseByteSize("100", "x"), 100);
  EXPECT_EQ(*ParseByteSize("100B", "x"), 100);
  EXPECT_EQ(*ParseByteSize("2k", "x"), 2000);
  EXPECT_EQ(*ParseByteSize("2kB", "x"), 2000);
  EXPECT_EQ(*ParseByteSize("3M", "x"), 3000000);
  EXPECT_EQ(*ParseByteSize("1G", "x"), 1000000000);
  EXPECT_EQ(*ParseByteSize("4Ki", "x"), 4096);
  EXPECT_EQ(*ParseByteSize("512MiB", "x"), int64_t{512} << 20);
  EXPECT_EQ(*ParseByteSize("1GiB", "x"), int64_t{1} << 30);
  EXPECT_EQ(*ParseByteSize("2Ti", "x"), int64_t{2} << 40);
}

TEST(ByteSizeTest, RefusalsNameTheSourceAndSayWhy) {
  struct Case {
    const char* text;
    const char* message;
  };
  for (
      const Case& c : {
          Case{"",
               "k: \"\" is not a size (a whole number of bytes, or with a unit such as 512MiB or "
               "1G)"},
          Case{"-1",
               "k: \"-1\" is not a size (a whole number of bytes, or with a unit such as 512MiB or "
               "1G)"},
          Case{
              "1.5G",
              "k: \"1.5G\" has an unknown unit (use B, k, M, G, T or Ki, Mi, Gi, Ti, e.g. 512MiB)"},
          Case{"1 G",
               "k: \"1 G\" has an unknown unit (use B, k, M, G, T or Ki, Mi, Gi, Ti, e.g. 512MiB)"},
          Case{"1PB",
               "k: \"1PB\" has an unknown unit (use B, k, M, G, T or Ki, Mi, Gi, Ti, e.g. 512MiB)"},
          Case{"8388608Ti", "k: \"8388608Ti\" is out of range"},
          Case{"99999999999999999999", "k: \"99999999999999999999\" is out of range"},
      }) {
    StatusOr<int64_t> r = ParseByteSize(c.text, "k");
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().message(), c.message);
  }
}

}  // namespace
}  // namespace dgpu::common
