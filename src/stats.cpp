// Shared-memory counters.  Every backend adds with atomics, so counting costs a
// few nanoseconds on the hot path and needs no lock; the sweep and error
// fields, and where sweeps start, change rarely and share a spinlock.
#include "stats.hpp"

extern "C"
{
#include "access/xact.h"
#include "miscadmin.h"
#include "common/hashfn.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/memutils.h"
}

namespace idempotency::stats
{

// Where the sweep of a relation goes on: one slot per hash of (database,
// relation).  A slot holds another relation's position after a collision;
// its owner is checked on every read, so a sweep never takes it for its own.
struct SweepStart
{
    Oid database;
    Oid relation;
    BlockNumber block;
};
constexpr int sweep_start_slots = 256;

struct Shared
{
    pg_atomic_uint64 counters[counter_count];
    slock_t mutex; // guards the fields below
    TimestampTz last_sweep_at;
    int64 last_sweep_us;
    TimestampTz last_error_at;
    char last_error[256];
    SweepStart sweep_starts[sweep_start_slots];
};
// From ShmemInitStruct: raw shared memory, initialised by hand
// (attach_shared_memory), never destroyed; a SweepStart slot is assigned a
// whole value under the spinlock.
static_assert(fits_postgres_memory<SweepStart> && fits_postgres_memory<Shared>,
              "the statistics live in shared memory");

static Shared *shared = nullptr;
void reserve_shared_memory()
{
    RequestAddinShmemSpace(MAXALIGN(sizeof(Shared)));
}

void attach_shared_memory()
{
    LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
    bool found;
    shared = static_cast<Shared *>(ShmemInitStruct("idempotency stats", sizeof(Shared), &found));
    if (!found)
    {
        for (auto &counter : shared->counters)
            pg_atomic_init_u64(&counter, 0);
        SpinLockInit(&shared->mutex);
        shared->last_sweep_at = DT_NOBEGIN;
        shared->last_sweep_us = 0;
        shared->last_error_at = DT_NOBEGIN;
        shared->last_error[0] = '\0';
        memset(shared->sweep_starts, 0, sizeof(shared->sweep_starts));
    }
    LWLockRelease(AddinShmemInitLock);
}

bool available()
{
    return shared != nullptr;
}

void add(Counter counter, uint64 amount)
{
    if (shared)
        pg_atomic_fetch_add_u64(&shared->counters[counter], amount);
}

// The counts of writes not committed yet: a frame per open subtransaction
// level that wrote, innermost last.  A subtransaction's commit folds its
// frames into its parent's, its rollback drops them, so there are never more
// frames than nesting levels; the transaction's end empties the stack (its
// commit adding the counts first).  In TopMemoryContext, reused.
struct Frame
{
    SubTransactionId subxact;
    uint64 amounts[counter_count];
};
// An array in TopMemoryContext, grown with repalloc (which copies bytes).
static_assert(fits_postgres_memory<Frame>, "a Frame lives in palloc'd memory");
static Frame *frames = nullptr;
static int frame_count = 0;
static int frame_capacity = 0;

static Frame &push_frame(SubTransactionId subxact)
{
    if (frame_count == frame_capacity)
    {
        int capacity = Max(4, frame_capacity * 2);
        size_t bytes = size_t(capacity) * sizeof(Frame);
        frames =
            static_cast<Frame *>(frames == nullptr ? MemoryContextAlloc(TopMemoryContext, bytes)
                                                   : repalloc(frames, bytes));
        frame_capacity = capacity;
    }
    Frame &frame = frames[frame_count++];
    frame.subxact = subxact;
    memset(frame.amounts, 0, sizeof(frame.amounts));
    return frame;
}

static void on_transaction_event(XactEvent event, void *)
{
    if (frame_count == 0)
        return;
    if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PREPARE)
        for (int f = 0; f < frame_count; f++)
            for (int i = 0; i < counter_count; i++)
                if (frames[f].amounts[i] != 0)
                    add(Counter(i), frames[f].amounts[i]);
    if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PREPARE || event == XACT_EVENT_ABORT)
        frame_count = 0;
}

static void on_subtransaction_event(SubXactEvent event, SubTransactionId subxact,
                                    SubTransactionId parent, void *)
{
    if (frame_count == 0 || frames[frame_count - 1].subxact < subxact)
        return;
    if (event == SUBXACT_EVENT_ABORT_SUB)
    {
        while (frame_count > 0 && frames[frame_count - 1].subxact >= subxact)
            frame_count--;
    }
    else if (event == SUBXACT_EVENT_COMMIT_SUB)
    {
        uint64 amounts[counter_count] = {};
        while (frame_count > 0 && frames[frame_count - 1].subxact >= subxact)
        {
            frame_count--;
            for (int i = 0; i < counter_count; i++)
                amounts[i] += frames[frame_count].amounts[i];
        }
        Frame &into = frame_count > 0 && frames[frame_count - 1].subxact == parent
                          ? frames[frame_count - 1]
                          : push_frame(parent);
        for (int i = 0; i < counter_count; i++)
            into.amounts[i] += amounts[i];
    }
}

void add_if_committed(Counter counter, uint64 amount)
{
    if (!shared)
        return;
    static bool callbacks_registered = false;
    if (!callbacks_registered)
    {
        RegisterXactCallback(on_transaction_event, nullptr);
        RegisterSubXactCallback(on_subtransaction_event, nullptr);
        callbacks_registered = true;
    }
    SubTransactionId subxact = GetCurrentSubTransactionId();
    Frame &frame = frame_count > 0 && frames[frame_count - 1].subxact == subxact
                       ? frames[frame_count - 1]
                       : push_frame(subxact);
    frame.amounts[counter] += amount;
}

Snapshot read()
{
    Snapshot snapshot;
    for (int i = 0; i < counter_count; i++)
        snapshot.counters[i] = pg_atomic_read_u64(&shared->counters[i]);
    SpinLockAcquire(&shared->mutex);
    snapshot.last_sweep_at = shared->last_sweep_at;
    snapshot.last_sweep_us = shared->last_sweep_us;
    snapshot.last_error_at = shared->last_error_at;
    memcpy(snapshot.last_error, shared->last_error, sizeof(snapshot.last_error));
    SpinLockRelease(&shared->mutex);
    return snapshot;
}

void record_sweep(TimestampTz started, TimestampTz finished, uint64 expired)
{
    if (!shared)
        return;
    add(sweeps);
    add(keys_expired, expired);
    SpinLockAcquire(&shared->mutex);
    shared->last_sweep_at = finished;
    shared->last_sweep_us = finished - started;
    SpinLockRelease(&shared->mutex);
}

static SweepStart &sweep_start_slot(Oid relation)
{
    uint32 hash = hash_combine(murmurhash32(MyDatabaseId), murmurhash32(relation));
    return shared->sweep_starts[hash % sweep_start_slots];
}

BlockNumber sweep_start(Oid relation)
{
    if (!shared)
        return 0;
    SweepStart &slot = sweep_start_slot(relation);
    SpinLockAcquire(&shared->mutex);
    BlockNumber block = slot.database == MyDatabaseId && slot.relation == relation ? slot.block : 0;
    SpinLockRelease(&shared->mutex);
    return block;
}

void set_sweep_start(Oid relation, BlockNumber block)
{
    if (!shared)
        return;
    SweepStart &slot = sweep_start_slot(relation);
    SpinLockAcquire(&shared->mutex);
    slot = SweepStart{MyDatabaseId, relation, block};
    SpinLockRelease(&shared->mutex);
}

void record_error(const char *message)
{
    if (!shared)
        return;
    TimestampTz now = GetCurrentTimestamp();
    SpinLockAcquire(&shared->mutex);
    shared->last_error_at = now;
    strlcpy(shared->last_error, message, sizeof(shared->last_error));
    SpinLockRelease(&shared->mutex);
}

} // namespace idempotency::stats
