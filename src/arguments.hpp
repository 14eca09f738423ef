// Arguments of the SQL functions: the one place for their rules (required,
// optional, ranges, key and scope limits, sizes) and their errors.
//
// Errors about the caller's arguments keep the statement out of the server
// log (errhidestmt): with client-side binding its text holds the request's
// data, which a log must not.  A message shows a key's prefix at most
// (key_for_message).
#pragma once

#include "pg.hpp"
#include "store.hpp"

extern "C"
{
#include "datatype/timestamp.h"
}

namespace idempotency::arguments
{

// Compared with an interval's length as interval comparison sees it.
constexpr int64 max_wait_us = int64(3600) * USECS_PER_SEC;

// Required argument `n` (22004 when NULL).
Datum required_arg(FunctionCallInfo fcinfo, int n, const char *name);
// Whether optional argument `n` was given, not NULL.  A function declared by
// an older version's install script, not yet updated, passes fewer
// arguments: the later ones count as not given.
bool has_arg(FunctionCallInfo fcinfo, int n);
bool optional_int_arg(FunctionCallInfo fcinfo, int n, int32 *value);

// What is wrong with a scope and key, by the one rule for them: key_args
// raises it, idempotency_key_problem reports it.
enum class KeyProblem
{
    none,
    empty_key,
    long_scope,
    long_key
};
KeyProblem key_problem(Datum scope, Datum key);
// A scope of type `type` as text: the variants of the functions for Citus
// tenants of type bigint and uuid take it as that type, whose text it is.
Datum scope_text(Datum scope, Oid type);
// Argument 0, the scope, as text (scope_text), as the keys store it
// (store::tenant_scope).
Datum scope_arg(FunctionCallInfo fcinfo);
// Arguments 0 and 1 (scope, key), checked, with the calling tenant; the
// scope as the keys store it.
store::Key key_args(FunctionCallInfo fcinfo);
// With idempotency.tenant_isolation = role, the calling role; else none.
Oid tenant_of_caller();

// Intervals: ttl and lease end after now and at most 3650 days after it,
// with no negative part; wait within [0, 1 hour].
Interval *interval_from_us(int64 us);
Interval *ttl_arg(FunctionCallInfo fcinfo, int n);
Interval *optional_lease_arg(FunctionCallInfo fcinfo, int n); // nullptr when not given
Interval *default_lease();
int64 wait_arg_us(FunctionCallInfo fcinfo, int n);

// 25006 on a standby or in a read-only transaction.
void require_writable(const char *function);

// The uncompressed size of a varlena argument, 0 when not given.
int64 argument_bytes(FunctionCallInfo fcinfo, int n);
// 54000 when what a key would store beyond its claim (a recovery point, claim
// data) is over idempotency.max_response_bytes.
void check_stored_size(int64 bytes, const char *what, const store::Key &key);
// 55000 when the table, still at 0.1.0, lacks the column for what was given.
void require_column(const store::Storage &storage, store::Column column, const char *what);

} // namespace idempotency::arguments
