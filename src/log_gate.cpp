// The log gate.
//
// Why.  Beside a message, PostgreSQL's server log shows the statement that
// was running (a STATEMENT: line, for messages at or above
// log_min_error_statement -- LOG included) and the CONTEXT lines that
// callbacks wrote, which quote statement texts (PL/pgSQL's SQL statement
// "...", a JSON value's line, a portal's parameters).  A client that spells a
// request's body into its SQL text, rather than binding it, puts the body
// there.  The error boundary (boundary.hpp) hides both for every error
// raised inside a call of the extension's functions; it cannot reach what is
// raised elsewhere in such a statement, nor what is not an error unwinding
// through the call:
//  * PostgreSQL's parser failing before any code of the extension runs (a
//    session's first begin or lookup waiting for DROP EXTENSION: XX000, or a
//    lock or statement timeout while it waits; doc/operations.md);
//  * an EXECUTE of a prepared statement, whose logged text names no
//    function of ours but carries the body -- including errors Citus relays
//    from the node it delegated the call to;
//  * an error after the call returned, in the same statement (an
//    application's PL/pgSQL function that fails after calling us), or in an
//    EXECUTEd text that spells the body in (a CONTEXT line);
//  * messages that are not errors, or that end the process without
//    unwinding: log_lock_waits' LOG lines during a call's wait, the FATAL
//    of pg_terminate_backend.
// So every message PostgreSQL is about to log passes here (emit_log_hook,
// called by EmitErrorReport before the server log line is written -- for an
// ERROR, after the stack has unwound to PostgresMain, for the others inside
// errfinish).
//
// Which statements.  A message belongs to a statement that calls the
// extension when any of these holds, tried cheapest first:
//  1. a function of the extension was called during the running top-level
//     statement: every call stamps the statement's start time (note_call,
//     log_gate.hpp), which PostgreSQL sets for each client message, so an
//     unrelated next statement no longer matches (one starting in the same
//     microsecond would, and would only lose its STATEMENT line);
//  2. the statement's text -- debug_query_string, the very text a STATEMENT
//     line shows -- names the extension: "idempotency" or "request_hash", in
//     any case (every function, type and schema object of the extension
//     starts with one of them).  This is what covers the parser's failures,
//     where nothing of ours has run and the catalogs must not be read;
//  3. the text EXECUTEs a prepared statement (SQL's EXECUTE name, in any
//     statement of the text) whose own text names the extension, looked up
//     by name in this session's prepared statements (a hash probe);
//  4. the message's CONTEXT lines or internal query name the extension (an
//     inner statement of PL/pgSQL or SQL functions).
// 1 costs each call a function call and a store (about 6 instructions: 6 to
// 18 per request of make bench-cost's workloads, under its run-to-run noise);
// 2 to 4 run only for a message that is being logged and has something to
// hide, so a request that logs nothing pays for nothing else.  A match is never decided by the
// catalogs: the hook runs inside error reporting, after a failed
// transaction or a dropped extension.  What the gate cannot see: a statement
// that never names the extension and fails before its first call (an
// application's function that fails before calling us), and a prepared
// statement EXECUTEd by another session that a deadlock's detail quotes.
//
// What it hides, for such a message: the STATEMENT line (hide_stmt) and all
// of the CONTEXT lines (hide_ctx) -- a line that quotes statement text
// cannot be told reliably from one that does not (they are translated), and
// rewriting them would allocate inside error reporting; the client still
// gets the CONTEXT, since both switches act on the server log only.  A
// deadlock's log-only detail, which quotes every waiting process's
// statement, is dropped (the client's detail, without statements, is logged
// instead); so is that detail in any statement's deadlock when it names the
// extension.  The internal query (the QUERY: line, an inner statement's text
// that a syntax or lookup error points into) has no log-only switch: it is
// dropped for the client too, whose message keeps its position.  The message,
// its detail and hint are never touched.
//
// The error boundary's rules, inside error reporting: the hook raises no
// error, allocates nothing, throws nothing (no C++ that can throw is
// called), and reads only what a failed transaction leaves valid.  It is not
// run through guarded(), which would turn a C++ exception into an ERROR
// raised inside error reporting.
#include "log_gate.hpp"

extern "C"
{
#include "commands/prepare.h"
#include "mb/pg_wchar.h"
#include "tcop/tcopprot.h"
#include "utils/elog.h"
#include "utils/plancache.h"
}

namespace idempotency::log_gate
{

TimestampTz statement_with_call = 0;

static emit_log_hook_type previous_hook = nullptr;

// Whether `text` names the extension (2. above).
static bool names_extension(const char *text) noexcept
{
    if (text == nullptr)
        return false;
    for (const char *c = text; *c != '\0'; c++)
    {
        char folded = char(*c | 0x20);
        if ((folded == 'i' && pg_strncasecmp(c, "idempotency", 11) == 0) ||
            (folded == 'r' && pg_strncasecmp(c, "request_hash", 12) == 0))
            return true;
    }
    return false;
}

static bool identifier_char(char c) noexcept
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '$' || IS_HIGHBIT_SET(c);
}

// Past white space and comments (-- to the end of the line, /* */ nested).
static const char *skip_blanks(const char *c) noexcept
{
    for (;;)
    {
        while (*c == ' ' || *c == '\t' || *c == '\n' || *c == '\r' || *c == '\f' || *c == '\v')
            c++;
        if (c[0] == '-' && c[1] == '-')
        {
            while (*c != '\0' && *c != '\n')
                c++;
        }
        else if (c[0] == '/' && c[1] == '*')
        {
            int depth = 0;
            do
            {
                if (c[0] == '/' && c[1] == '*')
                    depth++, c += 2;
                else if (c[0] == '*' && c[1] == '/')
                    depth--, c += 2;
                else
                    c++;
            } while (depth > 0 && *c != '\0');
        }
        else
            return c;
    }
}

// Reads the name at `c` as PostgreSQL's parser does: "quoted" as written
// ("" for "), else folded to lower case; both cut to NAMEDATALEN - 1 bytes
// at a character boundary.  Whether there was one.
static bool read_name(const char *c, char (&name)[NAMEDATALEN]) noexcept
{
    int length = 0;
    if (*c == '"')
    {
        for (c++; *c != '\0'; c++)
        {
            if (*c == '"' && *++c != '"')
                break;
            if (length < NAMEDATALEN - 1)
                name[length++] = *c;
        }
    }
    else
        for (; identifier_char(*c); c++)
            if (length < NAMEDATALEN - 1)
                name[length++] = (*c >= 'A' && *c <= 'Z') ? char(*c + ('a' - 'A')) : *c;
    name[length] = '\0';
    if (length == NAMEDATALEN - 1)
        name[pg_mbcliplen(name, length, NAMEDATALEN - 1)] = '\0';
    return length > 0;
}

// Whether `text` EXECUTEs a prepared statement of this session whose text
// names the extension (3. above).  Every word EXECUTE counts, wherever it
// stands: one inside a literal or a PL/pgSQL block only looks up a name.
static bool executes_prepared_call(const char *text) noexcept
{
    if (text == nullptr)
        return false;
    for (const char *c = text; *c != '\0'; c++)
    {
        if ((*c | 0x20) != 'e' || pg_strncasecmp(c, "execute", 7) != 0 ||
            (c > text && identifier_char(c[-1])) || identifier_char(c[7]))
            continue;
        char name[NAMEDATALEN];
        if (!read_name(skip_blanks(c + 7), name))
            continue;
        // No error: a lookup in a hash table, which allocates nothing.
        const PreparedStatement *prepared = FetchPreparedStatement(name, false);
        if (prepared != nullptr && names_extension(prepared->plansource->query_string))
            return true;
    }
    return false;
}

// Whether `edata` may show request data that the gate hides.
static bool may_show_statement_text(const ErrorData *edata) noexcept
{
    return (!edata->hide_stmt && debug_query_string != nullptr) ||
           (!edata->hide_ctx && edata->context != nullptr) || edata->internalquery != nullptr ||
           (edata->sqlerrcode == ERRCODE_T_R_DEADLOCK_DETECTED && edata->detail_log != nullptr);
}

static bool statement_calls_extension(const ErrorData *edata) noexcept
{
    return (statement_with_call != 0 &&
            statement_with_call == GetCurrentStatementStartTimestamp()) ||
           names_extension(debug_query_string) || executes_prepared_call(debug_query_string) ||
           names_extension(edata->context) || names_extension(edata->internalquery);
}

static void gate(ErrorData *edata)
{
    if (may_show_statement_text(edata))
    {
        bool deadlock = edata->sqlerrcode == ERRCODE_T_R_DEADLOCK_DETECTED;
        if (statement_calls_extension(edata))
        {
            edata->hide_stmt = true;
            edata->hide_ctx = true;
            edata->internalquery = nullptr;
            if (deadlock)
                edata->detail_log = nullptr;
        }
        else if (deadlock && names_extension(edata->detail_log))
            edata->detail_log = nullptr;
    }
    if (previous_hook != nullptr)
        previous_hook(edata);
}

void install()
{
    previous_hook = emit_log_hook;
    emit_log_hook = gate;
}

} // namespace idempotency::log_gate
