// Temporary input files for the simulator tests.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace dgpu::sim::testing_util {

// Writes `content` to a fresh file under the test temporary directory and returns its path.
inline std::string WriteTempFile(const std::string& name, const std::string& content) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string path = ::testing::TempDir() + "dgpu_sim_" + info->test_suite_name() + "_" +
                     info->name() + "_" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  return path;
}

}  // namespace dgpu::sim::testing_util
