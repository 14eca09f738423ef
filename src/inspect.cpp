// The SQL functions that read what is stored, expire it and count: lookup,
// the listing of a scope, key_problem, expire, stats; and the key digest that
// moves keys in.  A read of a scope's keys is one call of the routed storage
// session (session.hpp), which reads them here or on the shard's node.
#include "arguments.hpp"
#include "boundary.hpp"
#include "claims.hpp"
#include "key_digest.hpp"
#include "session.hpp"
#include "settings.hpp"
#include "stats.hpp"

extern "C"
{
#include "access/xact.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
}

using namespace idempotency::arguments;
using idempotency::store::Record;
namespace store = idempotency::store;
namespace settings = idempotency::settings;

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
    look_claim_data,
    look_committed,
    lookup_column_count
};

const char *status_text(const Record &record)
{
    return record.completed() ? "completed" : "in_progress";
}

// A row of idempotency_lookup (of fewer columns when called through an older
// version's declaration: heap_form_tuple takes the result type's).  A key
// that another transaction is deleting has no version to show: it is in
// progress, uncommitted, and nothing else is said.
HeapTuple lookup_tuple(TupleDesc desc, const Record &record)
{
    constexpr store::Column sources[look_committed] = {store::col_status,
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
                                                       store::col_response_body_omitted,
                                                       store::col_claim_data};
    Datum values[lookup_column_count];
    bool nulls[lookup_column_count];
    for (int i = 0; i < look_committed; i++)
    {
        values[i] = record.found ? record.values[sources[i]] : (Datum)0;
        nulls[i] = record.found ? record.nulls[sources[i]] : true;
    }
    values[look_status] = CStringGetTextDatum(record.found ? status_text(record) : "in_progress");
    nulls[look_status] = false;
    values[look_committed] = BoolGetDatum(record.writer == store::Writer::committed);
    nulls[look_committed] = false;
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
        bool latest = has_arg(fcinfo, 2) && PG_GETARG_BOOL(2);
        TupleDesc desc;
        if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
            elog(ERROR, "idempotency_lookup must return a composite type");
        desc = BlessTupleDesc(desc);
        bool found;
        Record record;
        HeapTuple forwarded;
        if (idempotency::session::lookup(fcinfo, key, latest, &found, &record, &forwarded))
            call->user_fctx = found ? lookup_tuple(desc, record) : nullptr;
        else
            call->user_fctx = forwarded; // the row the shard's node answered, if any
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
// idempotency_keys: a page of a scope's keys
// ---------------------------------------------------------------------------

namespace
{

constexpr int max_keys_per_page = 10000;

enum KeysColumn
{
    keys_key,
    keys_status,
    keys_attempt,
    keys_response_status,
    keys_created_at,
    keys_lease_expires_at,
    keys_completed_at,
    keys_expires_at,
    keys_committed,
    keys_column_count
};

// A listed record as a row of the call's result (a session::PutRecord).
void put_key_row(const Record &record, void *arg)
{
    ReturnSetInfo *result = static_cast<ReturnSetInfo *>(arg);
    constexpr store::Column sources[keys_committed] = {
        store::col_key,          store::col_status,
        store::col_attempt,      store::col_response_status,
        store::col_created_at,   store::col_lease_expires_at,
        store::col_completed_at, store::col_expires_at};
    Datum values[keys_column_count];
    bool nulls[keys_column_count];
    for (int i = 0; i < keys_committed; i++)
    {
        values[i] = record.values[sources[i]];
        nulls[i] = record.nulls[sources[i]];
    }
    values[keys_status] = CStringGetTextDatum(status_text(record));
    values[keys_committed] = BoolGetDatum(record.writer == store::Writer::committed);
    nulls[keys_committed] = false;
    tuplestore_putvalues(result->setResult, result->setDesc, values, nulls);
}

} // namespace

// Up to max_keys live records of a scope, after after_key in the order of
// the primary key (the keys' digests from 0.5.0 on, before that byte-wise
// key order: store::KeyScan), as the statement's snapshot sees them; never a
// body.  The next page starts after the last key returned.
IDEMPOTENCY_FUNCTION(idempotency_keys)
{
    store::Key scope = {tenant_of_caller(), scope_arg(fcinfo), (Datum)0};
    Datum after_key = has_arg(fcinfo, 1) ? PointerGetDatum(PG_GETARG_TEXT_PP(1)) : (Datum)0;
    int32 max_keys = 100;
    optional_int_arg(fcinfo, 2, &max_keys);
    if (max_keys < 1 || max_keys > max_keys_per_page)
        ereport(ERROR,
                (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("invalid max_keys %d", max_keys),
                 errdetail("max_keys must be between 1 and %d.", max_keys_per_page),
                 errhidestmt(true)));
    InitMaterializedSRF(fcinfo, 0);
    idempotency::session::list(fcinfo, scope, after_key, max_keys, put_key_row, fcinfo->resultinfo);
    return (Datum)0;
}

// ---------------------------------------------------------------------------
// idempotency.key_digest: a key's digest, for moving keys in
// ---------------------------------------------------------------------------

// The digest idempotency.keys stores a key under in this database -- of its
// tenant (a role, or 0 for none), scope and key (key_digest.hpp) -- making
// the database's secret if it has none yet and numbering the tenant if it
// has no number (tenants.hpp): what the update from 0.4.0 rewrites each key
// with, and what any other move of keys into the table (the SQL edition's)
// writes into the digest column.  The scope as stored:
// store::tenant_scope's spelling with Citus.
IDEMPOTENCY_FUNCTION(idempotency_key_digest)
{
    pg_uuid_t *digest = static_cast<pg_uuid_t *>(palloc(sizeof(pg_uuid_t)));
    (void)store::key_digest(PG_GETARG_OID(0), PointerGetDatum(PG_GETARG_TEXT_PP(1)),
                            PointerGetDatum(PG_GETARG_TEXT_PP(2)), store::DigestUse::write, digest);
    PG_RETURN_UUID_P(digest);
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
    int64 deleted;
    if (!idempotency::claims::expire_here(GetCurrentTimestamp(), max_rows, store::Pace::whole_table,
                                          false, &deleted))
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                        errmsg("relation \"idempotency.keys\" does not exist"),
                        errhint("Run CREATE EXTENSION idempotency in this database.")));
    idempotency::stats::add_if_committed(idempotency::stats::keys_expired, uint64(deleted));
    PG_RETURN_INT64(deleted);
}

// Result columns of idempotency_stats, in declaration order: numbers only
// (seconds as double precision, times as seconds since the epoch), so that
// exporters such as postgres_exporter can read every one.  After preloaded
// come the counters, in stats::Counter order (wait_time_us as wait_seconds),
// then the last sweep and the last error.
namespace
{

constexpr int stat_preloaded = 0;

constexpr int counter_column(idempotency::stats::Counter counter)
{
    return 1 + int(counter);
}

enum TrailingStatsColumn
{
    stat_last_sweep_time = counter_column(idempotency::stats::counter_count),
    stat_last_sweep_seconds,
    stat_last_error,
    stat_last_error_time,
    stats_column_count
};

double seconds(int64 us)
{
    return double(us) / USECS_PER_SEC;
}

double epoch_seconds(TimestampTz t)
{
    return seconds(t - SetEpochTimestamp());
}

} // namespace

IDEMPOTENCY_FUNCTION(idempotency_stats)
{
    namespace stats = idempotency::stats;
    TupleDesc desc;
    if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
        elog(ERROR, "idempotency_stats must return a composite type");
    // 0.1.0 declared other columns (intervals and timestamps), which these
    // values would not fit: until ALTER EXTENSION UPDATE, say so.
    if (desc->natts != stats_column_count)
        ereport(ERROR,
                (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                 errmsg("idempotency_stats() is declared by an older version of the extension"),
                 errhint("Run ALTER EXTENSION idempotency UPDATE.")));
    desc = BlessTupleDesc(desc);
    Datum values[stats_column_count];
    bool nulls[stats_column_count];
    for (int i = 0; i < stats_column_count; i++)
        nulls[i] = true;
    values[stat_preloaded] = BoolGetDatum(stats::available());
    nulls[stat_preloaded] = false;
    if (stats::available())
    {
        stats::Snapshot snapshot = stats::read();
        for (int i = 0; i < stats::counter_count; i++)
        {
            values[counter_column(stats::Counter(i))] = Int64GetDatum(int64(snapshot.counters[i]));
            nulls[counter_column(stats::Counter(i))] = false;
        }
        values[counter_column(stats::wait_time_us)] =
            Float8GetDatum(seconds(int64(snapshot.counters[stats::wait_time_us])));
        if (snapshot.last_sweep_at != DT_NOBEGIN)
        {
            values[stat_last_sweep_time] = Float8GetDatum(epoch_seconds(snapshot.last_sweep_at));
            values[stat_last_sweep_seconds] = Float8GetDatum(seconds(snapshot.last_sweep_us));
            nulls[stat_last_sweep_time] = nulls[stat_last_sweep_seconds] = false;
        }
        if (snapshot.last_error_at != DT_NOBEGIN)
        {
            values[stat_last_error] = CStringGetTextDatum(snapshot.last_error);
            values[stat_last_error_time] = Float8GetDatum(epoch_seconds(snapshot.last_error_at));
            nulls[stat_last_error] = nulls[stat_last_error_time] = false;
        }
    }
    return HeapTupleGetDatum(heap_form_tuple(desc, values, nulls));
}
