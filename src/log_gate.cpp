// The log gate.
//
// Why.  Beside a message, PostgreSQL's server log shows the statement that
// was running (a STATEMENT: line, for messages at or above
// log_min_error_statement -- LOG included), the CONTEXT lines that callbacks
// wrote, which quote statement texts (PL/pgSQL's SQL statement "...", a JSON
// value's line, a portal's parameters), and the message's detail, which
// PostgreSQL's input functions fill with the input they reject (jsonb's
// `Token "..." is invalid.`).  A client that spells a request's body into its
// SQL text, rather than binding it, puts the body in the first two; any
// client puts it in the third when the body is not what the statement casts
// it to.  The error boundary (boundary.hpp) hides the statement and the
// caller's CONTEXT for every error raised inside a call of the extension's
// functions; it cannot reach what is raised elsewhere in such a statement,
// nor what is not an error unwinding through the call, nor a detail:
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
//    of pg_terminate_backend;
//  * the detail of an input function's error: a body cast to jsonb in the
//    statement (request_hash($1::jsonb)) or inside a call
//    (request_hash_jsonb's);
//  * a parallel worker's messages: the worker runs the statement's plan in
//    a process of its own, where no call of the leader's was stamped.
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
//  2. the process is a parallel worker (see "Parallel workers" below);
//  3. the message's CONTEXT lines or internal query name the extension (an
//     inner statement of PL/pgSQL or SQL functions);
//  4. the statement's text -- debug_query_string, the very text a STATEMENT
//     line shows -- names the extension: "idempotency" or "request_hash", in
//     any case (every function, type and schema object of the extension
//     starts with one of them).  This is what covers the parser's failures,
//     where nothing of ours has run and the catalogs must not be read;
//  5. the text EXECUTEs a prepared statement (SQL's EXECUTE name, in any
//     statement of the text) whose own text names the extension, looked up
//     by name in this session's prepared statements (a hash probe).
// 1 costs each call a function call and a store (about 6 instructions: 6 to
// 18 per request of make bench-cost's workloads, under its run-to-run noise);
// 2 to 5 run only for a message whose log line would show more than the
// message (a STATEMENT line by PostgreSQL's own test, check_log_of_query:
// the message's level against log_min_error_statement; a CONTEXT, an
// internal query or a detail), so a request that logs nothing pays for
// nothing else, and neither does a DEBUG line at log_min_messages = debug1.
// Each reads the texts once, in time linear in their length (see
// executes_prepared_call): the hook cannot be cancelled.  A match is never
// decided by the catalogs: the hook runs inside error reporting, after a
// failed transaction or a dropped extension.  What the gate cannot see: a
// statement that never names the extension and fails before its first call
// (an application's function that fails before calling us), and a prepared
// statement EXECUTEd by another session that a deadlock's detail quotes.
//
// Parallel workers.  A worker runs part of the leader's statement with the
// leader's text as its debug_query_string, and logs its own messages; it
// cannot see the leader's stamp (1.), which lives in the leader's memory, so
// a statement that matched only by its call (an application's function
// whose EXECUTEd query carries the body) logged the body from every worker.
// A worker's messages are hidden whatever its statement: an error it raises,
// and the FATAL of a worker that the leader's error stopped, reach the
// leader, which raises them again and logs them under its own decision --
// with the STATEMENT line of an unrelated statement, so that nothing is
// lost but the duplicate.  (The alternative, each backend's stamp in shared
// memory for its workers to read, would move a store of every call into
// shared memory for lines that the leader logs anyway.)  What a worker logs
// on its own and the leader does not repeat (log_lock_waits' or
// log_temp_files' LOG lines, say) therefore has no STATEMENT line.
//
// What it hides, for such a message: the STATEMENT line (hide_stmt) and all
// of the CONTEXT lines (hide_ctx) -- a line that quotes statement text
// cannot be told reliably from one that does not (they are translated), and
// rewriting them would allocate inside error reporting; the client still
// gets the CONTEXT, since both switches act on the server log only.  The
// detail of a message that the extension did not raise is replaced in the
// log by detail_not_logged (below), through the log-only detail
// (detail_log), so that the client still gets it: the extension's own
// messages are told apart by their message domain (pg.hpp), which every
// ereport of its code records, and keep their details, which never show
// request data (STYLE.md); a message whose log-only detail PostgreSQL set
// itself (log_lock_waits': the processes) keeps it.  A deadlock's log-only
// detail, which quotes every waiting process's statement, is dropped (the
// client's detail, without statements, is logged instead); so is that
// detail in any statement's deadlock when it names the extension.  The
// internal query (the QUERY: line, an inner statement's text that a syntax
// or lookup error points into) has no log-only switch: it is dropped for
// the client too, whose message keeps its position.  The message and its
// hint are never touched (an input function's message may quote its input,
// as numeric's does: doc/operations.md).
//
// The error boundary's rules, inside error reporting: the hook raises no
// error, throws nothing (no C++ that can throw is called), reads only what a
// failed transaction leaves valid, and allocates nothing but the replacement
// detail's copy, in ErrorContext, without an error when memory is short.
// It is not run through guarded(), which would turn a C++ exception into an
// ERROR raised inside error reporting.
#include "log_gate.hpp"

extern "C"
{
#include "access/parallel.h"
#include "commands/prepare.h"
#include "mb/pg_wchar.h"
#include "parser/scansup.h"
#include "tcop/tcopprot.h"
#include "utils/elog.h"
#include "utils/memutils.h"
#include "utils/plancache.h"
}

namespace idempotency::log_gate
{

TimestampTz statement_with_call = 0;

static emit_log_hook_type previous_hook = nullptr;

// What the server log shows instead of the detail of a message that the
// extension did not raise, in a statement that calls it.
static constexpr char detail_not_logged[] =
    "The detail is not logged: it may contain request data (the client received it).";

// How many bytes of prepared statements' texts executes_prepared_call reads
// beyond the length of the statement's own text before it stops reading and
// decides that the statement calls the extension.
static constexpr size_t prepared_text_allowance = 1024 * 1024;

// Whether `text` names the extension (4. above).  `budget`, when given,
// is what the read may cost: each byte read takes one, and a read that
// runs out stops there, answering true.
static bool names_extension(const char *text, size_t *budget = nullptr) noexcept
{
    if (text == nullptr)
        return false;
    for (const char *c = text; *c != '\0'; c++)
    {
        if (budget != nullptr && (*budget)-- == 0)
            return true;
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
        while (scanner_isspace(*c)) // the server's lexer's white space
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
// at a character boundary.  Whether there was one.  It reads no further
// than those bytes: the rest of a longer name cannot change it.
static bool read_name(const char *c, char (&name)[NAMEDATALEN]) noexcept
{
    int length = 0;
    if (*c == '"')
    {
        for (c++; *c != '\0' && length < NAMEDATALEN - 1; c++)
        {
            if (*c == '"' && *++c != '"')
                break;
            name[length++] = *c;
        }
    }
    else
        for (; identifier_char(*c) && length < NAMEDATALEN - 1; c++)
            name[length++] = (*c >= 'A' && *c <= 'Z') ? char(*c + ('a' - 'A')) : *c;
    name[length] = '\0';
    if (length == NAMEDATALEN - 1)
        name[pg_mbcliplen(name, length, NAMEDATALEN - 1)] = '\0';
    return length > 0;
}

static bool execute_word_at(const char *text, const char *c) noexcept
{
    return (*c | 0x20) == 'e' && pg_strncasecmp(c, "execute", 7) == 0 &&
           (c == text || !identifier_char(c[-1])) && !identifier_char(c[7]);
}

// Whether `text` EXECUTEs a prepared statement of this session whose text
// names the extension (5. above).  Every word EXECUTE counts, wherever it
// stands: one inside a literal or a PL/pgSQL block only looks up a name.
//
// In time linear in the text.  The name of an EXECUTE follows the blanks
// and comments after the word; another EXECUTE word inside those comments
// (`execute /* execute /* ...` or `execute -- execute -- ...`) would make
// the reader go over them again for each word, quadratic in the text -- 12
// seconds for 560 kB, in a hook that cannot be cancelled.  No client writes
// that: such a text is taken as calling the extension without reading
// further, so that the comments after an EXECUTE are read once.  Each
// prepared statement's text is read once per run of EXECUTEs of it, and all
// of them together at most the text's length plus prepared_text_allowance,
// past which the statement is taken as calling the extension too.
static bool executes_prepared_call(const char *text) noexcept
{
    if (text == nullptr)
        return false;
    size_t budget = strlen(text) + prepared_text_allowance;
    const char *blanks_end = text; // of the blanks after the last EXECUTE word
    const PreparedStatement *last_read = nullptr;
    for (const char *c = text; *c != '\0'; c++)
    {
        if (!execute_word_at(text, c))
            continue;
        if (c < blanks_end)
            return true; // inside the comments after another EXECUTE: see above
        blanks_end = skip_blanks(c + 7);
        char name[NAMEDATALEN];
        if (!read_name(blanks_end, name))
            continue;
        // No error: a lookup in a hash table, which allocates nothing.
        const PreparedStatement *prepared = FetchPreparedStatement(name, false);
        if (prepared == nullptr || prepared == last_read)
            continue;
        last_read = prepared;
        if (names_extension(prepared->plansource->query_string, &budget))
            return true;
    }
    return false;
}

// Whether the extension raised the message (its message domain, pg.hpp).
static bool raised_by_extension(const ErrorData *edata) noexcept
{
    return edata->domain != nullptr && strcmp(edata->domain, TEXTDOMAIN) == 0;
}

// Whether the log would show the message's client detail (there is no
// log-only one), which may quote request data unless the extension raised
// the message.
static bool logs_foreign_detail(const ErrorData *edata) noexcept
{
    return edata->detail != nullptr && edata->detail_log == nullptr && !raised_by_extension(edata);
}

static bool logs_deadlock_statements(const ErrorData *edata) noexcept
{
    return edata->sqlerrcode == ERRCODE_T_R_DEADLOCK_DETECTED && edata->detail_log != nullptr;
}

// Whether the log line of `edata` would show, beside the message, something
// that may quote request data: the statement, as PostgreSQL decides it
// (its level against log_min_error_statement), CONTEXT lines, an internal
// query, a detail.  (log_error_verbosity = terse drops all but the
// statement from the stderr log, not from csvlog or jsonlog: not asked.)
static bool may_show_request_data(ErrorData *edata) noexcept
{
    return check_log_of_query(edata) || (!edata->hide_ctx && edata->context != nullptr) ||
           edata->internalquery != nullptr || logs_foreign_detail(edata) ||
           logs_deadlock_statements(edata);
}

static bool statement_calls_extension(const ErrorData *edata) noexcept
{
    return (statement_with_call != 0 &&
            statement_with_call == GetCurrentStatementStartTimestamp()) ||
           IsParallelWorker() || names_extension(edata->context) ||
           names_extension(edata->internalquery) || names_extension(debug_query_string) ||
           executes_prepared_call(debug_query_string);
}

// The log shows detail_not_logged instead of the detail.  errfinish frees
// each string of a message it emits (all but an ERROR's, whose handler
// resets ErrorContext), so the sentence is copied into ErrorContext; when
// that fails (MCXT_ALLOC_NO_OOM: no error here) the detail goes, for the
// client too.
static void replace_logged_detail(ErrorData *edata) noexcept
{
    void *copy =
        MemoryContextAllocExtended(ErrorContext, sizeof detail_not_logged, MCXT_ALLOC_NO_OOM);
    if (copy == nullptr)
    {
        edata->detail = nullptr;
        return;
    }
    memcpy(copy, detail_not_logged, sizeof detail_not_logged);
    edata->detail_log = static_cast<char *>(copy);
}

static void hide_request_data(ErrorData *edata) noexcept
{
    edata->hide_stmt = true;
    edata->hide_ctx = true;
    edata->internalquery = nullptr;
    if (edata->sqlerrcode == ERRCODE_T_R_DEADLOCK_DETECTED)
        edata->detail_log = nullptr; // the client's detail: processes and locks
    else if (logs_foreign_detail(edata))
        replace_logged_detail(edata);
}

static void gate(ErrorData *edata)
{
    if (may_show_request_data(edata))
    {
        if (statement_calls_extension(edata))
            hide_request_data(edata);
        else if (logs_deadlock_statements(edata) && names_extension(edata->detail_log))
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
