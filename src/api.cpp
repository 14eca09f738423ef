// The SQL functions of a request's life: begin, complete, checkpoint,
// release, forget.  Each checks its arguments, makes one call of the routed
// storage session (session.hpp) -- which runs the claims module's entry
// point (claims.hpp) that does what it asks, here or on the shard's node --
// and builds its result: no rule of the protocol is kept here, no key lock
// taken, no transaction waited for, no storage opened.
#include "arguments.hpp"
#include "boundary.hpp"
#include "claims.hpp"
#include "session.hpp"
#include "settings.hpp"

extern "C"
{
#include "access/htup_details.h"
#include "catalog/pg_enum.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/typcache.h"
}

namespace
{

using namespace idempotency::arguments;
using idempotency::key_for_message;
using idempotency::claims::BeginAnswer;
using idempotency::claims::BeginRequest;
using idempotency::claims::Outcome;
using idempotency::store::Storage;
namespace claims = idempotency::claims;
namespace session = idempotency::session;
namespace settings = idempotency::settings;
namespace store = idempotency::store;

// ---------------------------------------------------------------------------
// idempotency_begin
// ---------------------------------------------------------------------------

constexpr const char *outcome_labels[] = {"claimed", "replay", "in_progress", "mismatch"};

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
// declaration has fewer columns): a copy of the type cache's descriptor,
// kept for the backend.  Safe to keep: the type cache entry of a type never
// moves, and whenever the type changes (ALTER TYPE, the extension dropped
// and created again under the same OID) the type cache drops its descriptor
// and numbers the next one afresh (tupDesc_identifier), which the copy is
// checked against at each call; a type of another OID misses the cache.  The
// copy is read where nothing can process invalidations before it is used.
struct ResultDescCache
{
    Oid type = InvalidOid;
    TypeCacheEntry *entry = nullptr;
    uint64 identifier = 0;
    TupleDesc desc = nullptr;
};
static ResultDescCache result_desc_cache;

static TupleDesc begin_result_desc(FunctionCallInfo fcinfo)
{
    Oid type = get_fn_expr_rettype(fcinfo->flinfo);
    if (!OidIsValid(type))
        type = get_func_rettype(fcinfo->flinfo->fn_oid);
    ResultDescCache &cache = result_desc_cache;
    if (cache.type == type && cache.entry->tupDesc != nullptr &&
        cache.entry->tupDesc_identifier == cache.identifier && idempotency::caches_on())
        return cache.desc;
    TupleDesc current = lookup_rowtype_tupdesc(type, -1);
    TypeCacheEntry *entry = lookup_type_cache(type, TYPECACHE_TUPDESC);
    TupleDesc copy = CreateTupleDescCopy(current);
    uint64 identifier = entry->tupDesc_identifier;
    ReleaseTupleDesc(current);
    // Moved to the backend's memory only now, with nothing left to fail.
    MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
    TupleDesc kept = CreateTupleDescCopy(copy);
    MemoryContextSwitchTo(old);
    if (cache.desc != nullptr)
        FreeTupleDesc(cache.desc);
    cache = {type, entry, identifier, kept};
    return kept;
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
    return HeapTupleGetDatum(row);
}

// Whether a forwarded begin's answer (a row of the call's result type) is a claim.
bool answer_is_claim(FunctionCallInfo fcinfo, Datum answer)
{
    TupleDesc desc = begin_result_desc(fcinfo);
    bool isnull;
    Datum outcome = GetAttributeByNum(DatumGetHeapTupleHeader(answer), 1, &isnull);
    bool claim =
        !isnull && DatumGetObjectId(outcome) ==
                       outcome_oids(TupleDescAttr(desc, 0)->atttypid).labels[int(Outcome::claimed)];
    return claim;
}

// ---------------------------------------------------------------------------
// The holder's writes: complete, checkpoint, release, forget
// ---------------------------------------------------------------------------

// An attempt argument, as the fence of a holder's write.
claims::Fence fence_arg(FunctionCallInfo fcinfo, int n)
{
    claims::Fence fence = {false, 0};
    fence.given = optional_int_arg(fcinfo, n, &fence.attempt);
    return fence;
}

NullableDatum optional_arg(FunctionCallInfo fcinfo, int n)
{
    NullableDatum value = {(Datum)0, true};
    if (has_arg(fcinfo, n))
        value = {PG_GETARG_DATUM(n), false};
    return value;
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
    bool omit =
        !has_arg(fcinfo, complete_omit_oversized) || PG_GETARG_BOOL(complete_omit_oversized);
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

// The checks of what the table can hold that idempotency_complete makes
// once the claim is found to be the caller's (claims::Response): a table
// still at 0.1.0 has no column for a body given as bytes, nor for marking a
// body omitted, so that such a body is refused as 0.1.0 refused it.
struct TableCheck
{
    FunctionCallInfo fcinfo;
    const store::Key *key;
    const StoredResponse *response;
};

void check_table_holds(const Storage &storage, void *arg)
{
    const TableCheck *check = static_cast<const TableCheck *>(arg);
    FunctionCallInfo fcinfo = check->fcinfo;
    if (has_arg(fcinfo, complete_body_bytes))
        require_column(storage, store::col_response_body_bytes, "response_body_bytes");
    if (!check->response->body && !storage.has(store::col_response_body_omitted))
        check_stored_size(check->response->size, "response", *check->key);
}

} // namespace

IDEMPOTENCY_FUNCTION(idempotency_begin)
{
    BeginRequest request;
    request.key = key_args(fcinfo);
    request.request = required_arg(fcinfo, 2, "request");
    request.ttl = ttl_arg(fcinfo, 3);
    Interval *lease = optional_lease_arg(fcinfo, 4);
    request.lease_given = lease != nullptr;
    request.lease = request.lease_given ? lease : default_lease();
    request.wait_us = wait_arg_us(fcinfo, 5);
    request.has_claim_data = has_arg(fcinfo, 6);
    request.claim_data = request.has_claim_data ? PG_GETARG_DATUM(6) : (Datum)0;
    check_stored_size(argument_bytes(fcinfo, 6), "claim_data", request.key);
    request.take_over_mismatch = has_arg(fcinfo, 7) && PG_GETARG_BOOL(7);
    require_writable("idempotency_begin");

    BeginAnswer answer;
    Datum forwarded;
    if (!session::begin(fcinfo, request, answer_is_claim, &answer, &forwarded))
        return forwarded;
    return begin_result(fcinfo, answer);
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
    StoredResponse stored = response_to_store(fcinfo);
    claims::Fence fence = fence_arg(fcinfo, complete_attempt);
    bool replace = has_arg(fcinfo, complete_replace) && PG_GETARG_BOOL(complete_replace);
    require_writable("idempotency_complete");

    bool store_response = claims::stores_response(status);
    if (store_response)
        refuse_oversized(fcinfo, key, stored);
    if (replace && !store_response)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("a response with status %d cannot replace a stored one", status),
                        errdetail("Server errors are not stored while "
                                  "idempotency.store_server_errors is off."),
                        errhidestmt(true)));
    TableCheck check = {fcinfo, &key, &stored};
    claims::Response response;
    response.status = status;
    response.replace = replace;
    response.body = optional_arg(fcinfo, complete_body);
    response.body_bytes = optional_arg(fcinfo, complete_body_bytes);
    response.headers = optional_arg(fcinfo, complete_headers);
    response.body_kept = stored.body;
    response.headers_kept = stored.headers;
    response.check_table = check_table_holds;
    response.check_arg = &check;
    Datum forwarded;
    if (!session::write(
            fcinfo, key, claims::Write::complete,
            [&](Storage &storage, const store::Key &stored_key) {
                (void)claims::complete(storage, stored_key, fence, response);
            },
            &forwarded))
        return forwarded;
    if (store_response && !stored.body)
        warn_omitted(key, stored);
    PG_RETURN_BOOL(store_response);
}

IDEMPOTENCY_FUNCTION(idempotency_checkpoint)
{
    store::Key key = key_args(fcinfo);
    check_stored_size(argument_bytes(fcinfo, 2), "recovery_point", key);
    Interval *lease = optional_lease_arg(fcinfo, 3);
    claims::Fence fence = fence_arg(fcinfo, 4);
    require_writable("idempotency_checkpoint");

    TimestampTz lease_end;
    Datum forwarded;
    if (!session::write(
            fcinfo, key, claims::Write::checkpoint,
            [&](Storage &storage, const store::Key &stored_key) {
                lease_end = claims::checkpoint(storage, stored_key, fence, optional_arg(fcinfo, 2),
                                               lease, default_lease());
            },
            &forwarded))
        return forwarded;
    PG_RETURN_TIMESTAMPTZ(lease_end);
}

IDEMPOTENCY_FUNCTION(idempotency_release)
{
    store::Key key = key_args(fcinfo);
    claims::Fence fence = fence_arg(fcinfo, 2);
    require_writable("idempotency_release");

    Datum forwarded;
    if (!session::write(
            fcinfo, key, claims::Write::release,
            [&](Storage &storage, const store::Key &stored_key) {
                claims::release(storage, stored_key, fence);
            },
            &forwarded))
        return forwarded;
    PG_RETURN_VOID();
}

// Deletes the key's record: a completed one, or an unfinished claim (an
// unfinished claim of another transaction only with its attempt).  Returns
// whether there was a live record to delete.
IDEMPOTENCY_FUNCTION(idempotency_forget)
{
    store::Key key = key_args(fcinfo);
    claims::Fence fence = fence_arg(fcinfo, 2);
    require_writable("idempotency_forget");

    bool forgotten = false;
    Datum forwarded;
    if (!session::write(
            fcinfo, key, claims::Write::forget,
            [&](Storage &storage, const store::Key &stored_key) {
                forgotten = claims::forget(storage, stored_key, fence);
            },
            &forwarded))
        return forwarded;
    PG_RETURN_BOOL(forgotten);
}
