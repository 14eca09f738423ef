// Citus, detected at run time from its catalogs and its SQL-level functions,
// called directly (no build-time dependency on its headers or its library).
//
// When idempotency.keys is a hash-distributed Citus table, its rows live in
// shards, one relation per shard, named as Citus names them (its
// shard_name(): keys_<shard id>, in the table's schema); the table
// itself is an empty shell.  Every read and write for a scope then goes to
// the shard that holds the scope:
//  1. Citus's own get_shard_id_for_distribution_column() gives the scope's
//     shard (called directly, not through SQL).  The column is scope (text
//     tenants), or shard_key, made the type of a bigint, integer or uuid
//     tenant column by idempotency_distribute(): the scope is then read as
//     that type first (its input function).  Citus delegates such calls by a
//     bigint or uuid scope (create_scope_variants), whose text reads back as
//     the value Citus hashed;
//  2. the lock Citus's own executor takes before it writes a shard is taken,
//     through its lock_shard_metadata() (as the keys' owner): ShareLock on the
//     co-located shards' metadata.  A shard move or split takes it in
//     ExclusiveLock, on every node that has the metadata, before it switches
//     the placement over; holding it keeps the move from finishing (and the
//     source shard from being dropped) until this transaction ends.  Only a
//     lock that must not wait tries the lock's tag of the tested releases
//     (advisory space: the shard's index in the sorted shard list, the
//     co-location id, class 8), and every lock taken by waiting checks that
//     tag against Citus's;
//  3. the metadata is read again after the lock, with a fresh catalog
//     snapshot: a move that finished before the lock was granted is seen;
//  4. the shard must be placed on this node; otherwise the call was not
//     routed here (or the shard has just moved), and it is forwarded to the
//     shard's node (forward_call, forward_read) -- or, where Citus lets no
//     query run on another node, answers IK005, and a retry is routed
//     afresh.
//
// The lock's tag and the catalogs' columns are Citus's private layout, so
// they are trusted only on the Citus releases test/t/060_citus.pl runs
// (refused on others); a function missing is refused too, and the catalogs
// are read through their indexes with each column's type checked.
//
// When idempotency.keys is not distributed but Citus is loaded, a write to it
// asks Citus to commit the coordinated transaction with two-phase commit, so
// that distributed business writes in the same transaction cannot commit on
// a worker while the local claim is lost in a crash (see force_two_phase):
// by the C routine Citus's library exports up to PostgreSQL 15, else (from
// 16 on PGXS hides it) by an update of idempotency.two_phase where the DBA
// made it a reference table; without either such writes are refused.
// Forwarding a call relies on Citus's execution state, which only those
// exports give: from PostgreSQL 16 on, forwarded calls are refused.
//
// Cache (backend-local): the layout of the table -- whether it is
// distributed, by which column, its shards in the order of their hash ranges
// and which are placed here -- keyed by the table's OID and a generation.  Citus's
// triggers on pg_dist_partition, pg_dist_shard and pg_dist_placement
// invalidate the distributed table's relcache entry, and changes of
// pg_dist_local_group and pg_dist_node invalidate those catalogs' entries; a
// relcache callback for any of these (or for all relations) bumps the
// generation, and a layout of an older generation is read again.  The layout
// is read into locals before any call that can process invalidations, and
// step 3 above runs after AcceptInvalidationMessages(), so the placement
// checked is never older than the lock.
#pragma once

#include "pg.hpp"

extern "C"
{
#include "nodes/pg_list.h"
#include "storage/lockdefs.h"
}

namespace idempotency::citus
{

// The relation that holds the keys of `scope` on this node, locked in
// `lockmode` to the end of the transaction: `keys` itself (already locked by
// the caller) unless Citus distributes it, else its shard for the scope --
// to write, under the shard metadata lock; to read (AccessShareLock),
// without it, so that a read never waits behind a shard move (see
// read_placement).  When that shard is not placed here: IK005, or with
// elsewhere_ok InvalidOid (a write still holds the metadata lock), for a
// call that forward_call or forward_read can run on the shard's node.
Oid relation_for_scope(Oid keys, Datum scope, LOCKMODE lockmode, bool elsewhere_ok);

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
// move) and returns the number of rows,
// their values (composites) in *rows, in the caller's memory context.
uint64 forward_read(FunctionCallInfo fcinfo, Datum scope, Datum **rows);

// The scope (text) as a value of `type`, the type of a typed tenant column
// (bigint, integer or uuid): what shard_key holds.
Datum scope_as(Oid type, Datum scope);

// The scope under which `keys` (locked by the caller) store a call's keys:
// when Citus distributes them by a typed tenant (by_shard_key), the
// tenant's value as its type prints it ('1001' for '01001' or ' 1001', a
// uuid in lower case), so that every spelling of one tenant names one key;
// otherwise the scope as given.  A scope that is no value of the type fails
// with the type's error (22P02, or 22003 out of range).
Datum tenant_scope(Oid keys, Datum scope);
// Whether Citus is loaded in this server.
bool loaded();

// Whether Citus distributes `keys` (locked by the caller).
bool distributes(Oid keys);

// The shards of `keys` placed on this node, each locked as
// relation_for_scope locks it, for expiry; NIL when `keys` is not
// distributed.  With skip_if_busy, a shard whose lock is not free at once is
// left for the next sweep.
List *local_shards(Oid keys, LOCKMODE lockmode, bool skip_if_busy);

// Whether this node is a Citus worker (a node other than the coordinator).
bool worker_node();

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

} // namespace idempotency::citus
