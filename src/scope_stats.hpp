// The per-scope summary: idempotency.scope_stats, a small table derived from
// idempotency.keys, which idempotency_scope_stats() reads instead of the keys.
#pragma once

#include "pg.hpp"

namespace idempotency::scope_stats
{

// Recomputes the summary in the current transaction and returns the number of
// scopes, or -1 when it did nothing.  With wait, waits for the locks like any
// statement (idempotency_scope_stats_refresh()).  Without (the worker), it
// does nothing when a table is missing (the database's extension is older) or
// locked (DDL, another refresh), when the summary is younger than
// `min_age_ms`, or on a Citus worker node (the coordinator summarises every
// shard).
int64 refresh(bool wait, int min_age_ms);

} // namespace idempotency::scope_stats
