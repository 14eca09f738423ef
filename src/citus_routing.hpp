// Citus routing: a call of the API whose scope's shard Citus places on
// another node runs there (forward_call, forward_replay, forward_read; called
// by the routed storage session, session.hpp, which decides when, and
// nothing else), and a call Citus may delegate is checked
// before Citus plans it (guard_delegation); idempotency_distribute(), which
// makes Citus delegate the calls, first checks the Citus release
// (idempotency.require_tested_citus(), defined here).  Where keys are placed, under
// which lock, and the commit protocol of a write are citus_placement.hpp's,
// below storage: this module calls it, never the other way round.
#pragma once

#include "pg.hpp"

namespace idempotency::citus_routing
{

// Runs the call `fcinfo` of an API function that writes (begin, complete,
// checkpoint, release, forget), whose scope's shard Citus places on
// another node, on that node, in this transaction, and returns its result
// (fcinfo->isnull set).
// Such a call reached the wrong node: a distributed handler delegated just
// before its shard moved, or a call in a shape Citus does not delegate.
// The shard's metadata lock is held (as for a local write), so the shard
// cannot move on before this transaction ends; Citus routes the call to the
// node, where it runs as any call there does, and the transaction commits
// with two-phase commit, the claim with the business writes.  It runs as
// the caller, routed through idempotency.route (which holds no row; the
// DBA grants it SELECT and UPDATE on it); IK005 where Citus refuses a remote
// query (a query on a shard, or a force-delegated call in a transaction
// block), the routing table is not distributed with the keys, or the caller
// may not use it.  See doc/citus.md, "Forwarded calls".
Datum forward_call(FunctionCallInfo fcinfo, Datum scope);

// A begin of `key` whose scope's shard is placed on another node, while a
// shard move holds or awaits that shard's metadata lock, so that
// forward_call would wait for the move: if the key is completed (read
// through Citus, without the lock), the begin runs on the shard's node
// without the lock here -- where it only reads: a replay or a mismatch,
// which must not wait for a move any more than a read does.  Returns false
// having done nothing otherwise (the lock, if it was free, is then held).
// `claimed` tells whether an answer is a claim: should the key have expired
// or been forgotten in between, the begin there claims it, which IK005 rolls
// back.  Not for a begin that takes a mismatch over (a write).
bool forward_replay(FunctionCallInfo fcinfo, Datum scope, Datum key, Datum *answer,
                    bool (*claimed)(FunctionCallInfo fcinfo, Datum answer));

// forward_call for a read (lookup, keys), whose scope's shard is placed on
// another node: runs it there without a lock here (a read never waits for a
// move) and returns true, with the number of rows in *count and their values
// (composites) in *rows, in the caller's memory context.  False, with
// nothing done, when the shard is no longer where the caller was told it is
// -- moved here, or removed by a split while Citus planned the query
// (unless_split) -- for the caller to place the scope afresh.
bool forward_read(FunctionCallInfo fcinfo, Datum scope, Datum **rows, uint64 *count);

// While the library is preloaded after Citus (_PG_init): before Citus's
// planner sees a call of a function that idempotency_distribute()
// delegates, or of a function or procedure Citus distributes with the keys
// (a handler), refuses a NULL distribution argument with 22004 (Citus would
// crash on it); for the API's functions, reads a typed scope as the
// tenant's type, and -- on a node that would delegate it -- takes the shard
// metadata lock for a call that may write, so that it waits out a shard
// move and is delegated to the shard's new node.  Errors raised planning or
// running such a call (Citus's, such as a worker lost mid-call, included)
// are logged without the statement, which may hold the request.
void guard_delegation();

} // namespace idempotency::citus_routing
