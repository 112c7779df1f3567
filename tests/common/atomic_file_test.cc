#include "common/atomic_file.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace dgpu::common {
namespace {

namespace fs = std::filesystem;

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "dgpu-atomic-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  static std::string Read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  std::string dir_;
};

TEST_F(AtomicFileTest, WriteReplacesTheFileWholeAndLeavesNoTemporary) {
  const std::string path = Path("state.json");
  ASSERT_TRUE(WriteFileAtomically(path, "old contents").ok());
  Status s = WriteFileAtomically(path, "new");
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(Read(path), "new");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST_F(AtomicFileTest, WriteIntoMissingDirectoryFailsNamingTheTemporary) {
  const std::string path = Path("missing/state.json");
  Status s = WriteFileAtomically(path, "{}");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "creating " + path + ".tmp: No such file or directory");
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(AtomicFileTest, FailedRenameKeepsTheTargetAndRemovesTheTemporary) {
  const std::string path = Path("busy");
  fs::create_directories(path + "/child");
  Status s = WriteFileAtomically(path, "data");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message().rfind("renaming " + path + ".tmp to " + path + ": ", 0), 0u) << s.message();
  EXPECT_TRUE(fs::is_directory(path + "/child"));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST_F(AtomicFileTest, KeepOpenHandsBackTheNewFileOpenForAppending) {
  const std::string path = Path("journal");
  ASSERT_TRUE(WriteFileAtomically(path, "stale line\n").ok());
  StatusOr<int> fd = WriteFileAtomicallyKeepOpen(path, "first\n");
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  ASSERT_EQ(::write(*fd, "second\n", 7), 7);
  ::close(*fd);
  EXPECT_EQ(Read(path), "first\nsecond\n");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST_F(AtomicFileTest, ReplaceMovesACompleteFileIntoPlace) {
  const std::string temp = Path("db.creating");
  const std::string path = Path("db");
  std::ofstream(temp) << "built";
  ASSERT_TRUE(ReplaceFileAtomically(temp, path).ok());
  EXPECT_EQ(Read(path), "built");
  EXPECT_FALSE(fs::exists(temp));
}

TEST_F(AtomicFileTest, ReplaceOfAMissingTemporaryFailsNamingIt) {
  const std::string temp = Path("absent");
  Status s = ReplaceFileAtomically(temp, Path("db"));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "opening " + temp + ": No such file or directory");
  EXPECT_FALSE(fs::exists(Path("db")));
}

TEST_F(AtomicFileTest, SyncDirectoryOfAMissingDirectoryFailsNamingIt) {
  Status s = SyncDirectory(Path("gone"));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "opening directory " + Path("gone") + ": No such file or directory");
  EXPECT_TRUE(SyncDirectory(dir_).ok());
}

}  // namespace
}  // namespace dgpu::common
