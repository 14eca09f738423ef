// Counters since server start, in shared memory when the library is preloaded.
#pragma once

#include "pg.hpp"

extern "C"
{
#include "storage/block.h"
#include "utils/timestamp.h"
}

namespace idempotency::stats
{

enum Counter
{
    claims,
    replays,
    mismatches,
    in_progress_answers,
    waits,
    wait_time_us,
    completes,
    server_errors_dropped,
    responses_omitted,
    responses_replaced,
    checkpoints,
    releases,
    forgets,
    keys_expired,
    sweeps,
    deferred_claims,
    deferred_fallbacks,
    counter_count
};

// Asks for the counters' shared memory (module.cpp's shmem_request_hook),
// then finds or initialises it (its shmem_startup_hook).
void reserve_shared_memory();
void attach_shared_memory();
// False when the library was not preloaded: counting is then a no-op.
bool available();
// Counts what happened whatever becomes of the transaction: answers, waits.
void add(Counter counter, uint64 amount = 1);
// Counts a write when, and only if, it commits: kept per subtransaction
// until then, dropped with a rollback (of the transaction or a savepoint).
// A prepared transaction's writes count at PREPARE TRANSACTION.
void add_if_committed(Counter counter, uint64 amount = 1);

struct Snapshot
{
    uint64 counters[counter_count];
    TimestampTz last_sweep_at; // DT_NOBEGIN: none yet
    int64 last_sweep_us;
    TimestampTz last_error_at; // DT_NOBEGIN: none yet
    char last_error[256];
};
Snapshot read();

void record_sweep(TimestampTz started, TimestampTz finished, uint64 expired);
// Where the next expiry sweep of a relation of this database starts reading
// (store::expire): a hint, 0 when there is none.  Kept in a small table
// indexed by a hash of the database and relation, so that a relation whose
// slot another took starts again at block 0: a later pass over it goes on.
BlockNumber sweep_start(Oid relation);
void set_sweep_start(Oid relation, BlockNumber block);
void record_error(const char *message);

} // namespace idempotency::stats
