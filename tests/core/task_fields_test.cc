// The task's field table (core/task_fields.h) names every member of Task and TaskSpec once.
#include "core/task_fields.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <limits>
#include <set>
#include <string>
#include <type_traits>

namespace dgpu::core {
namespace {

// Converts to any type: counts an aggregate's members by how many of it brace-initialize it.
struct AnyMember {
  template <typename T>
  operator T() const;  // NOLINT(google-explicit-constructor): only used unevaluated.
};

template <typename Aggregate, typename... Members>
constexpr size_t CountMembers() {
  if constexpr (requires { Aggregate{Members{}..., AnyMember{}}; }) {
    return CountMembers<Aggregate, Members..., AnyMember>();
  } else {
    return sizeof...(Members);
  }
}

static_assert(std::is_aggregate_v<Task> && std::is_aggregate_v<TaskSpec>);

TEST(TaskFieldsTest, TheTableHasALineForEveryMemberOfTaskAndTaskSpec) {
  // Task's first member is its TaskSpec, whose members are fields of their own.
  constexpr size_t kMembers = CountMembers<Task>() - 1 + CountMembers<TaskSpec>();
  EXPECT_EQ(static_cast<size_t>(kTaskFieldCount), kMembers)
      << "a member of Task or TaskSpec was added or removed: give it its line in "
         "core/task_fields.h (see \"Adding a task field\" in docs/architecture.md)";
}

// A value of T that differs from `v`.
template <typename T>
T Other(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return !v;
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(v + 1);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v + "x";
  } else if constexpr (std::is_enum_v<T>) {
    return static_cast<T>(static_cast<int>(v) + 1);
  } else if constexpr (std::is_same_v<T, Allocation>) {
    T other = v;
    other.push_back({"node-x", {1}});
    return other;
  } else if constexpr (std::is_same_v<T, Dependencies>) {
    T other = v;
    other.push_back({7, DependencyCondition::kAfterAny, DependencyState::kSatisfied});
    return other;
  } else {
    T other = v;
    other.emplace_back("K", "V");
    return other;
  }
}

TEST(TaskFieldsTest, EveryLineReadsAndWritesItsOwnMember) {
  // Changing field i through the table changes the task, and no other field of the table: with
  // the count above, the lines and the members match one to one.
  ForEachTaskField([](int i, const auto& changed) {
    SCOPED_TRACE(std::string(changed.info.name));
    Task task;
    changed.get(task) = Other(changed.get(task));
    EXPECT_NE(task, Task{});
    ForEachTaskField([&](int j, const auto& other) {
      if (j != i) {
        EXPECT_EQ(other.get(task), TaskFieldDefault(other)) << other.info.name;
      }
    });
  });
}

TEST(TaskFieldsTest, NamesAreUniqueAndTheFormsFitTheTypes) {
  std::set<std::string_view> names;
  ForEachTaskField([&](int n, const auto& field) {
    using T = TaskFieldType<decltype(field)>;
    SCOPED_TRACE(std::string(field.info.name));
    EXPECT_TRUE(names.insert(field.info.name).second);
    if (field.info.api == ApiForm::kTime) {
      EXPECT_TRUE((std::is_same_v<T, TimeMicros>));
    }
    if (field.info.min != std::numeric_limits<int64_t>::min()) {
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        EXPECT_GE(TaskFieldDefault(field), field.info.min) << "a new task must be valid";
      } else {
        ADD_FAILURE() << "only integers have a minimum";
      }
    }
    // The first release's fields come first: the stored JSON of that release has them all.
    if (field.info.first_release) {
      EXPECT_LE(n, 19);
    }
  });
  EXPECT_EQ(names.size(), static_cast<size_t>(kTaskFieldCount));
}

TEST(TaskFieldsTest, FinishDecodedTaskClearsARetryTimeOutsidePendingAndNamesWhatDisagrees) {
  Task t;
  t.retry_at = 5;
  EXPECT_EQ(FinishDecodedTask(&t), "");
  EXPECT_EQ(t.retry_at, 5);
  t.status = TaskStatus::kRunning;
  EXPECT_EQ(FinishDecodedTask(&t), "");
  EXPECT_EQ(t.retry_at, 0);
  t.spec.team = "Bad Team";
  EXPECT_EQ(FinishDecodedTask(&t), "invalid team 'Bad Team'");
  t.spec.team = "vision";
  t.spec.array_size = 2;
  t.spec.array_index = 2;
  EXPECT_EQ(FinishDecodedTask(&t), "array_index 2 of array_size 2 is out of range");
  t.spec.array_index = 1;
  t.spec.gpu_count = 3;
  t.spec.nodes = 2;
  EXPECT_EQ(FinishDecodedTask(&t), "gpu_count 3 is not split evenly over 2 nodes");
  t.spec.nodes = 0;
  EXPECT_EQ(FinishDecodedTask(&t), "gpu_count 3 is not split evenly over 0 nodes");
  t.spec.nodes = 3;
  EXPECT_EQ(FinishDecodedTask(&t), "");
}

}  // namespace
}  // namespace dgpu::core
