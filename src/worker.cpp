// The expiry worker.
//
// The launcher connects to no database: it reads pg_database (a shared
// catalog) every idempotency.expire_interval and, one database at a time,
// starts a sweeper connected to that database and waits for it to finish.  A
// sweeper checks that the extension is installed, deletes expired keys in
// short transactions through store::expire (the same code as
// idempotency_expire()), and exits.  So nothing stays connected to a database
// between rounds (DROP DATABASE never waits long), template databases are
// never touched (CREATE DATABASE copies them), and a database created or
// dropped while the server runs is picked up or forgotten on the next round.
// The launcher starts only once recovery has finished: on a hot standby it
// does not run at all, and it starts by itself after promotion.
#include "worker.hpp"
#include "boundary.hpp"
#include "module.hpp"
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
        if (database->datistemplate || !database->datallowconn)
            continue;
#ifdef DATCONNLIMIT_INVALID_DB
        if (database->datconnlimit == DATCONNLIMIT_INVALID_DB)
            continue; // left behind by an interrupted DROP DATABASE
#endif
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

// Runs one sweeper in `database` and waits for it to exit.
static void sweep_database(Oid database)
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

// One batch in its own transaction: no snapshot or xid survives it.
static int64 sweep_batch(TimestampTz now)
{
    int64 deleted = 0;
    SetCurrentStatementStartTimestamp();
    StartTransactionCommand();
    PushActiveSnapshot(GetTransactionSnapshot());
    pgstat_report_activity(STATE_RUNNING, "expiring idempotency keys");
    // Invisible until CREATE EXTENSION commits, so never mid-creation.
    store::Relations rels;
    if (OidIsValid(get_extension_oid("idempotency", true)) &&
        store::try_open_relations(&rels, RowExclusiveLock))
    {
        deleted = store::expire(rels, now, settings::expire_batch_size);
        store::close_relations(rels);
    }
    PopActiveSnapshot();
    CommitTransactionCommand();
    pgstat_report_activity(STATE_IDLE, nullptr);
    return deleted;
}

static void sweep_until_done()
{
    TimestampTz started = GetCurrentTimestamp();
    uint64 expired = 0;
    PG_TRY();
    {
        for (;;)
        {
            TimestampTz now = GetCurrentTimestamp();
            int64 deleted = sweep_batch(now);
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
        ErrorData *error = CopyErrorData();
        stats::record_error(error->message);
        stats::add(stats::keys_expired, expired);
        PG_RE_THROW();
    }
    PG_END_TRY();
    stats::record_sweep(started, GetCurrentTimestamp(), expired);
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
        BackgroundWorkerInitializeConnectionByOid(DatumGetObjectId(argument), InvalidOid, 0);
        // A lost expiry delete is simply repeated: no need to wait for WAL
        // flush.  Timeouts set for the database's users (ALTER DATABASE ...
        // SET) must not stop expiry; batches are short by construction.
        SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);
        SetConfigOption("statement_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
        SetConfigOption("lock_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
        SetConfigOption("idle_in_transaction_session_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
        idempotency::worker::sweep_until_done();
    });
}
