#include "core/gpu_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dgpu::core {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

const std::vector<std::string> kModels = {"Tesla V100-SXM2-32GB", "A100", "Tesla V100-PCIE-16GB",
                                          "a100-80gb", "T4"};

TEST(MatchGpuModelsTest, EmptyWantedSelectsEveryModel) {
  EXPECT_THAT(MatchGpuModels("", kModels), ElementsAre(0, 1, 2, 3, 4));
  EXPECT_THAT(MatchGpuModels("", std::vector<std::string>{}), IsEmpty());
}

TEST(MatchGpuModelsTest, ExactNameIgnoringCaseWinsOverSubstrings) {
  // "A100" is also a substring of "a100-80gb": the exact name alone is selected.
  EXPECT_THAT(MatchGpuModels("A100", kModels), ElementsAre(1));
  EXPECT_THAT(MatchGpuModels("a100", kModels), ElementsAre(1));
  EXPECT_THAT(MatchGpuModels("A100-80GB", kModels), ElementsAre(3));
  EXPECT_THAT(MatchGpuModels("t4", kModels), ElementsAre(4));
}

TEST(MatchGpuModelsTest, SubstringIgnoringCaseWhenNoExactName) {
  EXPECT_THAT(MatchGpuModels("V100", kModels), ElementsAre(0, 2));
  EXPECT_THAT(MatchGpuModels("v100-sxm2", kModels), ElementsAre(0));
  EXPECT_THAT(MatchGpuModels("tesla", kModels), ElementsAre(0, 2));
  EXPECT_THAT(MatchGpuModels("GB", kModels), ElementsAre(0, 2, 3));
}

TEST(MatchGpuModelsTest, NothingMatches) {
  EXPECT_THAT(MatchGpuModels("H100", kModels), IsEmpty());
  EXPECT_THAT(MatchGpuModels("V100 ", kModels), IsEmpty());
  EXPECT_THAT(MatchGpuModels("A100", std::vector<std::string>{}), IsEmpty());
}

TEST(MatchGpuModelsTest, OnlyAsciiLettersFoldCase) {
  const std::vector<std::string> models = {"\xC3\x84-GPU", "gpu_x"};  // "Ä-GPU" in UTF-8
  EXPECT_THAT(MatchGpuModels("\xC3\xA4-gpu", models), IsEmpty());
  EXPECT_THAT(MatchGpuModels("\xC3\x84-gpu", models), ElementsAre(0));
  EXPECT_THAT(MatchGpuModels("GPU_X", models), ElementsAre(1));
}

}  // namespace
}  // namespace dgpu::core
