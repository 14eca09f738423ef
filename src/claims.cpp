// A record's life, from the decision of a begin to its end: see claims.hpp
// for the rules.  The rule a piece of code keeps is named in its comment;
// the shared claims table below it is shared_claims.cpp.
#include "claims.hpp"
#include "boundary.hpp"
#include "settings.hpp"
#include "shared_claims.hpp"
#include "stats.hpp"
#include "unsettled.hpp"

extern "C"
{
#include "access/xact.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
}

namespace idempotency::claims
{

using store::Record;
using store::Storage;
using store::Writer;

TimestampTz plus_interval(TimestampTz t, const Interval *interval)
{
    return DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval, TimestampTzGetDatum(t),
                                                   IntervalPGetDatum(interval)));
}

// Rule E: a record past its expiry is as good as absent -- unless it is an
// unfinished claim whose lease still runs.
bool expired(const Record &record, TimestampTz now)
{
    return record.expires_at() <= now && (record.completed() || record.lease_expires_at() <= now);
}

bool live(const Record &record, TimestampTz now)
{
    return record.found && !(record.writer == Writer::committed && expired(record, now));
}

// ---------------------------------------------------------------------------
// What a begin finds, and what it may do about it
// ---------------------------------------------------------------------------

// retry_after reported for a claim whose transaction has not committed yet:
// its lease has not started, so there is nothing better to say.
constexpr int64 uncommitted_retry_after_us = USECS_PER_SEC;

// What the newest version of a key means to a caller (the states of
// claims.hpp).
enum class KeyState
{
    absent,           // no row, and nobody is changing the key: claim it
    expired,          // past its expiry: claim it as if absent (E)
    lease_ended,      // unfinished claim whose lease ended (committed or own): take it over (T)
    dead_mismatch,    // the same, for another request: taken over only when asked (T)
    own_claim,        // claimed by the calling transaction already
    replay,           // completed for the same request
    mismatch,         // held or completed for another request
    held_uncommitted, // claimed, or being deleted, by a transaction still in progress
    held_leased       // committed unfinished claim, lease running
};

static KeyState classify(const Record &record, const BeginRequest &request, TimestampTz now)
{
    if (!record.found)
        return record.held_by_other() ? KeyState::held_uncommitted : KeyState::absent;
    bool same_request =
        request_hash_equal(record.request(), datum_get_request_hash(request.request));
    if (record.held_by_other())
        return same_request ? KeyState::held_uncommitted : KeyState::mismatch;
    if (record.writer == Writer::committed && expired(record, now))
        return KeyState::expired;
    // Rule T: an unfinished claim whose lease has ended, committed or this
    // transaction's own after idempotency_release() or a dropped server
    // error.  Answering claimed on such an own claim without renewing it
    // would let another caller take it over once this transaction commits.
    bool dead =
        record.writer != Writer::other && !record.completed() && record.lease_expires_at() <= now;
    if (!same_request)
        return dead && request.take_over_mismatch ? KeyState::dead_mismatch : KeyState::mismatch;
    if (record.completed())
        return KeyState::replay;
    if (dead)
        return KeyState::lease_ended;
    return record.writer == Writer::self ? KeyState::own_claim : KeyState::held_leased;
}

static bool needs_claim(KeyState state)
{
    return state == KeyState::absent || state == KeyState::expired ||
           state == KeyState::lease_ended || state == KeyState::dead_mismatch;
}

static BeginAnswer answer(Outcome outcome, const Record &record, int64 retry_after_us = 0)
{
    return BeginAnswer{outcome, record, retry_after_us};
}

static BeginAnswer held_by_transaction(const Record &record)
{
    return answer(Outcome::in_progress, record, uncommitted_retry_after_us);
}

// The answer for a state that needs no write.
static BeginAnswer answer_without_claim(KeyState state, const Record &record, TimestampTz now)
{
    switch (state)
    {
        case KeyState::replay:
            return answer(Outcome::replay, record);
        case KeyState::mismatch:
            return answer(Outcome::mismatch, record);
        case KeyState::own_claim:
            return answer(Outcome::claimed, record);
        case KeyState::held_leased:
            return answer(Outcome::in_progress, record, record.lease_expires_at() - now);
        default:
            return held_by_transaction(record);
    }
}

// Turns `record` into a fresh in-progress claim for this caller.  Rule T: a
// takeover after the lease ended bumps the attempt (the fencing token) and
// keeps the recovery point -- unless the dead claim was for another request,
// whose progress means nothing to this one; a claim over an expired record
// starts over.
static void fill_claim(Record &record, const BeginRequest &request, KeyState state, TimestampTz now)
{
    if (state == KeyState::lease_ended || state == KeyState::dead_mismatch)
    {
        record.set(store::col_attempt, Int32GetDatum(record.attempt() + 1));
        if (state == KeyState::dead_mismatch)
        {
            record.set(store::col_request, request.request);
            record.set_null(store::col_recovery_point);
        }
    }
    else
    {
        record.set(store::col_request, request.request);
        record.set(store::col_created_at, TimestampTzGetDatum(now));
        record.set(store::col_attempt, Int32GetDatum(1));
        record.set_null(store::col_completed_at);
        record.set_null(store::col_response_status);
        record.set_null(store::col_recovery_point);
        record.set_null(store::col_response_body);
        record.set_null(store::col_response_headers);
        record.set_null(store::col_response_body_bytes);
    }
    record.set(store::col_ttl, IntervalPGetDatum(request.ttl));
    record.set(store::col_lease, IntervalPGetDatum(request.lease));
    record.set(store::col_expires_at, TimestampTzGetDatum(plus_interval(now, request.ttl)));
    record.set(store::col_status, CharGetDatum(store::status_in_progress));
    record.set(store::col_lease_expires_at, TimestampTzGetDatum(plus_interval(now, request.lease)));
    if (request.has_claim_data)
        record.set(store::col_claim_data, request.claim_data);
    else
        record.set_null(store::col_claim_data);
}

// How often a caller that finds the key lock taken looks again for the
// holder's row before answering in_progress.  The holder writes its row right
// after taking the lock, so this only bridges microseconds -- but it lets the
// caller see the holder's request and answer mismatch when they differ.
constexpr int busy_rereads = 5;
constexpr long busy_reread_pause_us = 100;

// Whether a fresh claim may be deferred (claims.hpp): then complete in the
// same transaction writes the record once.  Not a claim that is certain to
// commit unfinished (an explicit lease outside a transaction block): its row
// would only be written later.
static bool deferrable(const BeginRequest &request)
{
    return settings::defer_claims && !(request.lease_given && !IsTransactionBlock());
}

// What the key holds now, and what that means for this caller.
static KeyState observe(const Storage &storage, const BeginRequest &request, Record &record,
                        TimestampTz &now, Ticket *ticket)
{
    now = GetCurrentTimestamp();
    record = read_latest(storage, request.key, ticket);
    return classify(record, request, now);
}

// One attempt, without waiting for a holder.  A fresh claim of an absent key
// is arbitrated by the shared claims table (rule A): one read of the key, no
// key lock.  A takeover of an existing record, a fresh claim when the table
// has no free slot, and every claim without the table, read the key again
// under the key lock and decide on that (rule K).  Replays and other answers
// take no lock and write nothing.
static BeginAnswer begin_once(Storage &storage, const BeginRequest &request)
{
    bool key_locked = false;
    BeginAnswer result;
    for (int reread = 0;;)
    {
        TimestampTz now;
        Record record;
        Ticket ticket;
        KeyState state = observe(storage, request, record, now, &ticket);
        if (!needs_claim(state))
        {
            result = answer_without_claim(state, record, now);
            break;
        }
        if (state == KeyState::absent && (ticket.valid || key_locked))
        {
            for (int column = 0; column < store::column_count; column++)
                record.set_null(store::Column(column));
            fill_claim(record, request, state, now);
            Claim claim =
                claim_absent(storage, request.key, record, deferrable(request), ticket, key_locked);
            if (claim == Claim::claimed)
            {
                result = answer(Outcome::claimed, record);
                break;
            }
            if (claim == Claim::held)
            {
                result = held_by_transaction(record);
                break;
            }
            if (claim == Claim::read_again)
            {
                CHECK_FOR_INTERRUPTS();
                continue;
            }
        }
        else if (key_locked)
        {
            // Rules K and T: decided under the key lock.
            fill_claim(record, request, state, now);
            write(storage, record);
            result = answer(Outcome::claimed, record);
            break;
        }
        if (!key_locked)
        {
            if (!store::lock_key(request.key, false))
            {
                if (reread++ == busy_rereads)
                {
                    result = held_by_transaction(record);
                    break;
                }
                pg_usleep(busy_reread_pause_us);
                CHECK_FOR_INTERRUPTS();
                continue;
            }
            key_locked = true;
        }
    }
    if (key_locked)
        store::unlock_key(request.key);
    return result;
}

// Rule W: waits up to `wait_us` for a key answered in_progress to settle,
// then answers as if called afresh.  A holder whose transaction is still
// open is waited for on its transaction id; a committed claim has no
// transaction to wait for, so its lease is polled.  lock_timeout, when set
// and shorter, cuts the wait short with in_progress.  begin_once has let its
// key lock go.
static BeginAnswer wait_for_holder(Storage &storage, const BeginRequest &request,
                                   BeginAnswer result)
{
    constexpr long max_poll_ms = 50;
    int64 wait_us = request.wait_us;
    if (LockTimeout > 0 && int64(LockTimeout) * 1000 < wait_us)
        wait_us = int64(LockTimeout) * 1000;
    TimestampTz deadline = GetCurrentTimestamp() + wait_us;
    long poll_ms = 1;
    for (;;)
    {
        TimestampTz now = GetCurrentTimestamp();
        if (result.outcome != Outcome::in_progress || now >= deadline)
            return result;
        int remaining_ms = int((deadline - now + 999) / 1000);
        if (result.record.held_by_other())
            (void)store::wait_for_transaction(result.record.writer_xid, remaining_ms);
        else
        {
            (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
                            Min(poll_ms, long(remaining_ms)), PG_WAIT_EXTENSION);
            ResetLatch(MyLatch);
            CHECK_FOR_INTERRUPTS();
            poll_ms = Min(poll_ms * 2, max_poll_ms);
        }
        result = begin_once(storage, request);
    }
}

static void count_answer(Outcome outcome)
{
    constexpr stats::Counter counters[] = {stats::claims, stats::replays,
                                           stats::in_progress_answers, stats::mismatches};
    stats::add(counters[int(outcome)]);
}

BeginAnswer begin(Storage &storage, const BeginRequest &request)
{
    // A begin may store the key: its tenant gets its number first, before
    // any key lock (the numbering may wait for another transaction's).
    store::number_tenant(storage, request.key);
    BeginAnswer result = begin_once(storage, request);
    if (result.outcome == Outcome::in_progress && request.wait_us > 0)
    {
        TimestampTz started = GetCurrentTimestamp();
        result = wait_for_holder(storage, request, result);
        stats::add(stats::waits);
        stats::add(stats::wait_time_us, uint64(GetCurrentTimestamp() - started));
    }
    count_answer(result.outcome);
    return result;
}

bool answer_from_read(const Storage &storage, const BeginRequest &request, BeginAnswer *result)
{
    TimestampTz now;
    Record record;
    KeyState state = observe(storage, request, record, now, nullptr);
    if (state != KeyState::replay && state != KeyState::mismatch)
        return false;
    *result = answer_without_claim(state, record, now);
    count_answer(result->outcome);
    return true;
}

void after_begin(const BeginRequest &request, bool claimed)
{
    if (claimed)
        unsettled::note_claim(request.key, request.lease_given);
}

// ---------------------------------------------------------------------------
// The holder's writes: complete, checkpoint, release, forget
// ---------------------------------------------------------------------------

bool stores_response(int32 status)
{
    return status < 500 || settings::store_server_errors;
}

// The key's current record, about to be written by write_held.
struct HeldClaim
{
    Record record;
    bool locked; // holds the key lock, which write_held lets go
};

// Rule H: the key's current record, ready to be changed.  The caller's own
// uncommitted claim, found by its address, needs no key lock: every other
// writer sees it as in progress and keeps off until this transaction ends.
// Otherwise (a committed record, as in the two-phase pattern, or a claim
// this backend did not write last) the key is read under the key lock
// (rule K), after waiting for another transaction's uncommitted change, as
// an UPDATE waits for a concurrent one -- holding no key lock meanwhile.
static HeldClaim current_record(Storage &storage, const store::Key &key)
{
    HeldClaim claim;
    claim.locked = !find_own(storage, key, &claim.record);
    while (claim.locked)
    {
        store::lock_key(key, true);
        claim.record = read_latest(storage, key, nullptr);
        if (!claim.record.held_by_other())
            break;
        store::unlock_key(key);
        store::wait_for_transaction(claim.record.writer_xid);
    }
    return claim;
}

// Rule T: a fenced-off holder hears IK003 before anything else: its result
// must not be stored, and it must not undo its successor's work.
static void check_attempt(const Record &record, const store::Key &key, Fence fence)
{
    if (fence.given && fence.attempt != record.attempt())
        ereport(ERROR, (errcode(errcode_stale_attempt),
                        errmsg("attempt %d of idempotency key \"%s\" is stale", fence.attempt,
                               key_for_message(key.key)),
                        errdetail("The key's current attempt is %d: its lease ended and another "
                                  "caller took it over.",
                                  record.attempt()),
                        errhidestmt(true)));
}

// What a completed record allows: nothing, or a fenced replacement.
enum class Completed
{
    refuse,
    replace
};

// Rule H: returns the key's current record, or raises the documented error:
// IK001 when there is none, IK003 for a stale attempt, IK002 when it is
// completed (unless replacing its response, which needs its attempt).
static HeldClaim held_claim(Storage &storage, const store::Key &key, Fence fence,
                            Completed completed = Completed::refuse)
{
    HeldClaim claim = current_record(storage, key);
    const Record &record = claim.record;
    if (!live(record, GetCurrentTimestamp()))
        ereport(ERROR, (errcode(errcode_key_not_claimed),
                        errmsg("idempotency key \"%s\" is not claimed", key_for_message(key.key)),
                        errhint("Call idempotency_begin() first."), errhidestmt(true)));
    check_attempt(record, key, fence);
    if (record.completed() && completed == Completed::refuse)
        ereport(ERROR,
                (errcode(errcode_key_completed),
                 errmsg("idempotency key \"%s\" is already completed", key_for_message(key.key)),
                 errhidestmt(true)));
    if (record.completed() && !fence.given)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("replacing the response of idempotency key \"%s\" needs its attempt",
                               key_for_message(key.key)),
                        errhint("Pass attempt => the attempt that completed it, which a replay "
                                "answer gives."),
                        errhidestmt(true)));
    return claim;
}

static void write_held(Storage &storage, const store::Key &key, HeldClaim &claim)
{
    write(storage, claim.record);
    if (claim.locked)
        store::unlock_key(key);
}

static void set_given(Record &record, store::Column column, const NullableDatum &value)
{
    if (value.isnull)
        record.set_null(column);
    else
        record.set(column, value.value);
}

bool complete(Storage &storage, const store::Key &key, Fence fence, const Response &response)
{
    HeldClaim claim =
        held_claim(storage, key, fence, response.replace ? Completed::replace : Completed::refuse);
    Record &record = claim.record;
    TimestampTz now = GetCurrentTimestamp();
    bool replaced = false;
    bool stored = stores_response(response.status);
    if (!stored)
    {
        // A server error is transient: drop the claim so that a retry runs again.
        record.set(store::col_lease_expires_at, TimestampTzGetDatum(now));
    }
    else
    {
        replaced = record.completed();
        if (response.check_table != nullptr)
            response.check_table(storage, response.check_arg);
        record.set(store::col_status, CharGetDatum(store::status_completed));
        record.set(store::col_completed_at, TimestampTzGetDatum(now));
        record.set(store::col_expires_at,
                   TimestampTzGetDatum(
                       plus_interval(now, DatumGetIntervalP(record.values[store::col_ttl]))));
        // A completed record has no lease: 16 bytes less in every stored row.
        record.set_null(store::col_lease_expires_at);
        record.set_null(store::col_lease);
        record.set(store::col_response_status, Int32GetDatum(response.status));
        record.set_null(store::col_response_body);
        record.set_null(store::col_response_body_bytes);
        record.set_null(store::col_response_headers);
        if (response.body_kept)
        {
            set_given(record, store::col_response_body, response.body);
            set_given(record, store::col_response_body_bytes, response.body_bytes);
        }
        if (response.headers_kept)
            set_given(record, store::col_response_headers, response.headers);
        record.set(store::col_response_body_omitted, BoolGetDatum(!response.body_kept));
    }
    write_held(storage, key, claim);
    stats::add_if_committed(!stored    ? stats::server_errors_dropped
                            : replaced ? stats::responses_replaced
                                       : stats::completes);
    if (stored && !response.body_kept)
        stats::add_if_committed(stats::responses_omitted);
    return replaced;
}

TimestampTz checkpoint(Storage &storage, const store::Key &key, Fence fence,
                       NullableDatum recovery_point, Interval *lease, Interval *default_lease)
{
    HeldClaim claim = held_claim(storage, key, fence);
    Record &record = claim.record;
    // Without a lease, the claim's own lease length, as begin set it.
    if (lease == nullptr)
        lease = record.nulls[store::col_lease] ? default_lease
                                               : DatumGetIntervalP(record.values[store::col_lease]);
    TimestampTz lease_end = plus_interval(GetCurrentTimestamp(), lease);
    // A NULL recovery point is a plain heartbeat: the last one is kept.
    if (!recovery_point.isnull)
        record.set(store::col_recovery_point, recovery_point.value);
    record.set(store::col_lease_expires_at, TimestampTzGetDatum(lease_end));
    write_held(storage, key, claim);
    stats::add_if_committed(stats::checkpoints);
    return lease_end;
}

void release(Storage &storage, const store::Key &key, Fence fence)
{
    HeldClaim claim = held_claim(storage, key, fence);
    claim.record.set(store::col_lease_expires_at, TimestampTzGetDatum(GetCurrentTimestamp()));
    write_held(storage, key, claim);
    stats::add_if_committed(stats::releases);
}

// Rules H and T: an unfinished claim of another transaction is fenced like a
// completion, only with its attempt, so that a caller never undoes a
// successor's claim.
bool forget(Storage &storage, const store::Key &key, Fence fence)
{
    HeldClaim claim = current_record(storage, key);
    const Record &record = claim.record;
    bool forgotten = live(record, GetCurrentTimestamp());
    if (forgotten)
    {
        check_attempt(record, key, fence);
        if (!record.completed() && record.writer != Writer::self && !fence.given)
            ereport(ERROR, (errcode(ERRCODE_OBJECT_IN_USE),
                            errmsg("idempotency key \"%s\" is claimed and not completed",
                                   key_for_message(key.key)),
                            errhint("Pass attempt => the claim's attempt to forget it; "
                                    "idempotency_lookup() shows it."),
                            errhidestmt(true)));
        remove(storage, record);
    }
    if (claim.locked)
        store::unlock_key(key);
    if (forgotten)
        stats::add_if_committed(stats::forgets);
    return forgotten;
}

void after_write(Write write, const store::Key &key)
{
    // A checkpoint renews the claim: it stays as unsettled as it was.
    if (write != Write::checkpoint)
        unsettled::note_settled(key);
}

// ---------------------------------------------------------------------------
// Reads and expiry
// ---------------------------------------------------------------------------

bool lookup(const Storage &storage, const store::Key &key, bool latest, Record *record)
{
    if (latest)
        *record = claims::read_latest(storage, key);
    else
    {
        Snapshot snapshot = ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot();
        *record = claims::read_visible(storage, key, snapshot);
    }
    if (!record->found)
        return record->held_by_other();
    return record->writer != Writer::committed || !expired(*record, GetCurrentTimestamp());
}

void list(const Storage &storage, const store::Key &scope, Datum after_key, Snapshot snapshot,
          int max_records, void (*put)(const Record &record, void *arg), void *arg)
{
    store::KeyScan scan =
        store::begin_key_scan(storage, scope.tenant, scope.scope, after_key, snapshot);
    TimestampTz now = GetCurrentTimestamp();
    Record record;
    for (int listed = 0; listed < max_records && store::next_key(scan, &record);)
    {
        if (!live(record, now))
            continue;
        put(record, arg);
        listed++;
        CHECK_FOR_INTERRUPTS();
    }
    store::end_key_scan(scan);
}

bool expire_here(TimestampTz now, int64 max_rows, store::Pace pace, bool skip_if_busy,
                 int64 *deleted)
{
    return store::expire_here(now, max_rows, pace, skip_if_busy, expired, deleted);
}

} // namespace idempotency::claims
