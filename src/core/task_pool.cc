// Task records: the pool they live in, their recycling, and what is fetched into cache ahead
// of the work that touches them.
#include <sys/mman.h>

#include <cstdlib>
#include <new>

#include "core/core_internal.h"

namespace dgpu::core {

SchedulerCore::TaskRecord* SchedulerCore::TaskPool::New() {
  if (!free_.empty()) {
    TaskRecord* t = free_.back();
    free_.pop_back();
    return t;
  }
  if (used_in_last_ == kChunk) {
    void* memory = std::aligned_alloc(kChunkBytes, kChunkBytes);
    if (memory == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    (void)madvise(memory, kChunkBytes, MADV_HUGEPAGE);  // A hint; without huge pages, 4 KiB ones.
#endif
    auto* records = static_cast<TaskRecord*>(memory);
    std::uninitialized_default_construct_n(records, kChunk);
    chunks_.push_back(records);
    used_in_last_ = 0;
  }
  return &chunks_.back()[used_in_last_++];
}

SchedulerCore::TaskPool::~TaskPool() {
  for (TaskRecord* chunk : chunks_) {
    std::destroy_n(chunk, kChunk);
    std::free(chunk);
  }
}

void SchedulerCore::TaskPool::Delete(TaskRecord* t) {
  // The allocation's block (and the GPU list inside it) stays with the slot for its next start,
  // moved aside without reading it: it was last touched when the task started.
  if (!t->allocation.empty()) t->spare_allocation = std::move(t->allocation);
  t->allocation.clear();
  // Every member but the spec back to its default, one by one: assigning a new record instead
  // costs a decision about a fifth more (it reads and rewrites the spec's cold lines). The spec
  // is left as it is: Submit and Restore assign all of it. Its lines are fetched now, for
  // writing, instead of being read: the next submission most likely reuses this record.
  // TaskPoolTest.ARecycledRecordReadsLikeANewOne compares a reused record with a new one
  // (Task's == covers every member), so a member missed here fails it.
  t->error.clear();
  t->created_at = 0;
  t->id = 0;
  t->queue_seq = 0;
  t->started_at = 0;
  t->finished_at = 0;
  t->attempts = 0;
  t->exit_code = 0;
  t->status = TaskStatus::kPending;
  t->stopping = false;
  t->stop_reason = StopReason::kNone;
  t->borrowed = false;
  t->preemptions = 0;
  t->preempted_by = 0;
  t->retries = 0;
  t->retry_at = 0;
  t->node_slot = kNoSlot;
  t->team = 0;
  t->eligible_counted = false;
  t->incoming_counted = false;
  t->start_order = 0;
  t->shape = nullptr;
  PrefetchLines<true>(&t->spec, sizeof(TaskSpec));
  free_.push_back(t);
}

SchedulerCore::TaskRecord* SchedulerCore::NewTask(TaskNumber id) {
  TaskRecord* t = task_pool_.New();
  t->id = id;
  tasks_.Insert(id, t);
  return t;
}

// The tasks behind a queue head are started soon after it, several in a pass when a large task
// ends, and their queue entries and records were written long ago, at submission: fetch what a
// start touches some places ahead, in three steps, each reading what the previous one fetched
// (the queue entry, the record, then the allocation buffers it points to).
void SchedulerCore::PrefetchQueued(const Shape& shape) const {
  const TaskQueue& queue = shape.tasks;
  queue.PrefetchEntry(2 * kStartPrefetchDistance);  // Read by the steps below, later.
  if (const Task* later = queue.Peek(kStartPrefetchDistance)) {
    PrefetchLines(HotPart(later), kTaskHotBytes);
  }
  if (const Task* soon = queue.Peek(kStartPrefetchDistance / 2)) {
    const auto* record = static_cast<const TaskRecord*>(soon);
    if (!record->spare_allocation.empty()) __builtin_prefetch(record->spare_allocation.data(), 1);
  }
}

void SchedulerCore::PrefetchTask(TaskNumber n, const Task* t) const {
  tasks_.Prefetch(n);
  PrefetchLines(HotPart(t), kTaskHotBytes);
}

void SchedulerCore::PrefetchTaskNode(const Task* t) const {
  const uint32_t slot = static_cast<const TaskRecord*>(t)->node_slot;
  if (slot >= nodes_.size()) return;
  PrefetchLines(nodes_[slot].get(), kNodeHotBytes);
}

}  // namespace dgpu::core
