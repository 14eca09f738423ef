// Shared-memory counters.  Every backend adds with atomics, so counting costs a
// few nanoseconds on the hot path and needs no lock; the sweep and error
// fields change rarely and share a spinlock.
#include "stats.hpp"

extern "C"
{
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
}

namespace idempotency::stats
{

struct Shared
{
    pg_atomic_uint64 counters[counter_count];
    slock_t mutex; // guards the fields below
    TimestampTz last_sweep_at;
    int64 last_sweep_us;
    TimestampTz last_error_at;
    char last_error[256];
};

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
