#include "boundary.hpp"

#include <stdexcept>

#include "compat.hpp"
#include "log_gate.hpp"

extern "C"
{
#include "access/xact.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
}

namespace idempotency
{

int injected_fault = fault_none;

void throw_injected_fault()
{
    if (injected_fault == fault_out_of_memory)
        throw std::bad_alloc();
    throw std::runtime_error("fault injected by idempotency.inject_fault");
}

// idempotency.inject_fault's pauses, a superuser's test hooks: each holds
// this session at one moment of the protocol while another session holds
// pg_advisory_lock(key), as an ordinary lock wait that the isolation tester
// sees.  Tests let another session act in that window:
//  * pause_at_subtransaction_abort (18756): a subtransaction's rollback,
//    after it is marked aborted and before the claims' callback (rule L);
//  * pause_before_publish (18757): a fresh claim between its read of the key
//    and its publication (rule A);
//  * pause_in_fallback (18758): a fresh claim made as if the table had no
//    free slot, after its row is written and before its check (rule F);
//  * pause_in_read (18759): a read of the newest version of a key, between
//    its index entry and the version it points to (store.cpp, read_latest);
//    (18762) the same read, between a version it found being deleted or
//    replaced by a transaction in progress and the rest of its scan
//    (claims.hpp, rule R);
//  * pause_before_forwarded_replay (18760): a begin forwarded during a shard
//    move, between its check that the key is completed and the call on the
//    shard's node (citus_routing.cpp, forward_replay);
//  * pause_before_sweep_delete (18761): the expiry sweep, between taking an
//    expired version for itself and deleting it (store.cpp, delete_if_idle);
//  * pause_in_lock_free_routing: a query that Citus routes to a scope's
//    shard without the shard's metadata lock, after Citus planned it and
//    before Citus runs it (citus_routing.cpp, run_request_plan): (18763) a
//    begin's check that its key is completed, (18764) a forwarded replay's
//    or read's call on the shard's node;
//  * pause_before_numbering (18765): a role's first key, between its read
//    that found the role without a number and its INSERT of one
//    (tenants.cpp, tenant_number).
void pause_for_test(InjectedFault at, uint64 key)
{
    if (likely(injected_fault != at))
        return;
    LOCKTAG tag;
    // As pg_advisory_lock(bigint) tags it.
    SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, uint32(key >> 32), uint32(key), 1);
    (void)LockAcquire(&tag, ShareLock, false, false);
    LockRelease(&tag, ShareLock, false);
}

void capture_exception(CaughtException &caught, int sqlerrcode, const char *message) noexcept
{
    caught.sqlerrcode = sqlerrcode;
    size_t n = message ? strnlen(message, sizeof(caught.message) - 1) : 0;
    memcpy(caught.message, message ? message : "", n);
    caught.message[n] = '\0';
}

void report_exception(const CaughtException &caught)
{
    ereport(ERROR, (errcode(caught.sqlerrcode), errmsg("%s", caught.message),
                    errdetail("The error was raised as a C++ exception inside the idempotency "
                              "extension and converted at its error boundary.")));
    pg_unreachable();
}

// Rethrows the error being handled, hidden from the log's statement.
[[noreturn]] static void rethrow_without_request_data(MemoryContext context)
{
    MemoryContextSwitchTo(context);
    ErrorData *error = CopyErrorData();
    FlushErrorState();
    error->hide_stmt = true;
    if (error->sqlerrcode == ERRCODE_T_R_DEADLOCK_DETECTED && error->detail_log != nullptr)
    {
        // The detail for the client (which process waits for which) is
        // logged instead.
        error->detail_log = nullptr;
        error->hint = pstrdup("The statements of the processes are not logged: they may contain "
                              "request data.");
    }
    ReThrowError(error);
}

Datum errors_without_request_data(PGFunction body, FunctionCallInfo fcinfo)
{
    MemoryContext context = CurrentMemoryContext;
    volatile Datum result = (Datum)0;
    // errfinish asks every callback on error_context_stack for a CONTEXT
    // line, and those of the caller quote it: SPI's names the SQL statement
    // that made the call (PL/pgSQL's EXECUTE format('...%L...') puts the body
    // in its text), a SQL function's its arguments.  Inside the call the
    // stack starts empty, so that no message the call raises -- an error, a
    // warning, PostgreSQL's own such as a lock timeout -- carries one; the
    // callbacks the call pushes itself stay.  PG_TRY restores the caller's
    // stack when the call fails, and the line below when it returns.
    ErrorContextCallback *caller_context = error_context_stack;
    log_gate::note_call();
    PG_TRY();
    {
        error_context_stack = nullptr;
        result = body(fcinfo);
        error_context_stack = caller_context;
    }
    PG_CATCH();
    {
        rethrow_without_request_data(context);
    }
    PG_END_TRY();
    return result;
}

void errors_without_request_data(void (*body)(void *argument), void *argument)
{
    MemoryContext context = CurrentMemoryContext;
    log_gate::note_call();
    PG_TRY();
    {
        body(argument);
    }
    PG_CATCH();
    {
        rethrow_without_request_data(context);
    }
    PG_END_TRY();
}

bool absorbing(bool (*absorbed)(const ErrorData &error, void *parts), bool (*body)(void *parts),
               void (*cleanup)(void *parts), void *parts)
{
    MemoryContext context = CurrentMemoryContext;
    ResourceOwner owner = CurrentResourceOwner;
    volatile bool kept = true;
    ErrorData *volatile error = nullptr;
    BeginInternalSubTransaction(nullptr);
    MemoryContextSwitchTo(context);
    PG_TRY();
    {
        kept = body(parts);
        cleanup(parts);
        if (kept)
            ReleaseCurrentSubTransaction();
        else
            RollbackAndReleaseCurrentSubTransaction();
    }
    PG_CATCH();
    {
        cleanup(parts);
        MemoryContextSwitchTo(context);
        error = CopyErrorData();
        FlushErrorState();
        RollbackAndReleaseCurrentSubTransaction();
    }
    PG_END_TRY();
    MemoryContextSwitchTo(context);
    CurrentResourceOwner = owner;
    if (error == nullptr)
        return kept;
    if (!absorbed(*error, parts))
        ReThrowError(error);
    FreeErrorData(error);
    return false;
}

char *key_for_message(Datum key)
{
    constexpr int shown_bytes = 32;
    const text *t = DatumGetTextPP(key);
    int length = VARSIZE_ANY_EXHDR(t);
    int clip = pg_mbcliplen(VARDATA_ANY(t), length, shown_bytes);
    char *shown = psprintf("%.*s%s", clip, VARDATA_ANY(t), clip < length ? "..." : "");
    for (char *c = shown; *c != '\0'; c++)
        if (static_cast<unsigned char>(*c) < 0x20 || *c == 0x7f)
            *c = '?';
    return shown;
}

} // namespace idempotency
