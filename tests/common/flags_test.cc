#include "common/flags.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dgpu::common {
namespace {

DaemonFlagsSpec Spec() {
  return DaemonFlagsSpec{"dgpu-test",
                         "A daemon under test",
                         {{"data-dir", "Where data goes", true}, {"dry-run", "Do nothing", false}}};
}

StatusOr<DaemonFlags> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "/usr/bin/dgpu-test");
  std::vector<const char*> argv;
  for (const std::string& arg : args) argv.push_back(arg.c_str());
  return ParseDaemonFlags(static_cast<int>(argv.size()), argv.data(), Spec());
}

DaemonFlags MustParse(std::vector<std::string> args) {
  StatusOr<DaemonFlags> flags = Parse(args);
  EXPECT_TRUE(flags.ok()) << flags.status().ToString();
  return flags.ok() ? *flags : DaemonFlags{};
}

void ExpectUsageError(std::vector<std::string> args, const std::string& message) {
  StatusOr<DaemonFlags> flags = Parse(args);
  ASSERT_FALSE(flags.ok());
  EXPECT_EQ(flags.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(flags.status().message(), message);
  EXPECT_EQ(flags.status().message().find('\n'), std::string::npos);
}

TEST(DaemonFlagsTest, NoArgumentsMeansDefaults) {
  const DaemonFlags flags = MustParse({});
  EXPECT_EQ(flags.config_path, "");
  EXPECT_FALSE(flags.version_requested);
  EXPECT_FALSE(flags.help_requested);
  EXPECT_TRUE(flags.extra.empty());
}

TEST(DaemonFlagsTest, ConfigAcceptsEverySpelling) {
  const std::vector<std::vector<std::string>> spellings = {
      {"--config", "/etc/dgpu/s.yaml"},
      {"-config", "/etc/dgpu/s.yaml"},
      {"--config=/etc/dgpu/s.yaml"},
      {"-config=/etc/dgpu/s.yaml"},
  };
  for (const auto& args : spellings) {
    EXPECT_EQ(MustParse(args).config_path, "/etc/dgpu/s.yaml") << args[0];
  }
}

TEST(DaemonFlagsTest, ValueOfConfigIsNeverRewritten) {
  // A file literally named "-version" stays a file name.
  EXPECT_EQ(MustParse({"--config=-version"}).config_path, "-version");
  EXPECT_FALSE(MustParse({"--config=-version"}).version_requested);
}

TEST(DaemonFlagsTest, VersionAndHelp) {
  EXPECT_TRUE(MustParse({"--version"}).version_requested);
  EXPECT_TRUE(MustParse({"-version"}).version_requested);
  EXPECT_TRUE(MustParse({"--help"}).help_requested);
  EXPECT_TRUE(MustParse({"-help"}).help_requested);
  EXPECT_TRUE(MustParse({"-h"}).help_requested);
  EXPECT_EQ(VersionLine(Spec()), "dgpu-test " + std::string(BuildVersion()));
  EXPECT_EQ(BuildVersion(), DGPU_VERSION);
}

TEST(DaemonFlagsTest, ExtraFlags) {
  const DaemonFlags flags = MustParse({"-config", "c.yaml", "-data-dir", "/tmp/d", "--dry-run"});
  EXPECT_EQ(flags.config_path, "c.yaml");
  EXPECT_EQ(flags.extra,
            (std::map<std::string, std::string>{{"data-dir", "/tmp/d"}, {"dry-run", "true"}}));
  EXPECT_EQ(MustParse({"--data-dir=/x"}).extra,
            (std::map<std::string, std::string>{{"data-dir", "/x"}}));
}

TEST(DaemonFlagsTest, BadUsageIsAOneLineError) {
  ExpectUsageError({"--bogus"}, "unknown flag \"--bogus\"");
  ExpectUsageError({"stray"}, "unexpected argument \"stray\"");
  ExpectUsageError({"--config"}, "--config: 1 required TEXT missing");
  ExpectUsageError({"--config", ""}, "--config: the file name must not be empty");
  ExpectUsageError({"--config", "a", "--config", "b"}, "--config: given more than once");
  ExpectUsageError({"--data-dir=a", "-data-dir", "b"}, "--data-dir: given more than once");
  ExpectUsageError({"--version", "--version"}, "--version: given more than once");
  ExpectUsageError({"-bogus"}, "unknown flag \"-bogus\"");
  ExpectUsageError({"--config", "c.yaml", "--", "-config"}, "unexpected argument \"-config\"");
  ExpectUsageError({"a", "b"}, "unexpected argument \"a\"");
}

TEST(DaemonFlagsTest, UsageListsEveryFlag) {
  const std::string usage = DaemonUsage(Spec());
  for (const char* needle : {"dgpu-test", "A daemon under test", "--config", "FILE", "--version",
                             "--help", "--data-dir", "Where data goes", "--dry-run"}) {
    EXPECT_NE(usage.find(needle), std::string::npos) << needle << " in\n" << usage;
  }
}

TEST(DaemonFlagsDeathTest, OrExitHandlesVersionHelpAndErrors) {
  const DaemonFlagsSpec spec = Spec();
  const char* version_argv[] = {"dgpu-test", "--version"};
  EXPECT_EXIT(ParseDaemonFlagsOrExit(2, version_argv, spec), ::testing::ExitedWithCode(0), "");
  const char* help_argv[] = {"dgpu-test", "-help"};
  EXPECT_EXIT(ParseDaemonFlagsOrExit(2, help_argv, spec), ::testing::ExitedWithCode(0), "");
  const char* bad_argv[] = {"dgpu-test", "--bogus"};
  EXPECT_EXIT(ParseDaemonFlagsOrExit(2, bad_argv, spec), ::testing::ExitedWithCode(2),
              "^dgpu-test: unknown flag \"--bogus\" \\(see --help\\)\n$");
  const char* ok_argv[] = {"dgpu-test", "-config", "x.yaml"};
  EXPECT_EQ(ParseDaemonFlagsOrExit(3, ok_argv, spec).config_path, "x.yaml");
}

}  // namespace
}  // namespace dgpu::common
