// SQL entry points: argument checks, then the store, then the result.
#include "boundary.hpp"
#include "claims.hpp"
#include "module.hpp"
#include "stats.hpp"
#include "store.hpp"

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
#include "utils/jsonb.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
}

namespace
{

using idempotency::key_for_message;
using idempotency::RequestHash;
using idempotency::store::Record;
using idempotency::store::Storage;
using idempotency::store::Writer;
namespace store = idempotency::store;
namespace settings = idempotency::settings;

// Extension-owned SQLSTATEs (class IK), documented in the README.
const int errcode_key_not_claimed = MAKE_SQLSTATE('I', 'K', '0', '0', '1');
const int errcode_key_completed = MAKE_SQLSTATE('I', 'K', '0', '0', '2');
const int errcode_stale_attempt = MAKE_SQLSTATE('I', 'K', '0', '0', '3');

// retry_after reported for a claim whose transaction has not committed yet:
// its lease has not started, so there is nothing better to say.
constexpr int64 uncommitted_retry_after_us = USECS_PER_SEC;

// Compared with an interval's length as interval comparison sees it.
constexpr int64 max_ttl_or_lease_us = int64(settings::max_duration_s) * USECS_PER_SEC;
constexpr int64 max_wait_us = int64(3600) * USECS_PER_SEC;

// ---------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------

// Errors about the caller's arguments keep the statement out of the server
// log (errhidestmt): with client-side binding its text holds the request's
// data, which a log must not.  The message itself shows a key's prefix at
// most (key_for_message).

Datum required_arg(FunctionCallInfo fcinfo, int n, const char *name)
{
    if (PG_ARGISNULL(n))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                        errmsg("%s must not be null", name), errhidestmt(true)));
    return PG_GETARG_DATUM(n);
}

// The one rule for keys and scopes: key_args raises what it finds,
// idempotency_key_problem reports it.
enum class KeyProblem
{
    none,
    empty_key,
    long_scope,
    long_key
};

bool too_long(Datum value)
{
    return int(VARSIZE_ANY_EXHDR(DatumGetTextPP(value))) > settings::max_key_length;
}

KeyProblem key_problem(Datum scope, Datum key)
{
    if (VARSIZE_ANY_EXHDR(DatumGetTextPP(key)) == 0)
        return KeyProblem::empty_key;
    if (too_long(scope))
        return KeyProblem::long_scope;
    return too_long(key) ? KeyProblem::long_key : KeyProblem::none;
}

[[noreturn]] void report_too_long(Datum value, const char *name)
{
    ereport(ERROR, (errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
                    errmsg("%s \"%s\" is too long (%d bytes)", name, key_for_message(value),
                           int(VARSIZE_ANY_EXHDR(DatumGetTextPP(value)))),
                    errdetail("idempotency.max_key_length is %d bytes.", settings::max_key_length),
                    errhidestmt(true)));
    pg_unreachable();
}

// With idempotency.tenant_isolation = role, every key belongs to the role
// that calls (current_user: SET ROLE and SECURITY DEFINER functions change
// it), held in a column of its own: no scope a caller passes can name another
// role's keys.  Without it, keys belong to no role.
Oid tenant_of_caller()
{
    return settings::tenant_isolation == settings::tenant_isolation_role ? GetUserId() : InvalidOid;
}

store::Key key_args(FunctionCallInfo fcinfo)
{
    store::Key args;
    args.tenant = tenant_of_caller();
    args.scope = PointerGetDatum(DatumGetTextPP(required_arg(fcinfo, 0, "scope")));
    args.key = PointerGetDatum(DatumGetTextPP(required_arg(fcinfo, 1, "key")));
    switch (key_problem(args.scope, args.key))
    {
        case KeyProblem::empty_key:
            ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                            errmsg("key must not be empty"), errhidestmt(true)));
            break;
        case KeyProblem::long_scope:
            report_too_long(args.scope, "scope");
        case KeyProblem::long_key:
            report_too_long(args.key, "key");
        case KeyProblem::none:
            break;
    }
    return args;
}

// An interval's length as interval comparison sees it (a month is 30 days).
__int128 interval_span_us(const Interval *interval)
{
    return (__int128)interval->time + (__int128)interval->day * USECS_PER_DAY +
           (__int128)interval->month * DAYS_PER_MONTH * USECS_PER_DAY;
}

const char *interval_text(const Interval *interval)
{
    return DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(interval)));
}

Interval *interval_from_us(int64 us)
{
    Interval *interval = static_cast<Interval *>(palloc0(sizeof(Interval)));
    interval->time = us;
    return interval;
}

// Whether optional argument `n` was given, not NULL.  A function declared by
// an older version's install script, not yet updated, passes fewer
// arguments: the later ones count as not given.
bool has_arg(FunctionCallInfo fcinfo, int n)
{
    return n < PG_NARGS() && !PG_ARGISNULL(n);
}

// An optional interval argument within (min, max], or [0, max] when zero is
// allowed; nullptr when not given.
Interval *optional_interval_arg(FunctionCallInfo fcinfo, int n, const char *name, bool zero_allowed,
                                int64 max_us, const char *range_text)
{
    if (!has_arg(fcinfo, n))
        return nullptr;
    Interval *interval = PG_GETARG_INTERVAL_P(n);
    __int128 span = interval_span_us(interval);
    if (span < 0 || (span == 0 && !zero_allowed) || span > max_us)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("invalid %s \"%s\"", name, interval_text(interval)),
                        errdetail("%s must be %s.", name, range_text), errhidestmt(true)));
    return interval;
}

Interval *ttl_arg(FunctionCallInfo fcinfo, int n)
{
    Interval *ttl = optional_interval_arg(fcinfo, n, "ttl", false, max_ttl_or_lease_us,
                                          "greater than zero and at most 3650 days");
    return ttl ? ttl : interval_from_us(int64(settings::default_ttl_s) * USECS_PER_SEC);
}

// The lease argument, nullptr when not given: the caller knows the default.
Interval *optional_lease_arg(FunctionCallInfo fcinfo, int n)
{
    return optional_interval_arg(fcinfo, n, "lease", false, max_ttl_or_lease_us,
                                 "greater than zero and at most 3650 days");
}

Interval *default_lease()
{
    return interval_from_us(int64(settings::default_lease_ms) * 1000);
}

int64 wait_arg_us(FunctionCallInfo fcinfo, int n)
{
    Interval *wait =
        optional_interval_arg(fcinfo, n, "wait", true, max_wait_us, "between 0 and 1 hour");
    return wait ? int64(interval_span_us(wait)) : int64(settings::default_wait_ms) * 1000;
}

bool optional_int_arg(FunctionCallInfo fcinfo, int n, int32 *value)
{
    if (!has_arg(fcinfo, n))
        return false;
    *value = PG_GETARG_INT32(n);
    return true;
}

void require_writable(const char *function)
{
    if (RecoveryInProgress())
        ereport(ERROR, (errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
                        errmsg("cannot call %s() during recovery", function),
                        errhint("Call it on the primary; idempotency_lookup() works on a standby."),
                        errhidestmt(true)));
    if (XactReadOnly)
        ereport(ERROR, (errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
                        errmsg("cannot call %s() in a read-only transaction", function),
                        errhidestmt(true)));
}

// ---------------------------------------------------------------------------
// Time
// ---------------------------------------------------------------------------

TimestampTz plus_interval(TimestampTz t, const Interval *interval)
{
    return DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval, TimestampTzGetDatum(t),
                                                   IntervalPGetDatum(interval)));
}

// Expiry times are rounded up to a whole second: keys never expire early, and
// a claim completed within the same second keeps its expiry, so completing
// changes no indexed column and the update stays HOT.
TimestampTz expiry_after(TimestampTz t, const Interval *ttl)
{
    TimestampTz expiry = plus_interval(t, ttl);
    TimestampTz rest = expiry % USECS_PER_SEC;
    return rest == 0 ? expiry : expiry + (rest > 0 ? USECS_PER_SEC - rest : -rest);
}

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
    lease_ended,      // committed unfinished claim whose lease ended: take it over
    own_claim,        // claimed by the calling transaction already
    replay,           // completed for the same request
    mismatch,         // held or completed for another request
    held_uncommitted, // claimed, or being deleted, by a transaction still in progress
    held_leased       // committed unfinished claim, lease running
};

KeyState classify(const Record &record, const RequestHash *request, TimestampTz now)
{
    if (!record.found)
        return record.held_by_other() ? KeyState::held_uncommitted : KeyState::absent;
    bool same_request = idempotency::request_hash_equal(record.request(), request);
    if (record.held_by_other())
        return same_request ? KeyState::held_uncommitted : KeyState::mismatch;
    if (record.writer == Writer::committed && record.expired(now))
        return KeyState::expired;
    if (!same_request)
        return KeyState::mismatch;
    if (record.completed())
        return KeyState::replay;
    if (record.writer == Writer::self)
        return KeyState::own_claim;
    return record.lease_expires_at() > now ? KeyState::held_leased : KeyState::lease_ended;
}

bool needs_claim(KeyState state)
{
    return state == KeyState::absent || state == KeyState::expired ||
           state == KeyState::lease_ended;
}

struct BeginArgs
{
    store::Key key;
    Datum request;
    Interval *ttl;
    Interval *lease;
    bool lease_given; // the two-phase pattern's explicit lease
    int64 wait_us;
};

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
// after the lease ended keeps the recovery point and bumps the attempt (the
// fencing token); a claim over an expired record starts over.
void fill_claim(Record &record, const BeginArgs &args, KeyState state, TimestampTz now)
{
    if (state == KeyState::lease_ended)
        record.set(store::col_attempt, Int32GetDatum(record.attempt() + 1));
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
    record.set(store::col_expires_at, TimestampTzGetDatum(expiry_after(now, args.ttl)));
    record.set(store::col_status, CharGetDatum(store::status_in_progress));
    record.set(store::col_lease_expires_at, TimestampTzGetDatum(plus_interval(now, args.lease)));
}

// How often a caller that finds the key lock taken looks again for the
// holder's row before answering in_progress.  The holder writes its row right
// after taking the lock, so this only bridges microseconds -- but it lets the
// caller see the holder's request and answer mismatch when they differ.
constexpr int busy_rereads = 5;
constexpr long busy_reread_pause_us = 100;

// What the key holds now, and what that means for this caller.
KeyState observe(Storage &storage, const BeginArgs &args, Record &record, TimestampTz &now)
{
    now = GetCurrentTimestamp();
    record = store::read_latest(storage, args.key);
    return classify(record, idempotency::datum_get_request_hash(args.request), now);
}

// One attempt, without waiting for a holder.
BeginAnswer begin_once(Storage &storage, const BeginArgs &args)
{
    TimestampTz now;
    Record record;
    KeyState state = observe(storage, args, record, now);
    if (!needs_claim(state))
        return answer_without_claim(state, record, now); // replays take no lock and write nothing

    for (int reread = 0; !store::lock_key(args.key, false); reread++)
    {
        if (reread == busy_rereads)
            return held_by_transaction(record);
        pg_usleep(busy_reread_pause_us);
        CHECK_FOR_INTERRUPTS();
        state = observe(storage, args, record, now);
        if (!needs_claim(state))
            return answer_without_claim(state, record, now);
    }

    // Under the key lock nobody else writes this key: decide on what is there,
    // write, and let go -- the uncommitted row then speaks for the claim.
    BeginAnswer result;
    state = observe(storage, args, record, now);
    if (!needs_claim(state))
        result = answer_without_claim(state, record, now);
    else
    {
        if (state == KeyState::absent)
            for (int column = 0; column < store::column_count; column++)
                record.set_null(store::Column(column));
        fill_claim(record, args, state, now);
        if (state == KeyState::absent)
            store::insert_record(storage, args.key, record);
        else
            store::update_record(storage, record);
        result = answer(Outcome::claimed, record);
    }
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
    constexpr stats::Counter counters[] = {stats::claims, stats::replays,
                                           stats::in_progress_answers, stats::mismatches};
    stats::add(counters[int(result.outcome)]);
    return result;
}

struct BeginResultType
{
    TupleDesc desc;
    Oid outcome_oids[4];
};

// The result row type and the outcome enum's OIDs, looked up once per call site.
const BeginResultType *begin_result_type(FunctionCallInfo fcinfo)
{
    if (fcinfo->flinfo->fn_extra)
        return static_cast<const BeginResultType *>(fcinfo->flinfo->fn_extra);
    MemoryContext old = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);
    BeginResultType *type = static_cast<BeginResultType *>(palloc(sizeof(BeginResultType)));
    TupleDesc desc;
    if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
        elog(ERROR, "idempotency_begin must return a composite type");
    type->desc = BlessTupleDesc(desc);
    Oid enum_type = TupleDescAttr(desc, 0)->atttypid;
    for (int i = 0; i < 4; i++)
        type->outcome_oids[i] =
            GetSysCacheOid2(ENUMTYPOIDNAME, Anum_pg_enum_oid, ObjectIdGetDatum(enum_type),
                            CStringGetDatum(outcome_labels[i]));
    MemoryContextSwitchTo(old);
    fcinfo->flinfo->fn_extra = type;
    return type;
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
    begin_column_count
};

Datum begin_result(FunctionCallInfo fcinfo, const BeginAnswer &result)
{
    const BeginResultType *type = begin_result_type(fcinfo);
    Datum values[begin_column_count];
    bool nulls[begin_column_count];
    for (int i = 0; i < begin_column_count; i++)
        nulls[i] = true;
    auto copy = [&](BeginColumn out, store::Column in) {
        values[out] = result.record.values[in];
        nulls[out] = result.record.nulls[in];
    };
    values[out_outcome] = ObjectIdGetDatum(type->outcome_oids[int(result.outcome)]);
    nulls[out_outcome] = false;
    if (result.record.found)
    {
        // A mismatch tells when the key frees up, nothing about the other request.
        copy(out_created_at, store::col_created_at);
        copy(out_expires_at, store::col_expires_at);
        if (result.outcome != Outcome::mismatch)
            copy(out_attempt, store::col_attempt);
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
    }
    return HeapTupleGetDatum(heap_form_tuple(type->desc, values, nulls));
}

// ---------------------------------------------------------------------------
// Writes by the holder: complete, checkpoint, release
// ---------------------------------------------------------------------------

// The caller's in-progress claim, about to be written by write_claim.
struct HeldClaim
{
    Record record;
    bool locked; // holds the key lock, which write_claim lets go
};

// Returns the caller's in-progress claim, or raises the documented error.
// The caller's own uncommitted claim, found by its address, needs no key
// lock: every other writer sees it as in progress and keeps off until this
// transaction ends.  Otherwise (a committed claim, from begin and complete in
// separate transactions, or a claim this backend did not write last) the key
// is read under the key lock, after waiting for another transaction's
// uncommitted change, as an UPDATE waits for a concurrent one.
HeldClaim held_claim(Storage &storage, const store::Key &key, bool has_attempt, int32 attempt)
{
    HeldClaim claim;
    claim.locked = !store::fetch_own_claim(storage, key, &claim.record);
    while (claim.locked)
    {
        store::lock_key(key, true);
        claim.record = store::read_latest(storage, key);
        if (!claim.record.held_by_other())
            break;
        store::unlock_key(key);
        store::wait_for_transaction(claim.record.writer_xid);
    }
    const Record &record = claim.record;
    if (!record.found ||
        (record.writer == Writer::committed && record.expired(GetCurrentTimestamp())))
        ereport(ERROR, (errcode(errcode_key_not_claimed),
                        errmsg("idempotency key \"%s\" is not claimed", key_for_message(key.key)),
                        errhint("Call idempotency_begin() first."), errhidestmt(true)));
    // A fenced-off holder hears that first: its result must not be stored.
    if (has_attempt && attempt != record.attempt())
        ereport(ERROR, (errcode(errcode_stale_attempt),
                        errmsg("attempt %d of idempotency key \"%s\" is stale", attempt,
                               key_for_message(key.key)),
                        errdetail("The key's current attempt is %d: its lease ended and another "
                                  "caller took it over.",
                                  record.attempt()),
                        errhidestmt(true)));
    if (record.completed())
        ereport(ERROR,
                (errcode(errcode_key_completed),
                 errmsg("idempotency key \"%s\" is already completed", key_for_message(key.key)),
                 errhidestmt(true)));
    return claim;
}

void write_claim(Storage &storage, const store::Key &key, HeldClaim &claim)
{
    store::update_record(storage, claim.record);
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
// back: the common course of complete, checkpoint and release.
template <typename Change>
void change_held_claim(const store::Key &key_arg, bool has_attempt, int32 attempt, Settles settles,
                       Change change)
{
    Storage storage = store::open(RowExclusiveLock);
    store::Key key = store::stored_key(storage, key_arg);
    HeldClaim claim = held_claim(storage, key, has_attempt, attempt);
    change(storage, claim.record);
    write_claim(storage, key, claim);
    store::close(storage);
    if (settles == Settles::yes)
        idempotency::claims::note_settled(key);
}

// The uncompressed size of a varlena argument, 0 when not given.
int64 argument_bytes(FunctionCallInfo fcinfo, int n)
{
    return has_arg(fcinfo, n) ? int64(toast_raw_datum_size(PG_GETARG_DATUM(n))) : 0;
}

// A recovery point is limited by idempotency.max_response_bytes.
void check_stored_size(int64 bytes, const char *what, const store::Key &key)
{
    if (bytes > settings::max_response_bytes)
        ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
                        errmsg("%s of idempotency key \"%s\" is too large (%lld bytes)", what,
                               key_for_message(key.key), (long long)bytes),
                        errdetail("idempotency.max_response_bytes is %d bytes.",
                                  settings::max_response_bytes),
                        errhidestmt(true)));
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
    complete_body_bytes
};

// What of a response gets stored.  A response over idempotency.max_response_bytes
// is still completed -- failing would roll the work back, and every retry
// would do it again and fail again -- but without its body (and without its
// headers, when they alone are over), marked as omitted.
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

// Columns that a table still at 0.1.0 lacks cannot take what the caller gave.
void require_column(const Storage &storage, store::Column column, const char *what)
{
    if (!storage.has(column))
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("%s needs the extension's 0.2.0 storage", what),
                        errhint("Run ALTER EXTENSION idempotency UPDATE in this database."),
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
    require_writable("idempotency_begin");

    Storage storage = store::open(RowExclusiveLock);
    args.key = store::stored_key(storage, args.key);
    BeginAnswer result = begin(storage, args);
    store::close(storage);
    if (result.outcome == Outcome::claimed)
        idempotency::claims::note_claim(args.key, args.lease_given);
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
    require_writable("idempotency_complete");

    bool store_response = status < 500 || settings::store_server_errors;
    change_held_claim(
        key, has_attempt, attempt, Settles::yes, [&](const Storage &storage, Record &record) {
            TimestampTz now = GetCurrentTimestamp();
            if (!store_response)
            {
                // A server error is transient: drop the claim so that a retry runs again.
                record.set(store::col_lease_expires_at, TimestampTzGetDatum(now));
                return;
            }
            if (has_arg(fcinfo, complete_body_bytes))
                require_column(storage, store::col_response_body_bytes, "response_body_bytes");
            if (!response.body && !storage.has(store::col_response_body_omitted))
                check_stored_size(response.size, "response", key); // 0.1.0 refused it
            record.set(store::col_status, CharGetDatum(store::status_completed));
            record.set(store::col_completed_at, TimestampTzGetDatum(now));
            record.set(store::col_expires_at,
                       TimestampTzGetDatum(
                           expiry_after(now, DatumGetIntervalP(record.values[store::col_ttl]))));
            record.set_null(store::col_lease_expires_at);
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
        });
    if (store_response && !response.body)
        warn_omitted(key, response);
    idempotency::stats::add(store_response ? idempotency::stats::completes
                                           : idempotency::stats::server_errors_dropped);
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
    change_held_claim(key, has_attempt, attempt, Settles::no, [&](const Storage &, Record &record) {
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
    });
    idempotency::stats::add(idempotency::stats::checkpoints);
    PG_RETURN_TIMESTAMPTZ(lease_end);
}

IDEMPOTENCY_FUNCTION(idempotency_release)
{
    store::Key key = key_args(fcinfo);
    int32 attempt = 0;
    bool has_attempt = optional_int_arg(fcinfo, 2, &attempt);
    require_writable("idempotency_release");

    change_held_claim(key, has_attempt, attempt, Settles::yes, [](const Storage &, Record &record) {
        record.set(store::col_lease_expires_at, TimestampTzGetDatum(GetCurrentTimestamp()));
    });
    idempotency::stats::add(idempotency::stats::releases);
    PG_RETURN_VOID();
}

// What is wrong with a scope and key, NULL when nothing: the same rule the
// other functions raise errors for, so that a handler can answer 400 without
// relying on an error (whose statement a log might keep).
IDEMPOTENCY_FUNCTION(idempotency_key_problem)
{
    const char *problem = nullptr;
    if (PG_ARGISNULL(0))
        problem = "scope is null";
    else if (PG_ARGISNULL(1))
        problem = "key is null";
    else
        switch (key_problem(PG_GETARG_DATUM(0), PG_GETARG_DATUM(1)))
        {
            case KeyProblem::empty_key:
                problem = "key is empty";
                break;
            case KeyProblem::long_scope:
                problem = psprintf("scope is longer than %d bytes", settings::max_key_length);
                break;
            case KeyProblem::long_key:
                problem = psprintf("key is longer than %d bytes", settings::max_key_length);
                break;
            case KeyProblem::none:
                break;
        }
    if (problem == nullptr)
        PG_RETURN_NULL();
    PG_RETURN_TEXT_P(cstring_to_text(problem));
}

// ---------------------------------------------------------------------------
// idempotency_lookup
// ---------------------------------------------------------------------------

namespace
{

enum LookupColumn
{
    look_status,
    look_request,
    look_attempt,
    look_response_status,
    look_response_body,
    look_response_headers,
    look_recovery_point,
    look_created_at,
    look_lease_expires_at,
    look_completed_at,
    look_expires_at,
    // 0.2.0
    look_response_body_bytes,
    look_response_body_omitted,
    lookup_column_count
};

// A row of idempotency_lookup (of fewer columns when called through an older
// version's declaration: heap_form_tuple takes the result type's).
HeapTuple lookup_tuple(TupleDesc desc, const Record &record)
{
    constexpr store::Column sources[lookup_column_count] = {store::col_status,
                                                            store::col_request,
                                                            store::col_attempt,
                                                            store::col_response_status,
                                                            store::col_response_body,
                                                            store::col_response_headers,
                                                            store::col_recovery_point,
                                                            store::col_created_at,
                                                            store::col_lease_expires_at,
                                                            store::col_completed_at,
                                                            store::col_expires_at,
                                                            store::col_response_body_bytes,
                                                            store::col_response_body_omitted};
    Datum values[lookup_column_count];
    bool nulls[lookup_column_count];
    for (int i = 0; i < lookup_column_count; i++)
    {
        values[i] = record.values[sources[i]];
        nulls[i] = record.nulls[sources[i]];
    }
    values[look_status] = CStringGetTextDatum(record.completed() ? "completed" : "in_progress");
    return heap_form_tuple(desc, values, nulls);
}

} // namespace

IDEMPOTENCY_FUNCTION(idempotency_lookup)
{
    FuncCallContext *call;
    if (SRF_IS_FIRSTCALL())
    {
        call = SRF_FIRSTCALL_INIT();
        MemoryContext old = MemoryContextSwitchTo(call->multi_call_memory_ctx);
        store::Key key = key_args(fcinfo);
        TupleDesc desc;
        if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
            elog(ERROR, "idempotency_lookup must return a composite type");
        desc = BlessTupleDesc(desc);
        Storage storage = store::open(AccessShareLock);
        Snapshot snapshot = ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot();
        Record record = store::read_visible(storage, store::stored_key(storage, key), snapshot);
        store::close(storage);
        call->user_fctx = record.found && !record.expired(GetCurrentTimestamp())
                              ? lookup_tuple(desc, record)
                              : nullptr;
        MemoryContextSwitchTo(old);
    }
    call = SRF_PERCALL_SETUP();
    if (call->user_fctx)
    {
        HeapTuple tuple = static_cast<HeapTuple>(call->user_fctx);
        call->user_fctx = nullptr;
        SRF_RETURN_NEXT(call, HeapTupleGetDatum(tuple));
    }
    SRF_RETURN_DONE(call);
}

// ---------------------------------------------------------------------------
// Expiry and statistics
// ---------------------------------------------------------------------------

IDEMPOTENCY_FUNCTION(idempotency_expire)
{
    int64 max_rows = has_arg(fcinfo, 0) ? PG_GETARG_INT64(0) : -1;
    if (has_arg(fcinfo, 0) && max_rows < 0)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("invalid max_rows %lld", (long long)max_rows),
                        errdetail("max_rows must be zero or more, or NULL for no limit."),
                        errhidestmt(true)));
    require_writable("idempotency_expire");
    Storage storage = store::open(RowExclusiveLock);
    int64 deleted = store::expire(storage, GetCurrentTimestamp(), max_rows);
    store::close(storage);
    idempotency::stats::add(idempotency::stats::keys_expired, uint64(deleted));
    PG_RETURN_INT64(deleted);
}

IDEMPOTENCY_FUNCTION(idempotency_stats)
{
    namespace stats = idempotency::stats;
    TupleDesc desc;
    if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
        elog(ERROR, "idempotency_stats must return a composite type");
    desc = BlessTupleDesc(desc);
    // Result columns: preloaded, then the counters in stats::Counter order
    // (wait_time as an interval), then the sweep and error fields.
    constexpr int column_count = 1 + stats::counter_count + 4;
    Datum values[column_count];
    bool nulls[column_count];
    for (int i = 0; i < column_count; i++)
        nulls[i] = !stats::available();
    values[0] = BoolGetDatum(stats::available());
    nulls[0] = false;
    if (stats::available())
    {
        stats::Snapshot snapshot = stats::read();
        for (int i = 0; i < stats::counter_count; i++)
            values[1 + i] = Int64GetDatum(int64(snapshot.counters[i]));
        values[1 + stats::wait_time_us] =
            IntervalPGetDatum(interval_from_us(int64(snapshot.counters[stats::wait_time_us])));
        int last = 1 + stats::counter_count;
        values[last] = TimestampTzGetDatum(snapshot.last_sweep_at);
        nulls[last] = snapshot.last_sweep_at == DT_NOBEGIN;
        values[last + 1] = IntervalPGetDatum(interval_from_us(snapshot.last_sweep_us));
        nulls[last + 1] = nulls[last];
        values[last + 2] = CStringGetTextDatum(snapshot.last_error);
        nulls[last + 2] = snapshot.last_error_at == DT_NOBEGIN;
        values[last + 3] = TimestampTzGetDatum(snapshot.last_error_at);
        nulls[last + 3] = nulls[last + 2];
    }
    return HeapTupleGetDatum(heap_form_tuple(desc, values, nulls));
}
