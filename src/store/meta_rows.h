// The database's other rows: teams set through the API, node modes, the meta values (epoch,
// sequence numbers, the online share) and task events. Private to the store.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "base/status.h"
#include "core/types.h"
#include "store/database.h"
#include "store/sqlite.h"

namespace dgpu::store {

Status ReadTeamRows(SqliteConnection& conn, std::vector<core::TeamRecord>* teams);
Status UpsertTeam(SqliteConnection& conn, const core::TeamRecord& r);
Status ReadNodeRows(SqliteConnection& conn, std::vector<core::NodeRecord>* nodes);
// A schedulable node has no row: its row is deleted.
Status UpsertNode(SqliteConnection& conn, const core::NodeRecord& r);
// `seq` orders the event among all others (see the schema).
Status InsertTaskEvent(SqliteConnection& conn, const core::TaskEventRecord& e, int64_t seq);
Status ReadMetaRows(SqliteConnection& conn, StoreMeta* meta);
Status SetMetaInt(SqliteConnection& conn, const char* key, uint64_t value);
// nullopt removes it (the configured share applies).
Status SetOnlinePercent(SqliteConnection& conn, std::optional<double> value);

}  // namespace dgpu::store
