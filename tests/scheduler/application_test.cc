// The application layer, driven as the transports drive it: a real CoreLoop, a real journal on a
// temporary SQLite file, and fakes only for the agents' side (dispatch, stop orders).
#include "scheduler/application.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>
#include <mutex>
#include <ostream>
#include <thread>
#include <tuple>

#include "common/time_util.h"

namespace dgpu::core {
// Readable failures: found by argument-dependent lookup, so in the struct's namespace.
static void PrintTo(const TeamLimits& l, std::ostream* os) {
  *os << "{online " << l.online << ", batch " << l.batch << ", max_gpus " << l.max_gpus
      << ", weight " << l.weight << "}";
}
}  // namespace dgpu::core

namespace dgpu::scheduler {
namespace {

class FakeDispatcher : public Dispatcher {
 public:
  void Dispatch(const core::SchedulerCore& core,
                const std::vector<core::Decision>& decisions) override {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& d : decisions) {
      started.push_back(d.task);
      const core::Task* t = core.FindTask(d.task);
      runs.push_back(t == nullptr ? -1 : core::RunNumber(*t));
    }
  }
  std::mutex mu;
  std::vector<core::TaskNumber> started;  // GUARDED_BY(mu)
  std::vector<int> runs;                  // GUARDED_BY(mu): the run each start is of.
};

class FakeAgentChannel : public AgentChannel {
 public:
  void BeginSession(const std::string& agent_id) override { sessions.push_back(agent_id); }
  void OrderStops(const std::string& agent_id, const std::vector<std::string>& task_ids,
                  core::StopReason reason) override {
    stops.push_back({agent_id, task_ids, reason});
  }
  struct Stop {
    std::string agent;
    std::vector<std::string> tasks;
    core::StopReason reason;
  };
  std::vector<std::string> sessions;  // Owner thread only.
  std::vector<Stop> stops;            // Owner thread only.
};

// Refuses everything when `deny` is set, and remembers what it was asked.
class RecordingAuthorizer : public Authorizer {
 public:
  Status Authorize(const Caller& caller, Action action, const Target& target) const override {
    std::lock_guard<std::mutex> lock(mu);
    asked.push_back({caller.peer, action, target});
    if (deny) return PermissionDenied(std::string(ToString(action)) + " is not allowed for you");
    return OkStatus();
  }
  struct Ask {
    std::string peer;
    Action action;
    Target target;
  };
  bool deny = false;
  mutable std::mutex mu;
  mutable std::vector<Ask> asked;  // GUARDED_BY(mu)
};

// Calls a use case and waits for its one answer.
template <typename T, typename Start>
Result<T> Await(Start start) {
  std::promise<Result<T>> answer;
  std::future<Result<T>> f = answer.get_future();
  start([&answer](const Result<T>& r) { answer.set_value(r); });
  return f.get();
}

core::TaskSpec Spec(int gpus = 1) {
  core::TaskSpec s;
  s.command = "true";
  s.priority = core::Priority::kHigh;
  s.gpu_count = gpus;
  return s;
}

class ApplicationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/application_test_" + std::to_string(::getpid());
    std::filesystem::remove_all(dir_);
    auto db = store::Database::Open(dir_);
    ASSERT_TRUE(db.ok()) << db.status().message();
    db_ = std::move(*db);
    journal_ = std::make_unique<store::Journal>(db_.get(), 0);
    loop_ = std::make_unique<CoreLoop>(std::make_unique<core::SchedulerCore>(), journal_.get(),
                                       &dispatcher_, nullptr, &common::SystemClock::Instance());
    leader_.Set(true, 7);
    loop_->Start();
    app_ = std::make_unique<Application>(ApplicationDeps{loop_.get(), &leader_, db_.get(),
                                                         &readers_, journal_.get(), &metrics_,
                                                         &agents_, &authorizer_, &background_});
  }
  void TearDown() override {
    background_.Stop();
    readers_.Stop();
    loop_->Stop();
    journal_->Shutdown();
    db_.reset();
    std::filesystem::remove_all(dir_);
  }

  Result<Submitted> Submit(core::TaskSpec spec) {
    return Await<Submitted>([&](Reply<Submitted> r) { app_->Submit(caller_, {spec}, r); });
  }
  Result<Done> Cancel(core::TaskNumber n, std::optional<int32_t> grace = std::nullopt) {
    return Await<Done>([&](Reply<Done> r) { app_->Cancel(caller_, {n, grace}, r); });
  }
  Result<Done> SetQuota(double online) {
    return Await<Done>([&](Reply<Done> r) { app_->SetQuota(caller_, {online}, r); });
  }
  Result<Registered> Register(const std::string& agent, int gpus,
                              std::vector<RegisterRequest::Running> running = {}) {
    RegisterRequest req;
    req.agent_id = agent;
    req.epoch = 7;
    for (int i = 0; i < gpus; ++i) req.gpus.push_back({i, "A100", 40960, "", true, ""});
    req.running = std::move(running);
    return Await<Registered>(
        [&](Reply<Registered> r) { app_->RegisterNode(agent_caller_, std::move(req), r); });
  }
  Result<FinishRecorded> Finish(const std::string& agent, const std::string& task_id, int run = 0,
                                bool success = true) {
    FinishRequest req{agent, 7, task_id, success, success ? 0 : 1, "", common::NowMicros(), run};
    return Await<FinishRecorded>(
        [&](Reply<FinishRecorded> r) { app_->ReportFinish(agent_caller_, req, r); });
  }
  Result<core::TeamView> SetTeam(const TeamRequest& request) {
    return Await<core::TeamView>(
        [&](Reply<core::TeamView> r) { app_->SetTeam(caller_, request, r); });
  }
  Result<core::TeamView> GetTeam(const std::string& name) {
    return Await<core::TeamView>([&](Reply<core::TeamView> r) { app_->GetTeam(caller_, name, r); });
  }
  Result<Done> DeleteTeam(const std::string& name) {
    return Await<Done>([&](Reply<Done> r) { app_->DeleteTeam(caller_, name, r); });
  }
  // The names ListTeams answers, in its order.
  std::vector<std::string> TeamNames() {
    Result<std::vector<core::TeamView>> r = Await<std::vector<core::TeamView>>(
        [&](Reply<std::vector<core::TeamView>> reply) { app_->ListTeams(caller_, reply); });
    EXPECT_TRUE(r.ok()) << r.error().message;
    std::vector<std::string> names;
    if (r.ok()) {
      for (const core::TeamView& t : r.value()) names.push_back(t.name);
    }
    return names;
  }
  // The stored record of a team, if any.
  std::optional<core::TeamRecord> StoredTeam(const std::string& name) {
    auto meta = db_->ReadMeta();
    EXPECT_TRUE(meta.ok());
    if (!meta.ok()) return std::nullopt;
    for (const core::TeamRecord& r : meta->teams) {
      if (r.name == name) return r;
    }
    return std::nullopt;
  }
  size_t TasksInCore() {
    size_t n = 0;
    loop_->RunAndWait([&](CoreLoop::Context& c) { n = c.core.TaskCount(); });
    return n;
  }
  uint64_t Appended() { return journal_->stats().last_appended_seq; }

  std::string dir_;
  std::unique_ptr<store::Database> db_;
  std::unique_ptr<store::Journal> journal_;
  FakeDispatcher dispatcher_;
  std::unique_ptr<CoreLoop> loop_;
  LeaderState leader_;
  WorkerPool readers_{1};
  WorkerPool background_{1};
  Metrics metrics_;
  FakeAgentChannel agents_;
  RecordingAuthorizer authorizer_;
  std::unique_ptr<Application> app_;
  Caller caller_{Caller::Transport::kRest, "127.0.0.1:5000", {}};
  Caller agent_caller_{Caller::Transport::kGrpc, "ipv4:10.0.0.5:4000", {}};
};

TEST_F(ApplicationTest, SubmitAnswersOnceTheTaskIsDurable) {
  std::optional<core::Task> stored_at_reply;
  std::promise<Result<Submitted>> answer;
  app_->Submit(caller_, {Spec()}, [&](const Result<Submitted>& r) {
    auto stored = db_->GetTask(1);  // On the journal's thread, as the reply is sent.
    if (stored.ok()) stored_at_reply = *stored;
    answer.set_value(r);
  });
  Result<Submitted> r = answer.get_future().get();
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value().task, 1u);
  EXPECT_EQ(core::FormatTaskId(r.value().task), "task-1");
  EXPECT_GT(r.value().created_at, 0);
  ASSERT_TRUE(stored_at_reply.has_value()) << "answered before the task was stored";
  EXPECT_EQ(stored_at_reply->status, core::TaskStatus::kPending);
  EXPECT_EQ(stored_at_reply->created_at, r.value().created_at);

  Result<Submitted> second = Submit(Spec());
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second.value().task, 2u);
}

TEST_F(ApplicationTest, AJobArrayIsOneDurableWriteOfConsecutiveTasks) {
  const uint64_t before = Appended();
  std::optional<core::Task> last_at_reply;
  std::promise<Result<Submitted>> answer;
  SubmitRequest request{Spec()};
  request.array = 5;
  app_->Submit(caller_, request, [&](const Result<Submitted>& r) {
    auto stored = db_->GetTask(5);
    if (stored.ok()) last_at_reply = *stored;
    answer.set_value(r);
  });
  Result<Submitted> r = answer.get_future().get();
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(std::make_tuple(r.value().task, r.value().count), std::make_tuple(1u, 5));
  EXPECT_EQ(Appended(), before + 1) << "one batch for the whole array";
  ASSERT_TRUE(last_at_reply.has_value()) << "answered before the array was stored";
  EXPECT_EQ(std::make_tuple(last_at_reply->spec.array_index, last_at_reply->spec.array_size),
            std::make_tuple(4, 5));
  for (core::TaskNumber n = 1; n <= 5; ++n) {
    auto t = db_->GetTask(n);
    ASSERT_TRUE(t.ok() && t->has_value());
    EXPECT_EQ((*t)->spec.array_index, static_cast<int>(n - 1));
  }
  Result<Submitted> single = Submit(Spec());
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(std::make_tuple(single.value().task, single.value().count), std::make_tuple(6u, 1));
  auto t6 = db_->GetTask(6);
  ASSERT_TRUE(t6.ok() && t6->has_value());
  EXPECT_EQ(std::make_tuple((*t6)->spec.array_index, (*t6)->spec.array_size),
            std::make_tuple(-1, 0));
}

TEST_F(ApplicationTest, SnapshotCopiesTheDatabaseOnTheBackgroundPool) {
  ASSERT_TRUE(Submit(Spec()).ok());
  ASSERT_TRUE(Submit(Spec()).ok());
  std::thread::id ran_on;
  Result<store::SnapshotFile> r = Await<store::SnapshotFile>([&](Reply<store::SnapshotFile> reply) {
    app_->Snapshot(caller_, [&, reply](const Result<store::SnapshotFile>& got) {
      ran_on = std::this_thread::get_id();
      reply(got);
    });
  });
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_NE(ran_on, std::this_thread::get_id());
  EXPECT_EQ(r.value().tasks, 2);
  EXPECT_EQ(r.value().meta.last_applied_seq, Appended());
  EXPECT_TRUE(std::filesystem::exists(r.value().path));
  EXPECT_EQ(static_cast<int64_t>(std::filesystem::file_size(r.value().path)), r.value().bytes);
  std::filesystem::remove(r.value().path);
  {
    std::lock_guard<std::mutex> lock(authorizer_.mu);
    EXPECT_EQ(authorizer_.asked.back().action, Action::kTakeSnapshot);
  }
}

TEST_F(ApplicationTest, ASecondSnapshotWhileOneIsTakenIsUnavailable) {
  // The background pool is held, so the first snapshot waits there.
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  background_.Post([released] { released.wait(); });
  std::promise<Result<store::SnapshotFile>> first;
  app_->Snapshot(caller_, [&](const Result<store::SnapshotFile>& r) { first.set_value(r); });
  Result<store::SnapshotFile> second = Await<store::SnapshotFile>(
      [&](Reply<store::SnapshotFile> reply) { app_->Snapshot(caller_, reply); });
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(second.error().message, "a snapshot is being taken; ask again once it is done");
  release.set_value();
  Result<store::SnapshotFile> done = first.get_future().get();
  ASSERT_TRUE(done.ok()) << done.error().message;
  std::filesystem::remove(done.value().path);
  // Once it is done, the next is taken.
  Result<store::SnapshotFile> third = Await<store::SnapshotFile>(
      [&](Reply<store::SnapshotFile> reply) { app_->Snapshot(caller_, reply); });
  ASSERT_TRUE(third.ok()) << third.error().message;
  std::filesystem::remove(third.value().path);
}

TEST_F(ApplicationTest, SnapshotRefusedByTheAuthorizerTakesNothing) {
  authorizer_.deny = true;
  Result<store::SnapshotFile> r = Await<store::SnapshotFile>(
      [&](Reply<store::SnapshotFile> reply) { app_->Snapshot(caller_, reply); });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kForbidden);
  EXPECT_EQ(r.error().message, "take_snapshot is not allowed for you");
  for (const auto& e : std::filesystem::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename().string().find("snapshot"), std::string::npos) << e.path();
  }
}

TEST_F(ApplicationTest, SubmitWithAReservedEnvNameIsRefusedNamingTheField) {
  core::TaskSpec spec = Spec();
  spec.env = {{"CUDA_VISIBLE_DEVICES", "0"}};
  Result<Submitted> r = Submit(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.error().field, "env.CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(r.error().message,
            "env.CUDA_VISIBLE_DEVICES is set by dgpu for GPU isolation and cannot be given");
  EXPECT_EQ(TasksInCore(), 0u);
  EXPECT_EQ(Appended(), 0u);
}

TEST_F(ApplicationTest, CancelOfAnUnknownTaskIsNotFound) {
  Result<Done> r = Cancel(99);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(r.error().cause, StatusCode::kNotFound);
  EXPECT_EQ(r.error().message, "task task-99 not found");
  EXPECT_EQ(Appended(), 0u);
}

TEST_F(ApplicationTest, CancelOfAStoredFinishedTaskIsAConflict) {
  ASSERT_TRUE(Submit(Spec()).ok());
  ASSERT_TRUE(Cancel(1).ok());
  // Once durable, the finished task leaves memory; then only the database knows it.
  for (int i = 0; i < 200 && TasksInCore() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(TasksInCore(), 0u);
  Result<Done> r = Cancel(1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kConflict);
  EXPECT_EQ(r.error().message, "task-1 already finished with status cancelled");
  // A stored task is read on a reader thread; the view is valid during the callback only.
  std::optional<core::TaskStatus> status;
  Result<Done> read = Await<Done>([&](Reply<Done> reply) {
    app_->GetTask(caller_, 1, [&status, reply](const Result<TaskView>& got) {
      if (!got.ok()) return reply(got.error());
      status = got.value().task->status;
      reply(Done{});
    });
  });
  ASSERT_TRUE(read.ok()) << read.error().message;
  EXPECT_EQ(status, core::TaskStatus::kCancelled);
}

TEST_F(ApplicationTest, GraceOutsideItsBoundsIsRefusedNamingTheField) {
  ASSERT_TRUE(Submit(Spec()).ok());
  const uint64_t appended = Appended();
  for (int32_t grace : {-1, kMaxGraceSeconds + 1}) {
    Result<Done> r = Cancel(1, grace);
    ASSERT_FALSE(r.ok()) << grace;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(r.error().field, "grace_seconds");
    EXPECT_EQ(r.error().message, "grace_seconds must be an integer from 0 to 86400");
  }
  EXPECT_EQ(Appended(), appended);
  EXPECT_TRUE(Cancel(1, kMaxGraceSeconds).ok());
}

TEST_F(ApplicationTest, InvalidQuotaIsRefusedNamingTheField) {
  for (double online : {1.5, -0.25}) {
    Result<Done> r = SetQuota(online);
    ASSERT_FALSE(r.ok()) << online;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(r.error().field, "online_percent");
  }
  EXPECT_EQ(SetQuota(1.5).error().message, "online_percent must be between 0 and 1, got 1.5");
  EXPECT_EQ(Appended(), 0u);
  ASSERT_TRUE(SetQuota(0.25).ok());
  auto stored = db_->ReadMeta();
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->online_percent, 0.25);
}

TEST_F(ApplicationTest, WritesOnAStandbyNameTheLeader) {
  leader_.Set(false, 7);
  leader_.set_leader_http("10.0.0.1:8080");
  Result<Submitted> r = Submit(Spec());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kNotLeader);
  EXPECT_EQ(r.error().message, "this scheduler is a standby; the leader is at 10.0.0.1:8080");
  Result<FinishRecorded> f = Finish("a1", "task-1");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().cause, StatusCode::kUnavailable);
  EXPECT_EQ(f.error().message, "not the leader");
  EXPECT_EQ(Appended(), 0u);
}

// A registration is bounded: the id's characters and length, the node's GPU count
// (agent.max_gpus_per_node, 64 by default) and its indices. Nothing of a refused one is kept.
TEST_F(ApplicationTest, RegistrationsAreBounded) {
  for (const std::string& bad : {std::string("a/b"), std::string("a\nb"), std::string("-a"),
                                 std::string(64, 'a'), std::string("node 1")}) {
    Result<Registered> r = Register(bad, 1);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().cause, StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(r.error().field, "agent_id") << bad;
    EXPECT_NE(r.error().message.find("[A-Za-z0-9][A-Za-z0-9._-]{0,62}"), std::string::npos)
        << r.error().message;
  }
  Result<Registered> many = Register("big", 65);
  ASSERT_FALSE(many.ok());
  EXPECT_EQ(many.error().cause, StatusCode::kInvalidArgument);
  EXPECT_EQ(many.error().field, "gpus");
  EXPECT_EQ(many.error().message,
            "node big registers 65 GPUs; a node has at most 64 (agent.max_gpus_per_node of the "
            "scheduler)");

  RegisterRequest req;
  req.agent_id = "dup";
  req.epoch = 7;
  req.gpus = {{0, "A100", 40960, "", true, ""}, {0, "A100", 40960, "", true, ""}};
  Result<Registered> dup =
      Await<Registered>([&](Reply<Registered> r) { app_->RegisterNode(agent_caller_, req, r); });
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.error().message, "node dup registers GPU index 0 twice");
  req.gpus = {{64, "A100", 40960, "", true, ""}};
  Result<Registered> far =
      Await<Registered>([&](Reply<Registered> r) { app_->RegisterNode(agent_caller_, req, r); });
  ASSERT_FALSE(far.ok());
  EXPECT_EQ(far.error().message,
            "node dup registers GPU index 64; indices are 0 to 63 (agent.max_gpus_per_node of the "
            "scheduler)");
  loop_->RunAndWait([](CoreLoop::Context& c) { EXPECT_TRUE(c.core.Nodes().empty()); });

  ASSERT_TRUE(Register("node-1.rack_2", 64).ok());  // The largest node, an id of every kind.
  loop_->RunAndWait([](CoreLoop::Context& c) { EXPECT_EQ(c.core.Nodes().size(), 1u); });
}

TEST_F(ApplicationTest, AnAgentsFinishIsRecordedOnceAndItsDuplicateRecognised) {
  Result<Registered> reg = Register("a1", 1, {{"bogus", {0}}});
  ASSERT_TRUE(reg.ok()) << reg.error().message;
  EXPECT_EQ(reg.value().epoch, 7u);
  loop_->RunAndWait([&](CoreLoop::Context&) {
    EXPECT_EQ(agents_.sessions, std::vector<std::string>{"a1"});
    ASSERT_EQ(agents_.stops.size(), 1u);
    EXPECT_EQ(agents_.stops[0].tasks, std::vector<std::string>{"bogus"});
    EXPECT_EQ(agents_.stops[0].reason, core::StopReason::kReconcile);
  });
  ASSERT_TRUE(Submit(Spec()).ok());
  loop_->RunAndWait([](CoreLoop::Context&) {});  // The pass after the submission has run.
  {
    std::lock_guard<std::mutex> lock(dispatcher_.mu);
    EXPECT_EQ(dispatcher_.started, std::vector<core::TaskNumber>{1});
  }
  Result<FinishRecorded> f = Finish("a1", "task-1");
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f.value().epoch, 7u);
  auto stored = db_->GetTask(1);
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ((*stored)->status, core::TaskStatus::kSuccess);

  Result<FinishRecorded> again = Finish("a1", "task-1");
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, ErrorCode::kAlreadyExists);
  EXPECT_EQ(again.error().message, "task-1 finish already recorded");
  Result<FinishRecorded> stranger = Finish("a2", "task-1");
  ASSERT_FALSE(stranger.ok());
  EXPECT_EQ(stranger.error().cause, StatusCode::kFailedPrecondition);
  EXPECT_EQ(stranger.error().message, "agent a2 is not registered");
  Result<FinishRecorded> garbled = Finish("a1", "task-x");
  ASSERT_FALSE(garbled.ok());
  EXPECT_EQ(garbled.error().field, "task_id");
  EXPECT_EQ(garbled.error().message, "task_id \"task-x\" is not a task id");
}

// The finish of run 1, sent again after its answer was lost, while run 2 of the task runs on the
// same node: acknowledged as recorded, and run 2 goes on.
TEST_F(ApplicationTest, ALateFinishOfAnEarlierRunIsAcknowledgedAndChangesNothing) {
  ASSERT_TRUE(Register("a1", 1).ok());
  core::TaskSpec spec = Spec();
  spec.max_retries = 1;
  spec.retry_backoff_seconds = 1;
  ASSERT_TRUE(Submit(spec).ok());
  loop_->RunAndWait([](CoreLoop::Context&) {});
  ASSERT_TRUE(Finish("a1", "task-1", 1, /*success=*/false).ok());
  // The retry starts once its second of backoff is over.
  for (int i = 0; i < 100; ++i) {
    {
      std::lock_guard<std::mutex> lock(dispatcher_.mu);
      if (dispatcher_.started.size() == 2) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  {
    std::lock_guard<std::mutex> lock(dispatcher_.mu);
    ASSERT_EQ(dispatcher_.started, (std::vector<core::TaskNumber>{1, 1}));
    EXPECT_EQ(dispatcher_.runs, (std::vector<int>{1, 2}));
  }
  Result<FinishRecorded> late = Finish("a1", "task-1", 1, /*success=*/false);
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.error().code, ErrorCode::kAlreadyExists);
  EXPECT_EQ(late.error().message, "task-1 run 1 has ended already; run 2 is the latest");
  loop_->RunAndWait([](CoreLoop::Context& c) {
    EXPECT_EQ(c.core.FindTask(1)->status, core::TaskStatus::kRunning);
  });
  ASSERT_TRUE(Finish("a1", "task-1", 2).ok());
  auto stored = db_->GetTask(1);
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ(std::make_tuple((*stored)->status, (*stored)->attempts, (*stored)->retries),
            std::make_tuple(core::TaskStatus::kSuccess, 2, 1));
}

// --- Teams -------------------------------------------------------------------------------------

TeamRequest Team(std::string name, std::optional<int> online, std::optional<int> batch,
                 std::optional<int> max_gpus = std::nullopt,
                 std::optional<double> weight = std::nullopt) {
  return TeamRequest{std::move(name), online, batch, max_gpus, weight};
}

core::TaskSpec SpecOf(const std::string& team, core::Priority priority = core::Priority::kHigh) {
  core::TaskSpec s = Spec();
  s.team = team;
  s.priority = priority;
  return s;
}

TEST_F(ApplicationTest, SetTeamIsDurableAndAnsweredWithTheTeamAsItIsThen) {
  ASSERT_TRUE(Register("a1", 10).ok());  // Quotas: online 7, batch 3.
  Result<core::TeamView> set = SetTeam(Team("vision", 4, 2, 10, 2.0));
  ASSERT_TRUE(set.ok()) << set.error().message;
  EXPECT_EQ(set.value().name, "vision");
  EXPECT_TRUE(set.value().configured);
  EXPECT_EQ(set.value().limits, (core::TeamLimits{4, 2, 10, 2.0}));
  EXPECT_EQ(set.value().classes[0].guaranteed, 4);
  EXPECT_EQ(set.value().classes[1].guaranteed, 2);
  EXPECT_EQ(set.value().pending, 0u);
  {
    std::lock_guard<std::mutex> lock(authorizer_.mu);
    EXPECT_EQ(authorizer_.asked.back().action, Action::kSetTeam);
    EXPECT_EQ(authorizer_.asked.back().target.team, "vision");
  }
  // Stored by the time the answer came.
  std::optional<core::TeamRecord> stored = StoredTeam("vision");
  ASSERT_TRUE(stored.has_value());
  EXPECT_TRUE(stored->set);
  EXPECT_FALSE(stored->deleted);
  EXPECT_EQ(stored->limits, (core::TeamLimits{4, 2, 10, 2.0}));

  Result<core::TeamView> got = GetTeam("vision");
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(got.value().limits, (core::TeamLimits{4, 2, 10, 2.0}));
  EXPECT_EQ(got.value().classes[0].guaranteed, 4);
  // A team without limits, tasks or usage ("default") is not listed.
  EXPECT_EQ(TeamNames(), std::vector<std::string>{"vision"});

  // What a request leaves out stays as it was; max_gpus -1 lifts the cap.
  Result<core::TeamView> weight_only = SetTeam(Team("vision", {}, {}, {}, 0.5));
  ASSERT_TRUE(weight_only.ok()) << weight_only.error().message;
  EXPECT_EQ(weight_only.value().limits, (core::TeamLimits{4, 2, 10, 0.5}));
  Result<core::TeamView> no_cap = SetTeam(Team("vision", {}, 0, -1));
  ASSERT_TRUE(no_cap.ok()) << no_cap.error().message;
  EXPECT_EQ(no_cap.value().limits, (core::TeamLimits{4, 0, -1, 0.5}));
  EXPECT_EQ(StoredTeam("vision")->limits, (core::TeamLimits{4, 0, -1, 0.5}));

  // A new team takes the defaults for what is left out: no guarantee, no cap, weight 1.
  Result<core::TeamView> fresh = SetTeam(Team("nlp", {}, 1));
  ASSERT_TRUE(fresh.ok()) << fresh.error().message;
  EXPECT_EQ(fresh.value().limits, (core::TeamLimits{0, 1, -1, 1.0}));
  EXPECT_EQ(TeamNames(), (std::vector<std::string>{"nlp", "vision"}));
}

TEST_F(ApplicationTest, GetTeamOfAnUnknownNameIsNotFound) {
  Result<core::TeamView> r = GetTeam("ghost");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(r.error().cause, StatusCode::kNotFound);
  EXPECT_EQ(r.error().message, "team ghost not found");
  // Every task has a team: the default one is known, without limits.
  Result<core::TeamView> d = GetTeam("default");
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_FALSE(d.value().configured);
  EXPECT_EQ(d.value().limits, core::TeamLimits{});
}

TEST_F(ApplicationTest, ARefusedSetNamesTheFieldAndLeavesNoTeamBehind) {
  ASSERT_TRUE(Register("a1", 10).ok());  // Quotas: online 7, batch 3.
  ASSERT_TRUE(SetTeam(Team("vision", 4, 2, 10)).ok());
  const uint64_t appended = Appended();
  struct Case {
    TeamRequest request;
    std::string field;
    std::string message;
  };
  const std::vector<Case> cases = {
      {Team("Bad", 1, {}), "name",
       "team names are 1 to 63 characters of a-z, 0-9, '_' and '-', starting with a letter or "
       "digit, got 'Bad'"},
      {Team("", 1, {}), "name",
       "team names are 1 to 63 characters of a-z, 0-9, '_' and '-', starting with a letter or "
       "digit, got ''"},
      {Team("nlp", 2, 2, 3), "max_gpus",
       "max_gpus (3) is below the team's guarantees (online 2 + batch 2)"},
      {Team("nlp", -1, {}), "online", "online must not be negative"},
      {Team("nlp", {}, -1), "batch", "batch must not be negative"},
      {Team("nlp", {}, {}, -2), "max_gpus", "max_gpus must not be negative"},
      {Team("nlp", {}, {}, {}, 0.0), "weight", "weight must be a number above 0"},
      // With vision's 4, online guarantees would reach 8 of the 7 online GPUs.
      {Team("nlp", 4, {}), "online",
       "online: the online guarantees would add up to 8 GPUs, more than the online quota of 7"},
      {Team("nlp", {}, 2), "batch",
       "batch: the batch guarantees would add up to 4 GPUs, more than the batch quota of 3"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    Result<core::TeamView> r = SetTeam(c.request);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(r.error().cause, StatusCode::kInvalidArgument);
    EXPECT_EQ(r.error().field, c.field);
    EXPECT_EQ(r.error().message, c.message);
    Result<core::TeamView> after = GetTeam(c.request.name);
    ASSERT_FALSE(after.ok()) << "a refused set left team '" << c.request.name << "' behind";
    EXPECT_EQ(after.error().code, ErrorCode::kNotFound);
    EXPECT_EQ(StoredTeam(c.request.name), std::nullopt);
  }
  EXPECT_EQ(TeamNames(), std::vector<std::string>{"vision"});
  EXPECT_EQ(Appended(), appended) << "a refused set reached the journal";

  // A refused change of a team leaves its limits as they were; its own guarantee does not count
  // twice (7 = vision's new 7, not 4 + 7).
  Result<core::TeamView> below = SetTeam(Team("vision", {}, {}, 5));
  ASSERT_FALSE(below.ok());
  EXPECT_EQ(below.error().field, "max_gpus");
  EXPECT_EQ(below.error().message,
            "max_gpus (5) is below the team's guarantees (online 4 + batch 2)");
  EXPECT_EQ(GetTeam("vision").value().limits, (core::TeamLimits{4, 2, 10, 1.0}));
  EXPECT_EQ(StoredTeam("vision")->limits, (core::TeamLimits{4, 2, 10, 1.0}));
  Result<core::TeamView> whole_class = SetTeam(Team("vision", 7, {}));
  ASSERT_TRUE(whole_class.ok()) << whole_class.error().message;
  EXPECT_EQ(whole_class.value().limits, (core::TeamLimits{7, 2, 10, 1.0}));
}

TEST_F(ApplicationTest, DeleteTeamIsNotFoundWithoutLimitsAndAConflictWhileItHasLiveTasks) {
  for (const char* name : {"ghost", "default"}) {
    Result<Done> r = DeleteTeam(name);
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.error().code, ErrorCode::kNotFound);
    EXPECT_EQ(r.error().cause, StatusCode::kNotFound);
    EXPECT_EQ(r.error().message, std::string("team ") + name + " has no limits to delete");
  }
  EXPECT_EQ(Appended(), 0u);

  ASSERT_TRUE(SetTeam(Team("vision", 0, 0)).ok());
  Result<Submitted> pending = Submit(SpecOf("vision"));  // No GPUs: it waits.
  ASSERT_TRUE(pending.ok()) << pending.error().message;
  const uint64_t appended = Appended();
  Result<Done> busy = DeleteTeam("vision");
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.error().code, ErrorCode::kConflict);
  EXPECT_EQ(busy.error().cause, StatusCode::kFailedPrecondition);
  EXPECT_EQ(busy.error().message,
            "team vision has 1 pending task(s) and holds 0 GPU(s); delete it once they have ended");
  EXPECT_EQ(Appended(), appended);
  EXPECT_TRUE(GetTeam("vision").value().configured);
  EXPECT_EQ(GetTeam("vision").value().pending, 1u);

  // Running, it holds its GPU.
  ASSERT_TRUE(Register("a1", 2).ok());
  loop_->RunAndWait([](CoreLoop::Context&) {});  // The pass after the registration has run.
  {
    std::lock_guard<std::mutex> lock(dispatcher_.mu);
    ASSERT_EQ(dispatcher_.started, std::vector<core::TaskNumber>{pending.value().task});
  }
  busy = DeleteTeam("vision");
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.error().code, ErrorCode::kConflict);
  EXPECT_EQ(busy.error().message,
            "team vision has 0 pending task(s) and holds 1 GPU(s); delete it once they have ended");

  ASSERT_TRUE(Finish("a1", core::FormatTaskId(pending.value().task)).ok());
  Result<Done> deleted = DeleteTeam("vision");
  ASSERT_TRUE(deleted.ok()) << deleted.error().message;
  std::optional<core::TeamRecord> stored = StoredTeam("vision");
  ASSERT_TRUE(stored.has_value());
  EXPECT_TRUE(stored->deleted);
  EXPECT_FALSE(stored->set);
  // The name stays known (its task named it), without limits; a second delete finds none.
  Result<core::TeamView> after = GetTeam("vision");
  ASSERT_TRUE(after.ok()) << after.error().message;
  EXPECT_FALSE(after.value().configured);
  EXPECT_EQ(after.value().limits, core::TeamLimits{});
  Result<Done> again = DeleteTeam("vision");
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(again.error().message, "team vision has no limits to delete");
}

TEST_F(ApplicationTest, SubmitValidatesTheTeamAndThePreemptionGrace) {
  struct Case {
    core::TaskSpec spec;
    std::string field;
    std::string message;
  };
  core::TaskSpec long_grace = Spec();
  long_grace.preemption_grace_seconds = kMaxGraceSeconds + 1;
  core::TaskSpec below_default = Spec();
  below_default.preemption_grace_seconds = -2;
  const std::vector<Case> cases = {
      {SpecOf("Vision"), "team",
       "team must be 1 to 63 characters of a-z, 0-9, '_' and '-', starting with a letter or "
       "digit, got 'Vision'"},
      {SpecOf(""), "team",
       "team must be 1 to 63 characters of a-z, 0-9, '_' and '-', starting with a letter or "
       "digit, got ''"},
      {SpecOf(std::string(64, 'a')), "team",
       "team must be 1 to 63 characters of a-z, 0-9, '_' and '-', starting with a letter or "
       "digit, got '" +
           std::string(64, 'a') + "'"},
      {long_grace, "preemption_grace_seconds",
       "preemption_grace_seconds must be between 0 and 86400"},
      {below_default, "preemption_grace_seconds",
       "preemption_grace_seconds must be between 0 and 86400"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    Result<Submitted> r = Submit(c.spec);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(r.error().field, c.field);
    EXPECT_EQ(r.error().message, c.message);
  }
  EXPECT_EQ(TasksInCore(), 0u);
  EXPECT_EQ(Appended(), 0u);
  EXPECT_EQ(TeamNames(), std::vector<std::string>{});

  // A team without limits needs no setting up: its tasks share the rest of the classes.
  core::TaskSpec ok = SpecOf("speech", core::Priority::kLow);
  ok.user = "bob";
  ok.preemptible = false;
  ok.preemption_grace_seconds = kMaxGraceSeconds;
  Result<Submitted> r = Submit(ok);
  ASSERT_TRUE(r.ok()) << r.error().message;
  {
    std::lock_guard<std::mutex> lock(authorizer_.mu);
    EXPECT_EQ(authorizer_.asked.back().action, Action::kSubmitTask);
    EXPECT_EQ(authorizer_.asked.back().target.team, "speech");
  }
  auto stored = db_->GetTask(r.value().task);
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ((*stored)->spec.team, "speech");
  EXPECT_EQ((*stored)->spec.user, "bob");
  EXPECT_FALSE((*stored)->spec.preemptible);
  EXPECT_EQ((*stored)->spec.preemption_grace_seconds, 86400);
  EXPECT_EQ(TeamNames(), std::vector<std::string>{"speech"});
  Result<core::TeamView> speech = GetTeam("speech");
  ASSERT_TRUE(speech.ok());
  EXPECT_FALSE(speech.value().configured);
  EXPECT_EQ(speech.value().pending, 1u);
}

TEST_F(ApplicationTest, ListTasksFiltersByTeam) {
  ASSERT_TRUE(Submit(SpecOf("vision")).ok());  // task-1
  ASSERT_TRUE(Submit(Spec()).ok());            // task-2, team default
  ASSERT_TRUE(Submit(SpecOf("vision")).ok());  // task-3
  auto list = [&](std::optional<std::string> team) {
    std::vector<core::TaskNumber> ids;
    ListTasksRequest request;
    request.team = std::move(team);
    Result<Done> r = Await<Done>([&](Reply<Done> reply) {
      app_->ListTasks(caller_, request, [&ids, reply](const Result<TaskPage>& page) {
        if (!page.ok()) return reply(page.error());
        for (const TaskView& v : page.value().tasks) ids.push_back(v.task->id);
        reply(Done{});
      });
    });
    EXPECT_TRUE(r.ok()) << r.error().message;
    std::sort(ids.begin(), ids.end());
    return ids;
  };
  EXPECT_EQ(list("vision"), (std::vector<core::TaskNumber>{1, 3}));
  EXPECT_EQ(list("default"), (std::vector<core::TaskNumber>{2}));
  EXPECT_EQ(list("nobody"), (std::vector<core::TaskNumber>{}));
  EXPECT_EQ(list(std::nullopt), (std::vector<core::TaskNumber>{1, 2, 3}));
}

TEST_F(ApplicationTest, TeamWritesOnAStandbyNameTheLeader) {
  leader_.Set(false, 7);
  leader_.set_leader_http("10.0.0.1:8080");
  Result<core::TeamView> set = SetTeam(Team("vision", 1, {}));
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.error().code, ErrorCode::kNotLeader);
  EXPECT_EQ(set.error().message, "this scheduler is a standby; the leader is at 10.0.0.1:8080");
  Result<Done> del = DeleteTeam("vision");
  ASSERT_FALSE(del.ok());
  EXPECT_EQ(del.error().code, ErrorCode::kNotLeader);
  EXPECT_EQ(Appended(), 0u);
  EXPECT_EQ(GetTeam("vision").error().code, ErrorCode::kNotFound);
}

// A denying authorizer: each use case answers forbidden, and nothing changed anywhere.
class DeniedTest : public ApplicationTest {
 protected:
  void SetUp() override {
    ApplicationTest::SetUp();
    ASSERT_TRUE(Submit(Spec()).ok());  // task-1, pending (no nodes).
    ASSERT_TRUE(Register("a1", 0).ok());
    authorizer_.deny = true;
    appended_ = Appended();
  }
  template <typename T>
  void ExpectDenied(const Result<T>& r, Action action) {
    ASSERT_FALSE(r.ok()) << ToString(action);
    EXPECT_EQ(r.error().code, ErrorCode::kForbidden);
    EXPECT_EQ(r.error().cause, StatusCode::kPermissionDenied);
    EXPECT_EQ(r.error().message, std::string(ToString(action)) + " is not allowed for you");
    std::lock_guard<std::mutex> lock(authorizer_.mu);
    ASSERT_FALSE(authorizer_.asked.empty());
    EXPECT_EQ(authorizer_.asked.back().action, action);
  }
  void ExpectNothingChanged() {
    EXPECT_EQ(Appended(), appended_) << "a refused command reached the journal";
    EXPECT_EQ(TasksInCore(), 1u);
    auto second = db_->GetTask(2);
    ASSERT_TRUE(second.ok());
    EXPECT_FALSE(second->has_value());
    auto first = db_->GetTask(1);
    ASSERT_TRUE(first.ok() && first->has_value());
    EXPECT_EQ((*first)->status, core::TaskStatus::kPending);
    auto meta = db_->ReadMeta();
    ASSERT_TRUE(meta.ok());
    EXPECT_FALSE(meta->online_percent.has_value());
  }
  uint64_t appended_ = 0;
};

TEST_F(DeniedTest, SubmitLeavesNoTaskAndNoJournalEntry) {
  core::TaskSpec spec = Spec(2);
  spec.priority = core::Priority::kLow;
  ExpectDenied(Submit(spec), Action::kSubmitTask);
  {
    std::lock_guard<std::mutex> lock(authorizer_.mu);
    EXPECT_EQ(authorizer_.asked.back().target.priority, core::Priority::kLow);
    EXPECT_EQ(authorizer_.asked.back().peer, "127.0.0.1:5000");
  }
  ExpectNothingChanged();
}

TEST_F(DeniedTest, CancelLeavesTheTaskPending) {
  ExpectDenied(Cancel(1), Action::kCancelTask);
  {
    std::lock_guard<std::mutex> lock(authorizer_.mu);
    EXPECT_EQ(authorizer_.asked.back().target.task, 1u);
  }
  ExpectNothingChanged();
}

TEST_F(DeniedTest, SetQuotaLeavesTheQuota) {
  ExpectDenied(SetQuota(0.2), Action::kSetQuota);
  ExpectNothingChanged();
}

TEST_F(DeniedTest, TeamWritesLeaveNoTeam) {
  ExpectDenied(SetTeam(Team("vision", 1, 1)), Action::kSetTeam);
  {
    std::lock_guard<std::mutex> lock(authorizer_.mu);
    EXPECT_EQ(authorizer_.asked.back().target.team, "vision");
  }
  ExpectDenied(DeleteTeam("default"), Action::kSetTeam);
  {
    std::lock_guard<std::mutex> lock(authorizer_.mu);
    EXPECT_EQ(authorizer_.asked.back().target.team, "default");
  }
  loop_->RunAndWait(
      [](CoreLoop::Context& c) { EXPECT_FALSE(c.core.FindTeam("vision").has_value()); });
  ExpectNothingChanged();
}

TEST_F(DeniedTest, AgentCommandsChangeNothing) {
  ExpectDenied(Register("a2", 4), Action::kRegisterNode);
  ExpectDenied(Finish("a1", "task-1"), Action::kReportFinish);
  ExpectDenied(Await<HeartbeatAnswer>([&](Reply<HeartbeatAnswer> r) {
                 app_->Heartbeat(agent_caller_, {"a1", 7, {}, {}}, r);
               }),
               Action::kNodeHeartbeat);
  ExpectDenied(Await<Done>([&](Reply<Done> r) {
                 app_->ReportStarts(agent_caller_, {"a1", 7, {{"task-1", 1}}}, r);
               }),
               Action::kReportStart);
  loop_->RunAndWait([](CoreLoop::Context& c) { EXPECT_FALSE(c.core.FindNode("a2").has_value()); });
  ExpectNothingChanged();
}

TEST_F(DeniedTest, ReadsAreRefusedToo) {
  ExpectDenied(Await<TaskView>([&](Reply<TaskView> r) { app_->GetTask(caller_, 1, r); }),
               Action::kReadTasks);
  ExpectDenied(Await<TaskPage>([&](Reply<TaskPage> r) { app_->ListTasks(caller_, {}, r); }),
               Action::kReadTasks);
  ExpectDenied(Await<QuotaState>([&](Reply<QuotaState> r) { app_->GetQuota(caller_, r); }),
               Action::kReadCluster);
  ExpectDenied(Await<std::vector<core::GpuView>>(
                   [&](Reply<std::vector<core::GpuView>> r) { app_->ListGpus(caller_, r); }),
               Action::kReadCluster);
  ExpectDenied(Await<std::vector<core::NodeView>>(
                   [&](Reply<std::vector<core::NodeView>> r) { app_->ListAgents(caller_, r); }),
               Action::kReadCluster);
  ExpectDenied(Await<GaugeSnapshot>([&](Reply<GaugeSnapshot> r) { app_->Gauges(caller_, r); }),
               Action::kReadCluster);
  ExpectDenied(Await<std::vector<core::TeamView>>(
                   [&](Reply<std::vector<core::TeamView>> r) { app_->ListTeams(caller_, r); }),
               Action::kReadCluster);
  ExpectDenied(GetTeam("default"), Action::kReadCluster);
  {
    std::lock_guard<std::mutex> lock(authorizer_.mu);
    EXPECT_EQ(authorizer_.asked.back().target.team, "default");
  }
}

}  // namespace
}  // namespace dgpu::scheduler
