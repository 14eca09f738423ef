// The error boundary between C++ and PostgreSQL.
//
// PostgreSQL reports errors with longjmp; C++ reports them with exceptions.
// Neither may cross into the other's frames, so the code is split in zones:
//
//  * Pure C++ (sha256.cpp, canonical.cpp): never includes PostgreSQL headers,
//    may throw.
//  * PostgreSQL-facing code (everything else): written C-style -- only trivially
//    destructible locals, memory from palloc, errors through ereport -- so that
//    a longjmp through it skips no destructor.
//  * Entry points that PostgreSQL calls (SQL functions, _PG_init, the worker's
//    main) run their body inside idempotency::guarded(), which catches every
//    exception that pure C++ may throw, copies its message into a fixed buffer,
//    leaves the handler, and only then calls ereport.  Nothing inside a catch
//    block calls ereport or palloc.
//
// SQL functions are declared with IDEMPOTENCY_FUNCTION, which wraps the body
// in guarded() and gives it C linkage.
#pragma once

#include "errcodes.hpp"
#include "pg.hpp"

namespace idempotency
{

// What a catch handler may keep: plain data, no allocation.
struct CaughtException
{
    int sqlerrcode;
    char message[256];
};

// idempotency.inject_fault (module.cpp), for tests: the first two make every
// entry point throw, to prove the boundary; the pauses hold the claim protocol
// at the moments where another session must be kept out (claims.cpp).
enum InjectedFault
{
    fault_none,
    fault_exception,
    fault_out_of_memory,
    fault_pause_at_subtransaction_abort,
    fault_pause_before_publish,
    fault_pause_in_fallback,
    fault_pause_in_read,
    fault_pause_before_forwarded_replay,
    fault_pause_before_sweep_delete,
    fault_pause_in_lock_free_routing,
    fault_weak_digest,
    fault_no_caches,
    fault_pause_before_numbering
};
extern int injected_fault;
// idempotency.inject_fault = no_caches turns the backend-local caches of
// the storage and of begin's result off, so that the differential test
// (test/t/023) can compare every answer with them and without them.
inline bool caches_on()
{
    return injected_fault != fault_no_caches;
}
[[noreturn]] void throw_injected_fault();
// Holds this session at the pause `at` while another holds
// pg_advisory_lock(key) (boundary.cpp lists the pauses).
void pause_for_test(InjectedFault at, uint64 key);

void capture_exception(CaughtException &caught, int sqlerrcode, const char *message) noexcept;

// A key or scope (text) as a message may show it: its first 32 bytes at
// most, cut at a character boundary and followed by "..." when longer, with
// control characters shown as '?' so that a key cannot forge a line of a
// plain-text log.  Messages never show more of a request.
char *key_for_message(Datum key);

// Reports a captured exception as a PostgreSQL ERROR; does not return.
[[noreturn]] void report_exception(const CaughtException &caught);

template <typename Body> inline auto guarded(Body &&body) -> decltype(body())
{
    CaughtException caught;
    try
    {
        if (unlikely(injected_fault == fault_exception || injected_fault == fault_out_of_memory))
            throw_injected_fault();
        return body();
    }
    catch (const std::bad_alloc &)
    {
        capture_exception(caught, ERRCODE_OUT_OF_MEMORY, "out of memory");
    }
    catch (const std::exception &e)
    {
        capture_exception(caught, errcode_cxx_exception, e.what());
    }
    catch (...)
    {
        capture_exception(caught, errcode_cxx_exception, "unknown C++ exception");
    }
    report_exception(caught);
}

// The other half of the boundary, for PostgreSQL's errors: a statement that
// calls the extension may hold request data in its text (client-side
// binding puts bodies there), and PostgreSQL logs the statement of an error.
// Every error raised inside a call -- the extension's own, and PostgreSQL's,
// such as a cancel, a lock timeout or a missing table -- is therefore logged
// without its statement, and a deadlock without the other sessions'
// statements, which its log detail would quote; and nothing the call reports
// (errors, warnings) gets a CONTEXT line from its caller, which would quote
// the statement that made the call (PL/pgSQL's EXECUTE of a query text).
// What is raised elsewhere in such a statement, or logged without unwinding
// through the call (a LOG line, a FATAL), is the log gate's (log_gate.cpp),
// for which both functions below mark the running statement as one that
// calls the extension.  `body` must not throw: it
// is guarded() itself, or code that calls no C++ that throws.  The call goes
// through a function pointer into another translation unit, so that none of
// body's locals share a frame with the setjmp: an inlined body would leave
// them liable to clobbering by the longjmp.
Datum errors_without_request_data(PGFunction body, FunctionCallInfo fcinfo);
// The same for a hook's work on a statement that may hold request data (a
// call Citus delegates: its planning and its run), `argument` passed on.
void errors_without_request_data(void (*body)(void *argument), void *argument);

// The one way to catch a PostgreSQL error and go on with the work (where
// the two functions above only pass errors on): `body` runs in an internal
// subtransaction, as in a PL/pgSQL exception block, which undoes whatever
// the failed work left (locks, buffers, SPI, Citus's remote savepoints).
// Returns what `body` returned, the subtransaction kept (released into the
// caller's) when that is true and rolled back when it is false; false too
// when `body` raised an error that `absorbed` accepts -- rolled back,
// nothing of it left.  Any other error propagates.  `cleanup` runs either
// way, before `absorbed` is asked, inside the error's handling, so it must
// never raise; `absorbed(const ErrorData &error)` runs
// after the rollback, out of the error, so it may call PostgreSQL (an error
// it raises propagates).  The parts run through function pointers from
// boundary.cpp, so that none of their locals share a frame with the setjmp.
bool absorbing(bool (*absorbed)(const ErrorData &error, void *parts), bool (*body)(void *parts),
               void (*cleanup)(void *parts), void *parts);

template <typename Absorbed, typename Body, typename Cleanup>
bool absorbing(Absorbed absorbed, Body body, Cleanup cleanup)
{
    // An error that propagates longjmps past this frame and the caller's.
    static_assert(std::is_trivially_destructible_v<Absorbed> &&
                      std::is_trivially_destructible_v<Body> &&
                      std::is_trivially_destructible_v<Cleanup>,
                  "a PostgreSQL error may skip the parts' destructors: capture by reference");
    struct Parts
    {
        Absorbed &absorbed;
        Body &body;
        Cleanup &cleanup;
    } parts{absorbed, body, cleanup};
    return absorbing([](const ErrorData &error,
                        void *p) -> bool { return static_cast<Parts *>(p)->absorbed(error); },
                     [](void *p) -> bool { return static_cast<Parts *>(p)->body(); },
                     [](void *p) { static_cast<Parts *>(p)->cleanup(); }, &parts);
}

// The same, absorbing the errors of one SQLSTATE.
template <typename Body, typename Cleanup>
bool absorbing(int sqlerrcode, Body body, Cleanup cleanup)
{
    return absorbing(
        [sqlerrcode](const ErrorData &error) { return error.sqlerrcode == sqlerrcode; }, body,
        cleanup);
}

} // namespace idempotency

// Defines the SQL-callable C function `name`; the block that follows is its
// body, a function of `fcinfo` returning Datum, run inside guarded() inside
// errors_without_request_data(): no C++ exception leaves it, and no error
// it raises logs request data.
#define IDEMPOTENCY_FUNCTION(name)                                                                 \
    static Datum name##_body(FunctionCallInfo fcinfo);                                             \
    static Datum name##_guarded(FunctionCallInfo fcinfo)                                           \
    {                                                                                              \
        return idempotency::guarded([fcinfo] { return name##_body(fcinfo); });                     \
    }                                                                                              \
    extern "C"                                                                                     \
    {                                                                                              \
    PG_FUNCTION_INFO_V1(name);                                                                     \
    }                                                                                              \
    extern "C" Datum name(PG_FUNCTION_ARGS)                                                        \
    {                                                                                              \
        return idempotency::errors_without_request_data(name##_guarded, fcinfo);                   \
    }                                                                                              \
    static Datum name##_body(FunctionCallInfo fcinfo)
