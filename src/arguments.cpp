// Arguments of the SQL functions; see arguments.hpp.
#include "arguments.hpp"
#include "boundary.hpp"
#include "claims.hpp"
#include "errcodes.hpp"
#include "settings.hpp"

extern "C"
{
#include "access/detoast.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
}

namespace idempotency::arguments
{

// The latest end of a ttl or lease, after now.
constexpr int64 max_ttl_or_lease_us = int64(settings::max_duration_s) * USECS_PER_SEC;

Datum required_arg(FunctionCallInfo fcinfo, int n, const char *name)
{
    if (PG_ARGISNULL(n))
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                        errmsg("%s must not be null", name), errhidestmt(true)));
    return PG_GETARG_DATUM(n);
}

static bool too_long(Datum value)
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

[[noreturn]] static void report_too_long(Datum value, const char *name, int sqlerrcode)
{
    ereport(ERROR, (errcode(sqlerrcode),
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

Datum scope_text(Datum scope, Oid type)
{
    if (type == TEXTOID)
        return PointerGetDatum(DatumGetTextPP(scope));
    Oid output;
    bool varlena;
    getTypeOutputInfo(type, &output, &varlena);
    return CStringGetTextDatum(OidOutputFunctionCall(output, scope));
}

// Argument 0, the scope, as text, spelled as the caller gave it.
static Datum given_scope(FunctionCallInfo fcinfo)
{
    Datum scope = required_arg(fcinfo, 0, "scope");
    // The declared type, from the call's expression (or, for a call without
    // one, from the catalog).
    Oid type = get_fn_expr_argtype(fcinfo->flinfo, 0);
    if (!OidIsValid(type))
    {
        Oid *types;
        int count;
        get_func_signature(fcinfo->flinfo->fn_oid, &types, &count);
        type = types[0];
    }
    return scope_text(scope, type);
}

Datum scope_arg(FunctionCallInfo fcinfo)
{
    return store::tenant_scope(given_scope(fcinfo));
}

store::Key key_args(FunctionCallInfo fcinfo)
{
    store::Key args;
    args.tenant = tenant_of_caller();
    args.scope = given_scope(fcinfo);
    args.key = PointerGetDatum(DatumGetTextPP(required_arg(fcinfo, 1, "key")));
    // (Checked as given, as idempotency_key_problem checks it.)
    switch (key_problem(args.scope, args.key))
    {
        case KeyProblem::empty_key:
            ereport(ERROR, (errcode(errcode_invalid_key), errmsg("key must not be empty"),
                            errhidestmt(true)));
            break;
        case KeyProblem::long_scope:
            report_too_long(args.scope, "scope", ERRCODE_STRING_DATA_RIGHT_TRUNCATION);
        case KeyProblem::long_key:
            report_too_long(args.key, "key", errcode_invalid_key);
        case KeyProblem::none:
            break;
    }
    args.scope = store::tenant_scope(args.scope);
    return args;
}

// An interval's length as interval comparison sees it (a month is 30 days).
static __int128 interval_span_us(const Interval *interval)
{
    return (__int128)interval->time + (__int128)interval->day * USECS_PER_DAY +
           (__int128)interval->month * DAYS_PER_MONTH * USECS_PER_DAY;
}

static const char *interval_text(const Interval *interval)
{
    return DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(interval)));
}

Interval *interval_from_us(int64 us)
{
    Interval *interval = static_cast<Interval *>(palloc0(sizeof(Interval)));
    interval->time = us;
    return interval;
}

bool has_arg(FunctionCallInfo fcinfo, int n)
{
    return n < PG_NARGS() && !PG_ARGISNULL(n);
}

[[noreturn]] static void report_bad_interval(const char *name, const Interval *interval,
                                             const char *detail)
{
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("invalid %s \"%s\"", name, interval_text(interval)),
                    errdetail(detail, name), errhidestmt(true)));
    pg_unreachable();
}

// The wait argument: a duration in [0, max_us], measured as interval
// comparison measures it; nullptr when not given.
static Interval *optional_duration_arg(FunctionCallInfo fcinfo, int n, const char *name,
                                       int64 max_us, const char *range_detail)
{
    if (!has_arg(fcinfo, n))
        return nullptr;
    Interval *interval = PG_GETARG_INTERVAL_P(n);
    __int128 span = interval_span_us(interval);
    if (span < 0 || span > max_us)
        report_bad_interval(name, interval, range_detail);
    return interval;
}

// A ttl or lease argument, nullptr when not given.  Added to a time with
// calendar arithmetic (claims::plus_interval), so it is checked by its
// effect: the end must lie after now, and at most 3650 days after it.  And
// no part may be negative: a month is 28 to 31 days and a day 23 to 25 hours,
// so a mix of signs can end after its start on one date and before it on
// another -- a ttl is added again when the key is completed.  With every
// part zero or more, the end never comes before the start on any date.
static Interval *optional_span_arg(FunctionCallInfo fcinfo, int n, const char *name)
{
    if (!has_arg(fcinfo, n))
        return nullptr;
    Interval *interval = PG_GETARG_INTERVAL_P(n);
    if (interval->month < 0 || interval->day < 0 || interval->time < 0)
        report_bad_interval(name, interval,
                            "No part of %s may be negative: months, days and time are added "
                            "one after the other, so a mix of signs may end before it starts.");
    // Far beyond the limit (or infinite), the addition itself would fail.
    TimestampTz now = GetCurrentTimestamp();
    TimestampTz end = interval_span_us(interval) > 2 * (__int128)max_ttl_or_lease_us
                          ? DT_NOEND
                          : claims::plus_interval(now, interval);
    if (end <= now || end > now + max_ttl_or_lease_us)
        report_bad_interval(name, interval,
                            "%s must end after now and at most 3650 days after it.");
    return interval;
}

Interval *ttl_arg(FunctionCallInfo fcinfo, int n)
{
    Interval *ttl = optional_span_arg(fcinfo, n, "ttl");
    return ttl ? ttl : interval_from_us(int64(settings::default_ttl_s) * USECS_PER_SEC);
}

// The lease argument, nullptr when not given: the caller knows the default.
Interval *optional_lease_arg(FunctionCallInfo fcinfo, int n)
{
    return optional_span_arg(fcinfo, n, "lease");
}

Interval *default_lease()
{
    return interval_from_us(int64(settings::default_lease_ms) * 1000);
}

int64 wait_arg_us(FunctionCallInfo fcinfo, int n)
{
    Interval *wait =
        optional_duration_arg(fcinfo, n, "wait", max_wait_us, "%s must be between 0 and 1 hour.");
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

// Columns that a table still at 0.1.0 lacks cannot take what the caller gave.
void require_column(const store::Storage &storage, store::Column column, const char *what)
{
    if (!storage.has(column))
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("%s needs the extension's 0.2.0 storage", what),
                        errhint("Run ALTER EXTENSION idempotency UPDATE in this database."),
                        errhidestmt(true)));
}

} // namespace idempotency::arguments
