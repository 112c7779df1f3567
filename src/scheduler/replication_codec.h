// The replication stream's records (proto/dgpu/v1/replication.proto) to and from the core's
// types.
//
// A task record is derived from the task's field table (core/task_fields.h): the record's
// field N is the table's field N, read and written through protobuf's reflection. How a field's
// value is spelled follows protocol.md's rules, from its C++ type and its default in a new Task:
// a proto field with explicit presence (`optional`) is sent only when the task's value differs
// from the default, and reads as the default when absent; a bool is sent as whether it differs
// from its default (so `not_preemptible` carries `preemptible`); a string or enum name that is
// empty reads as the default (an older leader's task without a team is in "default"); an
// integer below the field's minimum reads as the minimum.
#pragma once

#include <string>
#include <vector>

#include "core/types.h"
#include "dgpu/v1/replication.pb.h"

namespace dgpu::scheduler {

void TaskToRecord(const core::Task& t, dgpu::v1::TaskRecord* r);
core::Task TaskFromRecord(const dgpu::v1::TaskRecord& r);
void TeamToRecord(const core::TeamRecord& t, dgpu::v1::TeamRecord* r);
core::TeamRecord TeamFromRecord(const dgpu::v1::TeamRecord& r);
void NodeToRecord(const core::NodeRecord& n, dgpu::v1::NodeRecord* r);
core::NodeRecord NodeFromRecord(const dgpu::v1::NodeRecord& r);
void ChangeToRecord(const core::Change& c, dgpu::v1::ChangeRecord* r);
core::Change ChangeFromRecord(const dgpu::v1::ChangeRecord& r);

// What does not agree between the task table and TaskRecord's description (a field missing, or
// of another type): one line each; empty when they agree. The codec relies on it; a test calls it.
std::vector<std::string> TaskRecordMismatches();

}  // namespace dgpu::scheduler
