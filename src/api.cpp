// The SQL functions of a request's life: begin, complete, checkpoint,
// release, forget.  Each checks its arguments, then goes to the store, then
// builds its result.
#include "arguments.hpp"
#include "boundary.hpp"
#include "errcodes.hpp"
#include "citus.hpp"
#include "claims.hpp"
#include "module.hpp"
#include "stats.hpp"
#include "store.hpp"
#include "unsettled.hpp"

extern "C"
{
#include "access/detoast.h"
#include "access/htup_details.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_enum.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/typcache.h"
#include "utils/wait_event.h"
}

namespace
{

using namespace idempotency::arguments;
using idempotency::errcode_key_completed;
using idempotency::errcode_key_not_claimed;
using idempotency::errcode_stale_attempt;
using idempotency::key_for_message;
using idempotency::RequestHash;
using idempotency::store::Record;
using idempotency::store::Storage;
using idempotency::store::Writer;
namespace store = idempotency::store;
namespace settings = idempotency::settings;

// retry_after reported for a claim whose transaction has not committed yet:
// its lease has not started, so there is nothing better to say.
constexpr int64 uncommitted_retry_after_us = USECS_PER_SEC;

// ---------------------------------------------------------------------------
// idempotency_begin
// ---------------------------------------------------------------------------

enum class Outcome
{
    claimed,
    replay,
    in_progress,
    mismatch
};
constexpr const char *outcome_labels[] = {"claimed", "replay", "in_progress", "mismatch"};

// What the newest version of a key means to a caller.
enum class KeyState
{
    absent,           // no row, and nobody is changing the key: claim it
    expired,          // past its expiry: claim it as if absent
    lease_ended,      // unfinished claim whose lease ended (committed or own): take it over
    dead_mismatch,    // the same, for another request: taken over only when asked
    own_claim,        // claimed by the calling transaction already
    replay,           // completed for the same request
    mismatch,         // held or completed for another request
    held_uncommitted, // claimed, or being deleted, by a transaction still in progress
    held_leased       // committed unfinished claim, lease running
};

struct BeginArgs
{
    store::Key key;
    Datum request;
    Interval *ttl;
    Interval *lease;
    bool lease_given; // the two-phase pattern's explicit lease
    int64 wait_us;
    bool has_claim_data;
    Datum claim_data;        // jsonb, when has_claim_data
    bool take_over_mismatch; // take over a dead claim of another request
};

KeyState classify(const Record &record, const BeginArgs &args, TimestampTz now)
{
    if (!record.found)
        return record.held_by_other() ? KeyState::held_uncommitted : KeyState::absent;
    bool same_request = idempotency::request_hash_equal(
        record.request(), idempotency::datum_get_request_hash(args.request));
    if (record.held_by_other())
        return same_request ? KeyState::held_uncommitted : KeyState::mismatch;
    if (record.writer == Writer::committed && record.expired(now))
        return KeyState::expired;
    // An unfinished claim whose lease has ended: committed, or this
    // transaction's own after idempotency_release() or a dropped server
    // error.  Answering claimed on such an own claim without renewing it
    // would let another caller take it over once this transaction commits.
    bool dead =
        record.writer != Writer::other && !record.completed() && record.lease_expires_at() <= now;
    if (!same_request)
        return dead && args.take_over_mismatch ? KeyState::dead_mismatch : KeyState::mismatch;
    if (record.completed())
        return KeyState::replay;
    if (dead)
        return KeyState::lease_ended;
    return record.writer == Writer::self ? KeyState::own_claim : KeyState::held_leased;
}

bool needs_claim(KeyState state)
{
    return state == KeyState::absent || state == KeyState::expired ||
           state == KeyState::lease_ended || state == KeyState::dead_mismatch;
}

struct BeginAnswer
{
    Outcome outcome;
    Record record;
    int64 retry_after_us; // in_progress only
};

BeginAnswer answer(Outcome outcome, const Record &record, int64 retry_after_us = 0)
{
    return BeginAnswer{outcome, record, retry_after_us};
}

BeginAnswer held_by_transaction(const Record &record)
{
    return answer(Outcome::in_progress, record, uncommitted_retry_after_us);
}

// The answer for a state that needs no write.
BeginAnswer answer_without_claim(KeyState state, const Record &record, TimestampTz now)
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

// Turns `record` into a fresh in-progress claim for this caller.  A takeover
// after the lease ended bumps the attempt (the fencing token) and keeps the
// recovery point -- unless the dead claim was for another request, whose
// progress means nothing to this one; a claim over an expired record starts
// over.
void fill_claim(Record &record, const BeginArgs &args, KeyState state, TimestampTz now)
{
    if (state == KeyState::lease_ended || state == KeyState::dead_mismatch)
    {
        record.set(store::col_attempt, Int32GetDatum(record.attempt() + 1));
        if (state == KeyState::dead_mismatch)
        {
            record.set(store::col_request, args.request);
            record.set_null(store::col_recovery_point);
        }
    }
    else
    {
        record.set(store::col_request, args.request);
        record.set(store::col_created_at, TimestampTzGetDatum(now));
        record.set(store::col_attempt, Int32GetDatum(1));
        record.set_null(store::col_completed_at);
        record.set_null(store::col_response_status);
        record.set_null(store::col_recovery_point);
        record.set_null(store::col_response_body);
        record.set_null(store::col_response_headers);
        record.set_null(store::col_response_body_bytes);
    }
    record.set(store::col_ttl, IntervalPGetDatum(args.ttl));
    record.set(store::col_lease, IntervalPGetDatum(args.lease));
    record.set(store::col_expires_at, TimestampTzGetDatum(plus_interval(now, args.ttl)));
    record.set(store::col_status, CharGetDatum(store::status_in_progress));
    record.set(store::col_lease_expires_at, TimestampTzGetDatum(plus_interval(now, args.lease)));
    if (args.has_claim_data)
        record.set(store::col_claim_data, args.claim_data);
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
bool deferrable(const BeginArgs &args)
{
    return idempotency::settings::defer_claims && !(args.lease_given && !IsTransactionBlock());
}

// What the key holds now, and what that means for this caller.
KeyState observe(Storage &storage, const BeginArgs &args, Record &record, TimestampTz &now,
                 idempotency::claims::Ticket *ticket)
{
    now = GetCurrentTimestamp();
    record = idempotency::claims::read_latest(storage, args.key, ticket);
    return classify(record, args, now);
}

// One attempt, without waiting for a holder.  A fresh claim of an absent key
// is arbitrated by the shared claims table (claims.hpp, rule A): one read of
// the key, no key lock.  A takeover of an existing record, a fresh claim
// when the table has no free slot, and every claim without the table, read
// the key again under the key lock and decide on that (rule K).  Replays
// and other answers take no lock and write nothing.
BeginAnswer begin_once(Storage &storage, const BeginArgs &args)
{
    namespace claims = idempotency::claims;
    bool key_locked = false;
    BeginAnswer result;
    for (int reread = 0;;)
    {
        TimestampTz now;
        Record record;
        claims::Ticket ticket;
        KeyState state = observe(storage, args, record, now, &ticket);
        if (!needs_claim(state))
        {
            result = answer_without_claim(state, record, now);
            break;
        }
        if (state == KeyState::absent && (ticket.valid || key_locked))
        {
            for (int column = 0; column < store::column_count; column++)
                record.set_null(store::Column(column));
            fill_claim(record, args, state, now);
            claims::Claim claim = claims::claim_absent(storage, args.key, record, deferrable(args),
                                                       ticket, key_locked);
            if (claim == claims::Claim::claimed)
            {
                result = answer(Outcome::claimed, record);
                break;
            }
            if (claim == claims::Claim::held)
            {
                result = held_by_transaction(record);
                break;
            }
            if (claim == claims::Claim::read_again)
            {
                CHECK_FOR_INTERRUPTS();
                continue;
            }
        }
        else if (key_locked)
        {
            fill_claim(record, args, state, now);
            claims::write(storage, record);
            result = answer(Outcome::claimed, record);
            break;
        }
        if (!key_locked)
        {
            if (!store::lock_key(args.key, false))
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
        store::unlock_key(args.key);
    return result;
}

// Waits up to `wait_us` for a key answered in_progress to settle, then
// answers as if called afresh.  A holder whose transaction is still open is
// waited for on its transaction id; a committed claim has no transaction to
// wait for, so its lease is polled.  lock_timeout, when set and shorter, cuts the wait short
// with in_progress.
BeginAnswer wait_for_holder(Storage &storage, const BeginArgs &args, BeginAnswer result)
{
    constexpr long max_poll_ms = 50;
    int64 wait_us = args.wait_us;
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
        result = begin_once(storage, args);
    }
}

void count_answer(Outcome outcome)
{
    namespace stats = idempotency::stats;
    constexpr stats::Counter counters[] = {stats::claims, stats::replays,
                                           stats::in_progress_answers, stats::mismatches};
    stats::add(counters[int(outcome)]);
}

BeginAnswer begin(Storage &storage, const BeginArgs &args)
{
    namespace stats = idempotency::stats;
    BeginAnswer result = begin_once(storage, args);
    if (result.outcome == Outcome::in_progress && args.wait_us > 0)
    {
        TimestampTz started = GetCurrentTimestamp();
        result = wait_for_holder(storage, args, result);
        stats::add(stats::waits);
        stats::add(stats::wait_time_us, uint64(GetCurrentTimestamp() - started));
    }
    count_answer(result.outcome);
    return result;
}

enum class ShardRead
{
    answered,   // a replay or a mismatch
    elsewhere,  // the scope's shard is placed on another node
    needs_write // anything else
};

// With the keys in Citus shards: a replay or mismatch answered from a read
// of the shard, which takes no shard metadata lock (citus.hpp) and so never
// waits behind a shard move.  Anything else needs the shard opened for
// writing, under that lock, and the key read again there.
ShardRead answer_from_shard_read(const BeginArgs &args, BeginAnswer *result)
{
    Storage storage;
    if (!store::open_here(AccessShareLock, args.key.scope, &storage))
        return ShardRead::elsewhere;
    BeginArgs read_args = args;
    read_args.key = store::stored_key(storage, args.key);
    TimestampTz now;
    Record record;
    KeyState state = observe(storage, read_args, record, now, nullptr);
    store::close(storage);
    if (state != KeyState::replay && state != KeyState::mismatch)
        return ShardRead::needs_write;
    *result = answer_without_claim(state, record, now);
    count_answer(result->outcome);
    return ShardRead::answered;
}

// The OIDs of the outcome enum's labels, kept for the backend: looked up per
// call they cost four catalog cache probes, and a call in FROM gets a fresh
// FmgrInfo per execution (a PL/pgSQL assignment one per transaction), so
// fn_extra could not keep them.  Safe to keep: an enum's labels only change
// through pg_enum (ALTER TYPE ... ADD or RENAME VALUE, DROP TYPE with the
// extension), whose invalidations forget them, and a recreated type has
// another OID, which misses the cache.
struct OutcomeOids
{
    Oid enum_type = InvalidOid;
    Oid labels[4];
};
static OutcomeOids outcome_oids_cache;
static uint64 outcome_oids_invalidations = 0;

static void forget_outcome_oids(Datum, int, uint32)
{
    outcome_oids_cache.enum_type = InvalidOid;
    outcome_oids_invalidations++;
}

static OutcomeOids outcome_oids(Oid enum_type)
{
    static bool callback_registered = false;
    if (!callback_registered)
    {
        CacheRegisterSyscacheCallback(ENUMOID, forget_outcome_oids, (Datum)0);
        callback_registered = true;
    }
    if (outcome_oids_cache.enum_type == enum_type)
        return outcome_oids_cache;
    uint64 invalidations = outcome_oids_invalidations;
    OutcomeOids found;
    found.enum_type = enum_type;
    for (int i = 0; i < 4; i++)
        found.labels[i] =
            GetSysCacheOid2(ENUMTYPOIDNAME, Anum_pg_enum_oid, ObjectIdGetDatum(enum_type),
                            CStringGetDatum(outcome_labels[i]));
    // Kept only if no invalidation arrived while reading (a catalog read can
    // process them): the labels read before it may be outdated.
    if (invalidations == outcome_oids_invalidations)
        outcome_oids_cache = found;
    return found;
}

// The row type the call was declared to return (an older version's
// declaration has fewer columns), from the type cache, which follows ALTER
// TYPE; pinned until ReleaseTupleDesc, and released by the resource owner if
// the call fails before.
static TupleDesc begin_result_desc(FunctionCallInfo fcinfo)
{
    Oid type = get_fn_expr_rettype(fcinfo->flinfo);
    if (!OidIsValid(type))
        type = get_func_rettype(fcinfo->flinfo->fn_oid);
    return lookup_rowtype_tupdesc(type, -1);
}

// Result columns of idempotency_begin, in declaration order.  Called through
// an older version's declaration, the result type has fewer columns, and
// heap_form_tuple takes only those.
enum BeginColumn
{
    out_outcome,
    out_attempt,
    out_response_status,
    out_response_body,
    out_response_headers,
    out_recovery_point,
    out_retry_after,
    out_created_at,
    out_expires_at,
    // 0.2.0
    out_response_body_bytes,
    out_response_body_omitted,
    out_status,
    out_lease_expires_at,
    out_claim_data,
    // 0.3.0
    out_retry_after_seconds,
    begin_column_count
};

Datum begin_result(FunctionCallInfo fcinfo, const BeginAnswer &result)
{
    TupleDesc desc = begin_result_desc(fcinfo);
    Datum values[begin_column_count];
    bool nulls[begin_column_count];
    for (int i = 0; i < begin_column_count; i++)
        nulls[i] = true;
    auto copy = [&](BeginColumn out, store::Column in) {
        values[out] = result.record.values[in];
        nulls[out] = result.record.nulls[in];
    };
    values[out_outcome] = ObjectIdGetDatum(
        outcome_oids(TupleDescAttr(desc, 0)->atttypid).labels[int(result.outcome)]);
    nulls[out_outcome] = false;
    if (result.record.found)
    {
        // A mismatch tells the state of the key and when it frees up, nothing
        // about the other request: not its claim data, recovery point or response.
        copy(out_created_at, store::col_created_at);
        copy(out_expires_at, store::col_expires_at);
        copy(out_attempt, store::col_attempt);
        copy(out_lease_expires_at, store::col_lease_expires_at);
        values[out_status] =
            CStringGetTextDatum(result.record.completed() ? "completed" : "in_progress");
        nulls[out_status] = false;
        if (result.outcome == Outcome::claimed || result.outcome == Outcome::in_progress)
            copy(out_claim_data, store::col_claim_data);
    }
    if (result.outcome == Outcome::replay)
    {
        copy(out_response_status, store::col_response_status);
        copy(out_response_body, store::col_response_body);
        copy(out_response_headers, store::col_response_headers);
        copy(out_response_body_bytes, store::col_response_body_bytes);
        copy(out_response_body_omitted, store::col_response_body_omitted);
    }
    if (result.outcome == Outcome::claimed)
        copy(out_recovery_point, store::col_recovery_point);
    if (result.outcome == Outcome::in_progress)
    {
        values[out_retry_after] = IntervalPGetDatum(interval_from_us(result.retry_after_us));
        nulls[out_retry_after] = false;
        // Whole seconds, rounded up, at least 1: what Retry-After takes.
        int64 seconds = (result.retry_after_us + USECS_PER_SEC - 1) / USECS_PER_SEC;
        values[out_retry_after_seconds] =
            Int32GetDatum(int32(Max(int64(1), Min(seconds, int64(PG_INT32_MAX)))));
        nulls[out_retry_after_seconds] = false;
    }
    HeapTuple row = heap_form_tuple(desc, values, nulls);
    ReleaseTupleDesc(desc);
    return HeapTupleGetDatum(row);
}

// ---------------------------------------------------------------------------
// Writes by the holder: complete, checkpoint, release
// ---------------------------------------------------------------------------

// The key's current record, about to be written by write_claim.
struct HeldClaim
{
    Record record;
    bool locked; // holds the key lock, which write_claim lets go
};

// The key's current record, ready to be changed.  The caller's own
// uncommitted claim, found by its address, needs no key lock: every other
// writer sees it as in progress and keeps off until this transaction ends.
// Otherwise (a committed record, as in the two-phase pattern, or a claim
// this backend did not write last) the key is read under the key lock, after
// waiting for another transaction's uncommitted change, as an UPDATE waits
// for a concurrent one.
HeldClaim current_record(Storage &storage, const store::Key &key)
{
    HeldClaim claim;
    claim.locked = !idempotency::claims::find_own(storage, key, &claim.record);
    while (claim.locked)
    {
        store::lock_key(key, true);
        claim.record = idempotency::claims::read_latest(storage, key, nullptr);
        if (!claim.record.held_by_other())
            break;
        store::unlock_key(key);
        store::wait_for_transaction(claim.record.writer_xid);
    }
    return claim;
}

bool is_live(const Record &record)
{
    return record.found &&
           !(record.writer == Writer::committed && record.expired(GetCurrentTimestamp()));
}

// A fenced-off holder hears IK003 before anything else: its result must
// not be stored, and it must not undo its successor's work.
void check_attempt(const Record &record, const store::Key &key, bool has_attempt, int32 attempt)
{
    if (has_attempt && attempt != record.attempt())
        ereport(ERROR, (errcode(errcode_stale_attempt),
                        errmsg("attempt %d of idempotency key \"%s\" is stale", attempt,
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

// Whether a forwarded begin's answer (a row of the call's result type) is a claim.
bool answer_is_claim(FunctionCallInfo fcinfo, Datum answer)
{
    TupleDesc desc = begin_result_desc(fcinfo);
    bool isnull;
    Datum outcome = GetAttributeByNum(DatumGetHeapTupleHeader(answer), 1, &isnull);
    bool claim =
        !isnull && DatumGetObjectId(outcome) ==
                       outcome_oids(TupleDescAttr(desc, 0)->atttypid).labels[int(Outcome::claimed)];
    ReleaseTupleDesc(desc);
    return claim;
}

// A begin whose shard Citus places on another node, run there
// (citus::forward_call).  Its claim is noted here, where the calling
// transaction commits, as a claim made here would be.
Datum forwarded_begin(FunctionCallInfo fcinfo, const BeginArgs &args)
{
    Datum answer = idempotency::citus::forward_call(fcinfo, args.key.scope);
    if (!fcinfo->isnull && answer_is_claim(fcinfo, answer))
        idempotency::unsettled::note_claim(args.key, args.lease_given);
    return answer;
}

// Returns the key's current record, or raises the documented error: IK001
// when there is none, IK003 for a stale attempt, IK002 when it is completed
// (unless replacing its response, which needs its attempt).
HeldClaim held_claim(Storage &storage, const store::Key &key, bool has_attempt, int32 attempt,
                     Completed completed = Completed::refuse)
{
    HeldClaim claim = current_record(storage, key);
    const Record &record = claim.record;
    if (!is_live(record))
        ereport(ERROR, (errcode(errcode_key_not_claimed),
                        errmsg("idempotency key \"%s\" is not claimed", key_for_message(key.key)),
                        errhint("Call idempotency_begin() first."), errhidestmt(true)));
    check_attempt(record, key, has_attempt, attempt);
    if (record.completed() && completed == Completed::refuse)
        ereport(ERROR,
                (errcode(errcode_key_completed),
                 errmsg("idempotency key \"%s\" is already completed", key_for_message(key.key)),
                 errhidestmt(true)));
    if (record.completed() && !has_attempt)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("replacing the response of idempotency key \"%s\" needs its attempt",
                               key_for_message(key.key)),
                        errhint("Pass attempt => the attempt that completed it, which a replay "
                                "answer gives."),
                        errhidestmt(true)));
    return claim;
}

void write_claim(Storage &storage, const store::Key &key, HeldClaim &claim)
{
    idempotency::claims::write(storage, claim.record);
    if (claim.locked)
        store::unlock_key(key);
}

// Whether a change settles the claim: completes or releases it.
enum class Settles
{
    no,
    yes
};

// Finds the caller's in-progress claim, lets `change` edit it, and writes it
// back: the common course of complete, checkpoint and release.  Returns
// false when Citus places the scope's keys on another node: the call ran
// there instead (citus::forward_call), and *forwarded is its result.
template <typename Change>
bool change_held_claim(FunctionCallInfo fcinfo, const store::Key &key_arg, bool has_attempt,
                       int32 attempt, Settles settles, Change change, Datum *forwarded,
                       Completed completed = Completed::refuse)
{
    Storage storage;
    if (!store::open_here(RowExclusiveLock, key_arg.scope, &storage))
    {
        *forwarded = idempotency::citus::forward_call(fcinfo, key_arg.scope);
        if (settles == Settles::yes)
            idempotency::unsettled::note_settled(key_arg);
        return false;
    }
    store::Key key = store::stored_key(storage, key_arg);
    HeldClaim claim = held_claim(storage, key, has_attempt, attempt, completed);
    change(storage, claim.record);
    write_claim(storage, key, claim);
    store::close(storage);
    if (settles == Settles::yes)
        idempotency::unsettled::note_settled(key);
    return true;
}

void set_optional(Record &record, store::Column column, FunctionCallInfo fcinfo, int n)
{
    if (has_arg(fcinfo, n))
        record.set(column, PG_GETARG_DATUM(n));
    else
        record.set_null(column);
}

// Arguments of idempotency_complete, by position.
enum CompleteArg
{
    complete_status = 2,
    complete_body,
    complete_headers,
    complete_attempt,
    complete_body_bytes,
    complete_replace,
    complete_omit_oversized // 0.4.0
};

// What of a response gets stored.  A response over idempotency.max_response_bytes
// is still completed -- failing would roll the work back, and every retry
// would do it again and fail again -- but without its body (and without its
// headers, when they alone are over), marked as omitted.  Unless the caller
// said omit_oversized => false: a middleware that must never acknowledge a
// response it cannot replay byte for byte then gets an error instead, before
// anything is written (refuse_oversized).
struct StoredResponse
{
    bool body;
    bool headers;
    int64 size;
};

StoredResponse response_to_store(FunctionCallInfo fcinfo)
{
    if (has_arg(fcinfo, complete_body) && has_arg(fcinfo, complete_body_bytes))
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("response_body and response_body_bytes cannot both be given"),
                        errhint("Pass a JSON body as response_body, any other body as "
                                "response_body_bytes."),
                        errhidestmt(true)));
    int64 body =
        argument_bytes(fcinfo, complete_body) + argument_bytes(fcinfo, complete_body_bytes);
    int64 headers = argument_bytes(fcinfo, complete_headers);
    int64 limit = settings::max_response_bytes;
    return StoredResponse{body + headers <= limit, headers <= limit, body + headers};
}

// omit_oversized => false: a response over the limit is refused, before
// anything is written; the error aborts the caller's transaction, work and
// all, as any error does.
void refuse_oversized(FunctionCallInfo fcinfo, const store::Key &key,
                      const StoredResponse &response)
{
    bool omit = !has_arg(fcinfo, complete_omit_oversized) ||
                PG_GETARG_BOOL(complete_omit_oversized);
    if (omit || response.body)
        return;
    ereport(ERROR,
            (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
             errmsg("response of idempotency key \"%s\" is too large (%lld bytes)",
                    key_for_message(key.key), (long long)response.size),
             errdetail("idempotency.max_response_bytes is %d bytes, counting the body and the "
                       "headers; with omit_oversized => false nothing is stored.",
                       settings::max_response_bytes),
             errhint("Raise idempotency.max_response_bytes (a superuser's setting: ALTER SYSTEM, "
                     "or ALTER ROLE ... SET for the application's role), or pass "
                     "omit_oversized => true to store the response without its body."),
             errhidestmt(true)));
}

void warn_omitted(const store::Key &key, const StoredResponse &response)
{
    ereport(WARNING,
            (errcode(ERRCODE_WARNING),
             errmsg("the response body of idempotency key \"%s\" is not stored",
                    key_for_message(key.key)),
             errdetail("The response is %lld bytes; idempotency.max_response_bytes is %d bytes. "
                       "Replays return its status%s, with response_body_omitted set.",
                       (long long)response.size, settings::max_response_bytes,
                       response.headers ? " and headers" : ""),
             errhidestmt(true)));
}

} // namespace

IDEMPOTENCY_FUNCTION(idempotency_begin)
{
    BeginArgs args;
    args.key = key_args(fcinfo);
    args.request = required_arg(fcinfo, 2, "request");
    args.ttl = ttl_arg(fcinfo, 3);
    Interval *lease = optional_lease_arg(fcinfo, 4);
    args.lease_given = lease != nullptr;
    args.lease = args.lease_given ? lease : default_lease();
    args.wait_us = wait_arg_us(fcinfo, 5);
    args.has_claim_data = has_arg(fcinfo, 6);
    args.claim_data = args.has_claim_data ? PG_GETARG_DATUM(6) : (Datum)0;
    check_stored_size(argument_bytes(fcinfo, 6), "claim_data", args.key);
    args.take_over_mismatch = has_arg(fcinfo, 7) && PG_GETARG_BOOL(7);
    require_writable("idempotency_begin");

    if (store::keys_in_shards())
    {
        BeginAnswer read_answer;
        Datum replayed;
        switch (answer_from_shard_read(args, &read_answer))
        {
            case ShardRead::answered:
                return begin_result(fcinfo, read_answer);
            case ShardRead::elsewhere:
                // During a move of that shard, a completed key is answered
                // there without waiting for the move.
                if (!args.take_over_mismatch &&
                    idempotency::citus::forward_replay(fcinfo, args.key.scope, args.key.key,
                                                       &replayed, answer_is_claim))
                    return replayed;
                break;
            case ShardRead::needs_write:
                break;
        }
    }
    Storage storage;
    if (!store::open_here(RowExclusiveLock, args.key.scope, &storage))
        return forwarded_begin(fcinfo, args);
    if (args.has_claim_data)
        require_column(storage, store::col_claim_data, "claim_data");
    args.key = store::stored_key(storage, args.key);
    BeginAnswer result = begin(storage, args);
    store::close(storage);
    if (result.outcome == Outcome::claimed)
        idempotency::unsettled::note_claim(args.key, args.lease_given);
    return begin_result(fcinfo, result);
}

IDEMPOTENCY_FUNCTION(idempotency_complete)
{
    store::Key key = key_args(fcinfo);
    int32 status = DatumGetInt32(required_arg(fcinfo, complete_status, "response_status"));
    if (status < 100 || status > 599)
        ereport(ERROR,
                (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                 errmsg("invalid response_status %d", status),
                 errdetail("An HTTP status code is between 100 and 599."), errhidestmt(true)));
    StoredResponse response = response_to_store(fcinfo);
    int32 attempt = 0;
    bool has_attempt = optional_int_arg(fcinfo, complete_attempt, &attempt);
    bool replace = has_arg(fcinfo, complete_replace) && PG_GETARG_BOOL(complete_replace);
    require_writable("idempotency_complete");

    bool store_response = status < 500 || settings::store_server_errors;
    if (store_response)
        refuse_oversized(fcinfo, key, response);
    if (replace && !store_response)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("a response with status %d cannot replace a stored one", status),
                        errdetail("Server errors are not stored while "
                                  "idempotency.store_server_errors is off."),
                        errhidestmt(true)));
    bool replaced = false;
    auto complete = [&](const Storage &storage, Record &record) {
        TimestampTz now = GetCurrentTimestamp();
        if (!store_response)
        {
            // A server error is transient: drop the claim so that a retry runs again.
            record.set(store::col_lease_expires_at, TimestampTzGetDatum(now));
            return;
        }
        replaced = record.completed();
        if (has_arg(fcinfo, complete_body_bytes))
            require_column(storage, store::col_response_body_bytes, "response_body_bytes");
        if (!response.body && !storage.has(store::col_response_body_omitted))
            check_stored_size(response.size, "response", key); // 0.1.0 refused it
        record.set(store::col_status, CharGetDatum(store::status_completed));
        record.set(store::col_completed_at, TimestampTzGetDatum(now));
        record.set(store::col_expires_at,
                   TimestampTzGetDatum(
                       plus_interval(now, DatumGetIntervalP(record.values[store::col_ttl]))));
        // A completed record has no lease: 16 bytes less in every stored row.
        record.set_null(store::col_lease_expires_at);
        record.set_null(store::col_lease);
        record.set(store::col_response_status, Int32GetDatum(status));
        record.set_null(store::col_response_body);
        record.set_null(store::col_response_body_bytes);
        record.set_null(store::col_response_headers);
        if (response.body)
        {
            set_optional(record, store::col_response_body, fcinfo, complete_body);
            set_optional(record, store::col_response_body_bytes, fcinfo, complete_body_bytes);
        }
        if (response.headers)
            set_optional(record, store::col_response_headers, fcinfo, complete_headers);
        record.set(store::col_response_body_omitted, BoolGetDatum(!response.body));
    };
    Datum forwarded;
    if (!change_held_claim(fcinfo, key, has_attempt, attempt, Settles::yes, complete, &forwarded,
                           replace ? Completed::replace : Completed::refuse))
        return forwarded;
    if (store_response && !response.body)
        warn_omitted(key, response);
    namespace stats = idempotency::stats;
    stats::add_if_committed(!store_response ? stats::server_errors_dropped
                            : replaced      ? stats::responses_replaced
                                            : stats::completes);
    if (store_response && !response.body)
        stats::add_if_committed(stats::responses_omitted);
    PG_RETURN_BOOL(store_response);
}

IDEMPOTENCY_FUNCTION(idempotency_checkpoint)
{
    store::Key key = key_args(fcinfo);
    check_stored_size(argument_bytes(fcinfo, 2), "recovery_point", key);
    Interval *lease = optional_lease_arg(fcinfo, 3);
    int32 attempt = 0;
    bool has_attempt = optional_int_arg(fcinfo, 4, &attempt);
    require_writable("idempotency_checkpoint");

    TimestampTz lease_end;
    Datum forwarded;
    if (!change_held_claim(
            fcinfo, key, has_attempt, attempt, Settles::no,
            [&](const Storage &, Record &record) {
                // Without a lease, the claim's own lease length, as begin set it.
                if (lease == nullptr)
                    lease = record.nulls[store::col_lease]
                                ? default_lease()
                                : DatumGetIntervalP(record.values[store::col_lease]);
                lease_end = plus_interval(GetCurrentTimestamp(), lease);
                // A NULL recovery point is a plain heartbeat: the last one is kept.
                if (has_arg(fcinfo, 2))
                    record.set(store::col_recovery_point, PG_GETARG_DATUM(2));
                record.set(store::col_lease_expires_at, TimestampTzGetDatum(lease_end));
            },
            &forwarded))
        return forwarded;
    idempotency::stats::add_if_committed(idempotency::stats::checkpoints);
    PG_RETURN_TIMESTAMPTZ(lease_end);
}

IDEMPOTENCY_FUNCTION(idempotency_release)
{
    store::Key key = key_args(fcinfo);
    int32 attempt = 0;
    bool has_attempt = optional_int_arg(fcinfo, 2, &attempt);
    require_writable("idempotency_release");

    Datum forwarded;
    if (!change_held_claim(
            fcinfo, key, has_attempt, attempt, Settles::yes,
            [](const Storage &, Record &record) {
                record.set(store::col_lease_expires_at, TimestampTzGetDatum(GetCurrentTimestamp()));
            },
            &forwarded))
        return forwarded;
    idempotency::stats::add_if_committed(idempotency::stats::releases);
    PG_RETURN_VOID();
}

// Deletes the key's record: a completed one, or an unfinished claim.  An
// unfinished claim of another transaction is fenced like a completion: only
// with its attempt, so that a caller never undoes a successor's claim.
// Returns whether there was a live record to delete.
IDEMPOTENCY_FUNCTION(idempotency_forget)
{
    store::Key key = key_args(fcinfo);
    int32 attempt = 0;
    bool has_attempt = optional_int_arg(fcinfo, 2, &attempt);
    require_writable("idempotency_forget");

    Storage storage;
    if (!store::open_here(RowExclusiveLock, key.scope, &storage))
    {
        Datum forwarded = idempotency::citus::forward_call(fcinfo, key.scope);
        idempotency::unsettled::note_settled(key);
        return forwarded;
    }
    key = store::stored_key(storage, key);
    HeldClaim claim = current_record(storage, key);
    const Record &record = claim.record;
    bool forgotten = is_live(record);
    if (forgotten)
    {
        check_attempt(record, key, has_attempt, attempt);
        if (!record.completed() && record.writer != Writer::self && !has_attempt)
            ereport(ERROR, (errcode(ERRCODE_OBJECT_IN_USE),
                            errmsg("idempotency key \"%s\" is claimed and not completed",
                                   key_for_message(key.key)),
                            errhint("Pass attempt => the claim's attempt to forget it; "
                                    "idempotency_lookup() shows it."),
                            errhidestmt(true)));
        idempotency::claims::remove(storage, record);
    }
    if (claim.locked)
        store::unlock_key(key);
    store::close(storage);
    idempotency::unsettled::note_settled(key);
    if (forgotten)
        idempotency::stats::add_if_committed(idempotency::stats::forgets);
    PG_RETURN_BOOL(forgotten);
}
