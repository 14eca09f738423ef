// The expiry worker.
//
// The launcher connects to no database: it reads pg_database (a shared
// catalog) every idempotency.expire_interval and, one database at a time,
// starts a sweeper connected to that database and waits for it to finish.  A
// sweeper checks that the extension is installed, deletes expired keys in
// short transactions through claims::expire_here (the same code as
// idempotency_expire()), and exits.  So nothing stays connected to a database
// between rounds (DROP DATABASE never waits long), template databases are
// never touched (CREATE DATABASE copies them), and a database created or
// dropped while the server runs is picked up or forgotten on the next round.
// The launcher starts only once recovery has finished: on a hot standby it
// does not run at all, and it starts by itself after promotion.  After its
// sweep, a sweeper refreshes the database's per-scope summary when it is older
// than idempotency.scope_stats_interval (see scope_stats.cpp).
#include "worker.hpp"
#include "boundary.hpp"
#include "claims.hpp"
#include "compat.hpp"
#include "settings.hpp"
#include "scope_stats.hpp"
#include "stats.hpp"
#include "store.hpp"

extern "C"
{
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/wait_event.h"

PGDLLEXPORT void idempotency_launcher_main(Datum argument);
PGDLLEXPORT void idempotency_sweeper_main(Datum argument);
}

namespace idempotency::worker
{

// A sweeper stops after this long and leaves the rest to the next round, so
// that DROP DATABASE (which waits up to 5 s for other sessions) never fails
// because of it.
constexpr int64 sweeper_budget_us = 2 * USECS_PER_SEC;

// The launcher restarts this long after it fails or is terminated.
constexpr int launcher_restart_s = 5;

static void fill_worker(BackgroundWorker *worker, const char *function, const char *name)
{
    memset(worker, 0, sizeof(*worker));
    worker->bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
    worker->bgw_start_time = BgWorkerStart_RecoveryFinished;
    strlcpy(worker->bgw_library_name, "idempotency", BGW_MAXLEN);
    strlcpy(worker->bgw_function_name, function, BGW_MAXLEN);
    strlcpy(worker->bgw_name, name, BGW_MAXLEN);
    strlcpy(worker->bgw_type, name, BGW_MAXLEN);
}

void register_launcher()
{
    BackgroundWorker launcher;
    fill_worker(&launcher, "idempotency_launcher_main", "idempotency launcher");
    launcher.bgw_restart_time = launcher_restart_s;
    RegisterBackgroundWorker(&launcher);
}

// Template databases are never connected to (CREATE DATABASE copies them
// and fails while anyone is connected), nor are databases that refuse
// connections or were left half-dropped.
static bool is_sweepable(Form_pg_database database)
{
    return !database->datistemplate && database->datallowconn &&
           !compat::database_is_invalid(database);
}

// Databases a sweeper may connect to, read from the shared catalog.
static List *sweepable_databases(MemoryContext context)
{
    List *databases = NIL;
    StartTransactionCommand();
    PushActiveSnapshot(GetTransactionSnapshot());
    Relation pg_database = table_open(DatabaseRelationId, AccessShareLock);
    TableScanDesc scan = table_beginscan_catalog(pg_database, 0, nullptr);
    HeapTuple tuple;
    while ((tuple = heap_getnext(scan, ForwardScanDirection)) != nullptr)
    {
        Form_pg_database database = reinterpret_cast<Form_pg_database>(GETSTRUCT(tuple));
        if (!is_sweepable(database))
            continue;
        MemoryContext previous = MemoryContextSwitchTo(context);
        databases = lappend_oid(databases, database->oid);
        MemoryContextSwitchTo(previous);
    }
    table_endscan(scan);
    table_close(pg_database, AccessShareLock);
    PopActiveSnapshot();
    CommitTransactionCommand();
    return databases;
}

// Whether `database` still exists and takes connections, read under the lock
// sweep_database holds.
static bool still_sweepable(Oid database)
{
    StartTransactionCommand();
    HeapTuple tuple = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(database));
    bool sweepable = false;
    if (HeapTupleIsValid(tuple))
    {
        sweepable = is_sweepable(reinterpret_cast<Form_pg_database>(GETSTRUCT(tuple)));
        ReleaseSysCache(tuple);
    }
    CommitTransactionCommand();
    return sweepable;
}

// Starts a sweeper in `database` and waits for it to exit.
static void run_sweeper(Oid database)
{
    BackgroundWorker sweeper;
    fill_worker(&sweeper, "idempotency_sweeper_main", "idempotency sweeper");
    sweeper.bgw_restart_time = BGW_NEVER_RESTART;
    sweeper.bgw_main_arg = ObjectIdGetDatum(database);
    sweeper.bgw_notify_pid = MyProcPid;
    BackgroundWorkerHandle *handle;
    if (!RegisterDynamicBackgroundWorker(&sweeper, &handle))
        return; // no free worker slot (max_worker_processes): next round
    pid_t pid;
    if (WaitForBackgroundWorkerStartup(handle, &pid) == BGWH_STARTED)
        WaitForBackgroundWorkerShutdown(handle);
    pfree(handle);
}

// Runs one sweeper in `database` and waits for it to exit.  A sweeper must
// never start in a database that is gone: connecting would end with a FATAL
// in the log.  So the launcher checks that the database exists under a lock
// on it, which DROP DATABASE waits for, and holds the lock until the sweeper
// holds one of its own (see hold_database).  Between them, DROP DATABASE
// waits for the sweep (at most sweeper_budget_us) instead of racing it.
static void sweep_database(Oid database)
{
    LockSharedObjectForSession(DatabaseRelationId, database, 0, AccessShareLock);
    if (still_sweepable(database))
        run_sweeper(database);
    UnlockSharedObjectForSession(DatabaseRelationId, database, 0, AccessShareLock);
}

// SIGTERM (shutdown, or pg_terminate_backend) ends the launcher at its next
// check, quietly and with status 1 so that a terminated launcher is restarted.
static volatile sig_atomic_t terminate_requested = false;

static void request_termination(SIGNAL_ARGS)
{
    int saved_errno = errno;
    terminate_requested = true;
    SetLatch(MyLatch);
    errno = saved_errno;
}

static void exit_if_terminated()
{
    if (terminate_requested)
        proc_exit(1);
}

static void reload_configuration_if_asked()
{
    if (ConfigReloadPending)
    {
        ConfigReloadPending = false;
        ProcessConfigFile(PGC_SIGHUP);
    }
}

static void launcher_loop()
{
    MemoryContext round_context =
        AllocSetContextCreate(TopMemoryContext, "idempotency launcher round", ALLOCSET_SMALL_SIZES);
    for (;;)
    {
        CHECK_FOR_INTERRUPTS();
        exit_if_terminated();
        reload_configuration_if_asked();
        if (settings::worker_enabled)
        {
            ListCell *cell;
            foreach (cell, sweepable_databases(round_context))
            {
                exit_if_terminated();
                sweep_database(lfirst_oid(cell));
            }
            MemoryContextReset(round_context);
        }
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
                        settings::expire_interval_ms, PG_WAIT_EXTENSION);
        ResetLatch(MyLatch);
    }
}

// One batch in its own transaction: no snapshot or xid survives it.  -1 when
// the database has no extension to sweep.
static int64 sweep_batch(TimestampTz now)
{
    int64 deleted = -1;
    SetCurrentStatementStartTimestamp();
    StartTransactionCommand();
    PushActiveSnapshot(GetTransactionSnapshot());
    pgstat_report_activity(STATE_RUNNING, "expiring idempotency keys");
    // Invisible until CREATE EXTENSION commits, so never mid-creation.
    // With Citus, the shards placed on this node too (store::expire_here).
    if (OidIsValid(get_extension_oid("idempotency", true)) &&
        !claims::expire_here(now, settings::expire_batch_size, store::Pace::share, true, &deleted))
        deleted = 0;
    PopActiveSnapshot();
    CommitTransactionCommand();
    pgstat_report_activity(STATE_IDLE, nullptr);
    return deleted;
}

// Keeps the message of the error being raised for idempotency_stats().
// Called in PG_CATCH, where the current memory context is still ErrorContext,
// which error recovery resets: CopyErrorData() must not copy into it (an
// assert-enabled server stops the process there), so the copy is made in
// TopMemoryContext and freed at once.
static void record_error()
{
    MemoryContext error_context = MemoryContextSwitchTo(TopMemoryContext);
    ErrorData *error = CopyErrorData();
    stats::record_error(error->message);
    FreeErrorData(error);
    MemoryContextSwitchTo(error_context);
}

static void sweep_until_done()
{
    TimestampTz started = GetCurrentTimestamp();
    volatile uint64 expired = 0; // read after a longjmp: volatile
    volatile bool swept = true;
    PG_TRY();
    {
        for (;;)
        {
            TimestampTz now = GetCurrentTimestamp();
            int64 deleted = sweep_batch(now);
            // A database without the extension has had no sweep (and no
            // return out of PG_TRY: it would leave its handler installed).
            if (deleted < 0)
            {
                swept = false;
                break;
            }
            expired += deleted;
            if (deleted < settings::expire_batch_size || now - started > sweeper_budget_us)
                break;
            CHECK_FOR_INTERRUPTS();
        }
    }
    PG_CATCH();
    {
        // Keep the message for idempotency_stats(), then fail as usual: the
        // error is logged, and the next round tries again.
        record_error();
        stats::add(stats::keys_expired, expired);
        PG_RE_THROW();
    }
    PG_END_TRY();
    if (swept)
        stats::record_sweep(started, GetCurrentTimestamp(), expired);
}

// The summary in a transaction of its own, skipped when it is recent, when
// the extension is missing or older, or when DDL or another refresh holds its
// tables (see scope_stats::refresh).
static void refresh_scope_stats()
{
    if (settings::summary_interval_ms == 0)
        return;
    SetCurrentStatementStartTimestamp();
    StartTransactionCommand();
    PushActiveSnapshot(GetTransactionSnapshot());
    pgstat_report_activity(STATE_RUNNING, "refreshing idempotency scope statistics");
    PG_TRY();
    {
        // Invisible until CREATE EXTENSION commits, so never mid-creation.
        if (OidIsValid(get_extension_oid("idempotency", true)))
            (void)scope_stats::refresh(false, settings::summary_interval_ms);
    }
    PG_CATCH();
    {
        record_error();
        PG_RE_THROW();
    }
    PG_END_TRY();
    PopActiveSnapshot();
    CommitTransactionCommand();
    pgstat_report_activity(STATE_IDLE, nullptr);
}

// The sweeper's own lock on its database, held while it connects.  The
// launcher's lock keeps the database from being dropped until the sweeper
// holds this one.  Without a lock of its own, connecting could deadlock: a
// DROP DATABASE queued behind the launcher's lock makes the connection's lock
// wait behind it, while the launcher waits for the sweeper.  So the lock is
// taken without waiting (false when DROP or ALTER DATABASE is queued), and
// while it is held the connection's lock is granted ahead of the queue.  Once
// connected, the sweeper is a session of the database like any other, and
// lets the lock go.  A session lock outlives the process unless released, so
// an exit in between (a FATAL) releases it too.
static LOCKTAG database_lock;
static bool database_locked = false;

static void release_database(int, Datum)
{
    if (database_locked)
        LockRelease(&database_lock, AccessShareLock, true);
    database_locked = false;
}

static bool hold_database(Oid database)
{
    SET_LOCKTAG_OBJECT(database_lock, InvalidOid, DatabaseRelationId, database, 0);
    before_shmem_exit(release_database, (Datum)0);
    database_locked =
        LockAcquire(&database_lock, AccessShareLock, true, true) != LOCKACQUIRE_NOT_AVAIL;
    return database_locked;
}

} // namespace idempotency::worker

void idempotency_launcher_main(Datum)
{
    idempotency::guarded([] {
        pqsignal(SIGHUP, SignalHandlerForConfigReload);
        pqsignal(SIGTERM, idempotency::worker::request_termination);
        BackgroundWorkerUnblockSignals();
        BackgroundWorkerInitializeConnection(nullptr, nullptr, 0);
        idempotency::worker::launcher_loop();
    });
}

void idempotency_sweeper_main(Datum argument)
{
    idempotency::guarded([argument] {
        pqsignal(SIGTERM, die);
        BackgroundWorkerUnblockSignals();
        Oid database = DatumGetObjectId(argument);
        if (!idempotency::worker::hold_database(database))
            proc_exit(0); // DROP or ALTER DATABASE is waiting: next round
        BackgroundWorkerInitializeConnectionByOid(database, InvalidOid, 0);
        idempotency::worker::release_database(0, (Datum)0);
        // A lost expiry delete is simply repeated: no need to wait for WAL
        // flush.  Timeouts set for the database's users (ALTER DATABASE ...
        // SET) must not stop expiry; batches are short by construction.
        SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);
        SetConfigOption("statement_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
        SetConfigOption("lock_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
        SetConfigOption("idle_in_transaction_session_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
        // The summary's statements name everything with its schema; this
        // keeps a database's search_path from mattering even so.
        SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);
        idempotency::worker::sweep_until_done();
        idempotency::worker::refresh_scope_stats();
    });
}
