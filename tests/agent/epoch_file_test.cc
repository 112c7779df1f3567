#include "agent/epoch_file.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "test_util.h"

namespace dgpu::agent {
namespace {

using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

TEST(EpochFileTest, MissingFileMeansEpochZero) {
  TempDir dir;
  StatusOr<uint64_t> epoch = LoadEpoch(dir.path());
  ASSERT_TRUE(epoch.ok()) << epoch.status().ToString();
  EXPECT_EQ(*epoch, 0u);
}

TEST(EpochFileTest, StoredEpochIsReadBack) {
  TempDir dir;
  ASSERT_TRUE(StoreEpoch(dir.path(), 3).ok());
  Status s = StoreEpoch(dir.path(), 18446744073709551615u);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(ReadFile(dir.File(".dgpu-epoch")), "18446744073709551615\n");
  EXPECT_FALSE(std::filesystem::exists(dir.File(".dgpu-epoch.tmp")));
  EXPECT_EQ(*LoadEpoch(dir.path()), 18446744073709551615u);
}

TEST(InstanceFileTest, MadeOnceAndReadBackUnchanged) {
  TempDir dir;
  StatusOr<std::string> first = LoadOrCreateInstanceId(dir.path());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->size(), 32u);
  EXPECT_EQ(first->find_first_not_of("0123456789abcdef"), std::string::npos) << *first;
  EXPECT_EQ(ReadFile(dir.File(".dgpu-instance")), *first + "\n");
  EXPECT_EQ(*LoadOrCreateInstanceId(dir.path()), *first);
  // Another work directory: another instance.
  TempDir other;
  EXPECT_NE(*LoadOrCreateInstanceId(other.path()), *first);
}

TEST(InstanceFileTest, MalformedFileIsAnErrorNamingIt) {
  TempDir dir;
  const std::string path = dir.File(".dgpu-instance");
  for (const char* text : {"", "xyz\n", "0123456789ABCDEF0123456789abcdef\n", "0123\n"}) {
    WriteFile(path, text);
    StatusOr<std::string> id = LoadOrCreateInstanceId(dir.path());
    ASSERT_FALSE(id.ok()) << text;
    EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(id.status().message(), "instance file " + path + " does not hold 32 hex digits");
    EXPECT_EQ(ReadFile(path), text) << "left as it was";
  }
}

TEST(EpochFileTest, MalformedFileIsAnErrorNamingIt) {
  TempDir dir;
  const std::string path = dir.File(".dgpu-epoch");
  for (const char* text : {"12x\n", "", "\n", "-1\n", "99999999999999999999\n"}) {
    WriteFile(path, text);
    StatusOr<uint64_t> epoch = LoadEpoch(dir.path());
    ASSERT_FALSE(epoch.ok()) << text;
    EXPECT_EQ(epoch.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(epoch.status().message().rfind("epoch file " + path + ": \"", 0), 0u)
        << epoch.status().message();
  }
}

TEST(EpochFileTest, StoreIntoAnUnusableDirectoryFailsAndKeepsTheOldEpoch) {
  TempDir dir;
  ASSERT_TRUE(StoreEpoch(dir.path(), 4).ok());
  // A directory where the temporary file must go: no file can be created there, even by root.
  std::filesystem::create_directory(dir.File(".dgpu-epoch.tmp"));
  Status s = StoreEpoch(dir.path(), 5);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "creating " + dir.File(".dgpu-epoch.tmp") + ": Is a directory");
  EXPECT_EQ(*LoadEpoch(dir.path()), 4u);
}

TEST(EpochFileTest, StoreIntoAMissingDirectoryFailsNamingIt) {
  TempDir dir;
  const std::string work_dir = dir.File("gone");
  Status s = StoreEpoch(work_dir, 2);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "creating " + work_dir + "/.dgpu-epoch.tmp: No such file or directory");
}

}  // namespace
}  // namespace dgpu::agent
