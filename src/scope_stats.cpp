// The per-scope summary.  Summarising means scanning the whole keys table, so
// it is done rarely, by the worker (every idempotency.scope_stats_interval)
// or on demand, and idempotency_scope_stats() reads the result: a scrape costs
// a read of one row per scope.
//
// The refresh is two statements run through SPI in the caller's transaction
// (DELETE the summary, INSERT the new one grouped from the keys): readers see
// the old summary until it commits, never an empty one.  Its locks are those
// of any reader of the keys (ACCESS SHARE, which requests never wait for) and
// SHARE UPDATE EXCLUSIVE on the summary, which lets readers through but makes
// two refreshes take turns (two at once would both insert).  The scan checks
// for interrupts like any query, so it can be cancelled.  Every name in the
// statements is schema-qualified and every operator pinned: the worker runs
// them with the database's search_path.
#include "scope_stats.hpp"
#include "arguments.hpp"
#include "boundary.hpp"
#include "citus_placement.hpp"

extern "C"
{
#include "catalog/namespace.h"
#include "executor/spi.h"
#include "nodes/makefuncs.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
}

namespace idempotency::scope_stats
{

// Locks `name` in the schema idempotency; InvalidOid when it is missing or,
// without wait, locked by someone else.
static Oid lock_table(const char *name, LOCKMODE lockmode, bool wait)
{
    uint32 flags = wait ? 0 : RVR_MISSING_OK | RVR_SKIP_LOCKED;
    return RangeVarGetRelidExtended(makeRangeVar(pstrdup("idempotency"), pstrdup(name), -1),
                                    lockmode, flags, nullptr, nullptr);
}

static bool lock_tables(bool wait)
{
    return OidIsValid(lock_table("scope_stats", ShareUpdateExclusiveLock, wait)) &&
           OidIsValid(lock_table("keys", AccessShareLock, wait));
}

// Whether the summary was refreshed less than `min_age_ms` ago.  An empty
// summary (no keys, or never refreshed) is never recent: summarising an empty
// table costs nothing.
static bool recently_refreshed(int min_age_ms)
{
    if (min_age_ms <= 0)
        return false;
    if (SPI_execute("SELECT pg_catalog.max(s.refreshed_at) FROM idempotency.scope_stats AS s", true,
                    1) != SPI_OK_SELECT ||
        SPI_processed != 1)
        elog(ERROR, "could not read idempotency.scope_stats");
    bool isnull;
    Datum refreshed = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
    return !isnull && !TimestampDifferenceExceeds(DatumGetTimestampTz(refreshed),
                                                  GetCurrentTimestamp(), min_age_ms);
}

static const char *const delete_summary = "DELETE FROM idempotency.scope_stats";

static const char *const insert_summary =
    "INSERT INTO idempotency.scope_stats (scope, in_progress, completed, expired,"
    " oldest_created_at, oldest_in_progress_created_at, refreshed_at)"
    " SELECT k.scope,"
    "  pg_catalog.count(*) FILTER (WHERE k.status OPERATOR(pg_catalog.=) 'p'::pg_catalog.\"char\"),"
    "  pg_catalog.count(*) FILTER (WHERE k.status OPERATOR(pg_catalog.=) 'c'::pg_catalog.\"char\"),"
    "  pg_catalog.count(*) FILTER (WHERE k.expires_at OPERATOR(pg_catalog.<=) pg_catalog.now()),"
    "  pg_catalog.min(k.created_at),"
    "  pg_catalog.min(k.created_at)"
    "   FILTER (WHERE k.status OPERATOR(pg_catalog.=) 'p'::pg_catalog.\"char\"),"
    "  pg_catalog.now()"
    " FROM idempotency.keys AS k GROUP BY k.scope";

int64 refresh(bool wait, int min_age_ms)
{
    if (!lock_tables(wait))
        return -1;
    SPI_connect();
    int64 scopes = -1;
    // With Citus, the coordinator's refresh reads the keys of every shard (a
    // distributed query); a worker node's would read them all once more, so
    // the background worker refreshes only on the coordinator.
    bool skip = (!wait && citus_placement::worker_node()) || recently_refreshed(min_age_ms);
    if (!skip)
    {
        if (SPI_execute(delete_summary, false, 0) != SPI_OK_DELETE ||
            SPI_execute(insert_summary, false, 0) != SPI_OK_INSERT)
            elog(ERROR, "could not refresh idempotency.scope_stats");
        scopes = int64(SPI_processed);
    }
    SPI_finish();
    return scopes;
}

} // namespace idempotency::scope_stats

// Runs in the caller's transaction, as the extension's owner (SECURITY
// DEFINER): the caller needs no privilege on the tables.
IDEMPOTENCY_FUNCTION(idempotency_scope_stats_refresh)
{
    (void)fcinfo;
    idempotency::arguments::require_writable("idempotency_scope_stats_refresh");
    PG_RETURN_INT64(idempotency::scope_stats::refresh(true, 0));
}
