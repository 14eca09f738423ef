// The routed storage session: the one way the SQL functions (api.cpp,
// inspect.cpp) reach the keys of a scope.  Each call opens the storage of
// the key's scope on this node, lets the claims module (claims.hpp) do what
// the function asks there, and closes it -- or, when Citus places the
// scope's shard on another node, forwards the function's call to that node
// (citus_routing.hpp) and hands back what it answered.  Which node runs a
// call is decided here and nowhere else; what a call does to a key is the
// claims module's; the SQL functions only check their arguments and build
// their rows.
//
// It sits in the routing layer, below the SQL functions and above the claims
// (doc/developing.md, "Map of the code"): it takes a SQL function's call
// (its fcinfo, which a forwarded call passes on whole) and calls only
// downwards, so that no #include runs back up.
#pragma once

#include "claims.hpp"

namespace idempotency::session
{

// ---------------------------------------------------------------------------
// idempotency_begin
// ---------------------------------------------------------------------------

// Whether a begin's forwarded answer (a row of the call's result type) is a
// claim: the SQL function knows its row type.
using IsClaim = bool (*)(FunctionCallInfo fcinfo, Datum answer);

// Answers `request`, the begin `fcinfo` calls: true with *answer when it is
// answered on this node (claims::answer_from_read, then claims::begin);
// false with *forwarded, the row the shard's node answered (fcinfo->isnull
// set), when Citus places the scope's shard elsewhere.  With the keys in
// Citus shards, a replay or a mismatch is answered from a read that never
// waits behind a shard move -- of the shard here, or, during a move of a
// shard placed elsewhere, through Citus (citus_routing::forward_replay) --
// before the shard is opened for writing.  A claim, made here or there, is
// noted for the commit (claims.hpp, IK004).
bool begin(FunctionCallInfo fcinfo, claims::BeginRequest request, IsClaim is_claim,
           claims::BeginAnswer *answer, Datum *forwarded);

// ---------------------------------------------------------------------------
// The holder's writes: complete, checkpoint, release, forget
// ---------------------------------------------------------------------------

// What runs on the storage opened here, with the key as the table stores it:
// one claims entry point (claims::complete, checkpoint, release, forget).
using Change = void (*)(store::Storage &storage, const store::Key &key, void *arg);

// Opens the storage of `key`'s scope to write, runs `change` there, closes
// it, and returns true; or, when Citus places the scope's shard on another
// node, runs `fcinfo`'s call there (citus_routing::forward_call), notes what
// it did to the claim for the commit (claims::wrote_elsewhere) and returns
// false with *forwarded, its result (fcinfo->isnull set).
bool write(FunctionCallInfo fcinfo, const store::Key &key, claims::Write kind, Change change,
           void *arg, Datum *forwarded);

// write() with a callable (a lambda) as the change.
template <typename Callable>
bool write(FunctionCallInfo fcinfo, const store::Key &key, claims::Write kind, Callable &&change,
           Datum *forwarded)
{
    using Held = std::remove_reference_t<Callable>;
    // A PostgreSQL error in `change` longjmps past the caller's frame.
    static_assert(std::is_trivially_destructible_v<Held>,
                  "a PostgreSQL error may skip the change's destructor: capture by reference");
    return write(
        fcinfo, key, kind,
        [](store::Storage &storage, const store::Key &stored, void *arg) {
            (*static_cast<Held *>(arg))(storage, stored);
        },
        &change, forwarded);
}

// ---------------------------------------------------------------------------
// Reads: idempotency_lookup, idempotency_keys
// ---------------------------------------------------------------------------

// The key's record for idempotency_lookup (claims::lookup), read on this
// node: true, *found and *record.  Placed on another node: false, and
// *forwarded_row is the row the call answered there (a copy in the current
// memory context), nullptr when it answered none.
bool lookup(FunctionCallInfo fcinfo, const store::Key &key, bool latest, bool *found,
            store::Record *record, HeapTuple *forwarded_row);

// A record a listing shows, put into the call's result by the SQL function.
using PutRecord = void (*)(const store::Record &record, void *arg);

// A page of a scope's live records for idempotency_keys, as the statement's
// snapshot sees them, this transaction's deferred claims included
// (claims::write_all, then claims::list): read on this node, each goes to
// `put`; placed on another node, the call runs there
// (citus_routing::forward_read) and its rows go into the call's tuplestore
// (fcinfo->resultinfo, materialized) as they are.
void list(FunctionCallInfo fcinfo, const store::Key &scope, Datum after_key, int max_keys,
          PutRecord put, void *arg);

} // namespace idempotency::session
