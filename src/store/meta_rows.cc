#include "store/meta_rows.h"

#include <charconv>
#include <string>

namespace dgpu::store {
namespace {

constexpr char kUpsertTeamSql[] =
    "INSERT INTO teams (name, api_set, online, batch, max_gpus, weight, deleted, usage, usage_at, "
    "default_time_limit) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) "
    "ON CONFLICT (name) DO UPDATE SET api_set = excluded.api_set, online = excluded.online, "
    "batch = excluded.batch, max_gpus = excluded.max_gpus, weight = excluded.weight, "
    "deleted = excluded.deleted, usage = excluded.usage, usage_at = excluded.usage_at, "
    "default_time_limit = excluded.default_time_limit";
constexpr char kReadTeamsSql[] =
    "SELECT name, api_set, online, batch, max_gpus, weight, deleted, usage, usage_at, "
    "default_time_limit FROM teams ORDER BY name";
constexpr char kUpsertNodeSql[] =
    "INSERT INTO nodes (id, mode) VALUES (?1, ?2) ON CONFLICT (id) DO UPDATE SET mode = "
    "excluded.mode";
constexpr char kDeleteNodeSql[] = "DELETE FROM nodes WHERE id = ?1";
constexpr char kReadNodesSql[] = "SELECT id, mode FROM nodes ORDER BY id";
constexpr char kSetMetaSql[] =
    "INSERT INTO meta (key, value) VALUES (?1, ?2) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value";
constexpr char kDeleteMetaSql[] = "DELETE FROM meta WHERE key = ?1";
constexpr char kReadMetaSql[] = "SELECT key, value FROM meta";
// A batch applied again (the same sequence number) writes the same rows again.
constexpr char kInsertTaskEventSql[] =
    "INSERT OR REPLACE INTO task_events (task_id, seq, time, type, node_id, message) "
    "VALUES (?1, ?6, ?2, ?3, ?4, ?5)";

}  // namespace

Status ReadTeamRows(SqliteConnection& conn, std::vector<core::TeamRecord>* teams) {
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kReadTeamsSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  teams->clear();
  while (true) {
    int rc = sqlite3_step(*stmt);
    if (rc == SQLITE_DONE) return OkStatus();
    if (rc != SQLITE_ROW) return conn.Error(rc, "reading teams from");
    core::TeamRecord& r = teams->emplace_back();
    r.name = ColumnText(*stmt, 0);
    r.set = sqlite3_column_int(*stmt, 1) != 0;
    r.limits.online = sqlite3_column_int(*stmt, 2);
    r.limits.batch = sqlite3_column_int(*stmt, 3);
    r.limits.max_gpus = sqlite3_column_int(*stmt, 4);
    r.limits.weight = sqlite3_column_double(*stmt, 5);
    r.deleted = sqlite3_column_int(*stmt, 6) != 0;
    r.usage = sqlite3_column_double(*stmt, 7);
    r.usage_at = sqlite3_column_int64(*stmt, 8);
    r.limits.default_time_limit = sqlite3_column_int64(*stmt, 9);
    if (!core::IsValidTeamName(r.name) || r.limits.online < 0 || r.limits.batch < 0 ||
        r.limits.max_gpus < -1 || !(r.limits.weight > 0) || !(r.usage >= 0) ||
        r.limits.default_time_limit < 0 ||
        r.limits.default_time_limit > core::kMaxTimeLimitSeconds) {
      return DataLoss("team '" + r.name + "' in " + conn.path() + " has invalid limits");
    }
  }
}

Status UpsertTeam(SqliteConnection& conn, const core::TeamRecord& r) {
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kUpsertTeamSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  sqlite3_bind_text(*stmt, 1, r.name.data(), static_cast<int>(r.name.size()), SQLITE_STATIC);
  sqlite3_bind_int(*stmt, 2, r.set ? 1 : 0);
  sqlite3_bind_int(*stmt, 3, r.limits.online);
  sqlite3_bind_int(*stmt, 4, r.limits.batch);
  sqlite3_bind_int(*stmt, 5, r.limits.max_gpus);
  sqlite3_bind_double(*stmt, 6, r.limits.weight);
  sqlite3_bind_int(*stmt, 7, r.deleted ? 1 : 0);
  sqlite3_bind_double(*stmt, 8, r.usage);
  sqlite3_bind_int64(*stmt, 9, r.usage_at);
  sqlite3_bind_int64(*stmt, 10, r.limits.default_time_limit);
  return StepDone(conn, *stmt, "storing team " + r.name + " in");
}

Status ReadNodeRows(SqliteConnection& conn, std::vector<core::NodeRecord>* nodes) {
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kReadNodesSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  nodes->clear();
  while (true) {
    int rc = sqlite3_step(*stmt);
    if (rc == SQLITE_DONE) return OkStatus();
    if (rc != SQLITE_ROW) return conn.Error(rc, "reading node modes from");
    core::NodeRecord& r = nodes->emplace_back();
    r.id = ColumnText(*stmt, 0);
    const std::string mode = ColumnText(*stmt, 1);
    std::optional<core::NodeMode> m = core::ParseNodeMode(mode);
    if (r.id.empty() || !m) {
      return DataLoss("node '" + r.id + "' in " + conn.path() + " has an invalid mode '" + mode +
                      "'");
    }
    r.mode = *m;
  }
}

Status UpsertNode(SqliteConnection& conn, const core::NodeRecord& r) {
  const bool remove = r.mode == core::NodeMode::kSchedulable;
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(remove ? kDeleteNodeSql : kUpsertNodeSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  sqlite3_bind_text(*stmt, 1, r.id.data(), static_cast<int>(r.id.size()), SQLITE_STATIC);
  const std::string_view mode = core::ToString(r.mode);
  if (!remove)
    sqlite3_bind_text(*stmt, 2, mode.data(), static_cast<int>(mode.size()), SQLITE_STATIC);
  return StepDone(conn, *stmt, "storing the mode of node " + r.id + " in");
}

Status InsertTaskEvent(SqliteConnection& conn, const core::TaskEventRecord& e, int64_t seq) {
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kInsertTaskEventSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  sqlite3_bind_int64(*stmt, 1, ToInt64(e.task));
  sqlite3_bind_int64(*stmt, 6, seq);
  sqlite3_bind_int64(*stmt, 2, e.time);
  sqlite3_bind_text(*stmt, 3, e.type.data(), static_cast<int>(e.type.size()), SQLITE_STATIC);
  sqlite3_bind_text(*stmt, 4, e.node_id.data(), static_cast<int>(e.node_id.size()), SQLITE_STATIC);
  sqlite3_bind_text(*stmt, 5, e.message.data(), static_cast<int>(e.message.size()), SQLITE_STATIC);
  return StepDone(conn, *stmt, "storing an event of " + core::FormatTaskId(e.task) + " in");
}

Status ReadMetaRows(SqliteConnection& conn, StoreMeta* meta) {
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kReadMetaSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  *meta = StoreMeta{};
  while (true) {
    int rc = sqlite3_step(*stmt);
    if (rc == SQLITE_DONE) {
      if (Status st = ReadTeamRows(conn, &meta->teams); !st.ok()) return st;
      return ReadNodeRows(conn, &meta->nodes);
    }
    if (rc != SQLITE_ROW) return conn.Error(rc, "reading meta values from");
    std::string key = ColumnText(*stmt, 0);
    if (key == "online_percent") {
      meta->online_percent = sqlite3_column_double(*stmt, 1);
    } else if (key == "epoch") {
      meta->epoch = ToUint64(sqlite3_column_int64(*stmt, 1));
    } else if (key == "next_task_number") {
      meta->next_task_number = ToUint64(sqlite3_column_int64(*stmt, 1));
    } else if (key == "last_applied_seq") {
      meta->last_applied_seq = ToUint64(sqlite3_column_int64(*stmt, 1));
    }
  }
}

Status SetMetaInt(SqliteConnection& conn, const char* key, uint64_t value) {
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(kSetMetaSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  sqlite3_bind_text(*stmt, 1, key, -1, SQLITE_STATIC);
  sqlite3_bind_int64(*stmt, 2, ToInt64(value));
  return StepDone(conn, *stmt, std::string("storing ") + key + " in");
}

Status SetOnlinePercent(SqliteConnection& conn, std::optional<double> value) {
  StatusOr<sqlite3_stmt*> stmt = conn.Prepare(value ? kSetMetaSql : kDeleteMetaSql);
  if (!stmt.ok()) return stmt.status();
  StatementScope scope(*stmt);
  sqlite3_bind_text(*stmt, 1, "online_percent", -1, SQLITE_STATIC);
  if (value) sqlite3_bind_double(*stmt, 2, *value);
  return StepDone(conn, *stmt, "storing online_percent in");
}

}  // namespace dgpu::store
