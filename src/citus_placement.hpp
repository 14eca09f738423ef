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
//     shard's node (citus_routing.hpp: forward_call, forward_read) -- or, where Citus lets no
//     query run on another node, answers IK005, and a retry is routed
//     afresh.
//
// The lock's tag and the catalogs' columns are Citus's private layout, so
// they are trusted only on the Citus releases the Citus TAP scripts run
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
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "storage/lockdefs.h"
}

namespace idempotency::citus_placement
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
// The relation that holds `table`'s rows on this node, locked in `lockmode`
// (`table` itself, locked by the caller, unless Citus distributes it): for a
// reference table, its placement here (idempotency.digest_secret, which
// idempotency_distribute() makes one, so that every node digests keys with
// the same secret: key_digest.hpp).
Oid reference_placement(Oid table, LOCKMODE lockmode);

// The guard in front of Citus's private layout, and the one owner of the
// rule of which Citus releases are tested on which PostgreSQL major: returns
// when the loaded Citus library and the installed citus extension are both a
// release tested on this major; otherwise 0A000, naming the untested one and
// the tested pairs.  Every read of that layout and every lookup of a routine
// in Citus's library go through it first, and idempotency_distribute()
// (through idempotency.require_tested_citus()) before its first change.
void require_tested_citus();

// ---------------------------------------------------------------------------
// For citus_routing.cpp: the layout and the locks it forwards calls under
// (each is described where it is defined, in citus_placement.cpp)
// ---------------------------------------------------------------------------

struct Shard
{
    int64 id;
    int32 min;  // start of its hash range: the shards' order, whose index the
                // metadata lock's tag holds (metadata_locktag)
    bool local; // placed on this node
};
// An array in the layout's memory context, dropped with it, never destroyed.
static_assert(fits_postgres_memory<Shard>, "a Shard lives in palloc'd memory");

// See "Cache" in citus_placement.hpp.  Everything but the fields below lives in
// layout_context, which a rebuild replaces.
struct Layout
{
    Oid keys;          // the table described; InvalidOid: nothing yet
    uint64 generation; // of `invalidations` when it was read
    bool distributed;  // hash-distributed by Citus
    uint32 colocation; // its co-location group
    bool by_shard_key; // by shard_key, a typed tenant (else by scope, text)
    Oid key_type;      // the distribution column's type
    Oid owner;         // the table's owner
    FmgrInfo shard_id; // Citus's get_shard_id_for_distribution_column(), for key_type
    FmgrInfo input;    // by_shard_key: the type's input function, and its
    Oid input_param;   //   type parameter, which read the scope as that type,
    FmgrInfo output;   //   and its output function, which spells the value
    int32 group;       // this node's group: 0 on the coordinator, -1 without Citus
    int shard_count;   // shards, sorted by the start of their range
    Shard *shards;
    Oid catalogs[4]; // the pg_dist_* catalogs read, whose invalidation counts
};

// Where a scope's keys are, copied out of the layout.
struct Placement
{
    bool distributed;
    int64 shard;
    int index; // in the shard list sorted by range: the metadata lock's tag
    uint32 colocation;
    bool local; // the shard is placed here; not distributed: this node may keep the keys

    bool same_shard(const Placement &other) const
    {
        return distributed == other.distributed && shard == other.shard && index == other.index &&
               colocation == other.colocation;
    }
};
// Copied into palloc'd arrays (local_shards), freed without a destructor.
static_assert(fits_postgres_memory<Placement>, "a Placement lives in palloc'd memory");

// How Citus distributes a function (its row of pg_dist_object): by which
// argument, co-located with which tables.
struct DistributedFunction
{
    bool distributed; // by an argument: Citus delegates its calls by it
    int argument;     // distribution_argument_index: of all its arguments
    uint32 colocation;
};

// Runs `call` with the keys' owner `owner` as the current user, for Citus's
// SQL-level functions that check the caller's rights on the keys (the
// caller of the API need not have any).  The user is restored by the abort
// of an error, as for any security-restricted operation.
template <typename Call> Datum as_owner(Oid owner, Call call)
{
    Oid user;
    int security;
    GetUserIdAndSecContext(&user, &security);
    SetUserIdAndSecContext(owner,
                           security | SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION);
    Datum result = call();
    SetUserIdAndSecContext(user, security);
    return result;
}

const Layout &layout_of(Oid keys);
Placement place(Oid keys, Datum scope);
Placement lock_placement(Oid keys, Datum scope);
bool lock_metadata(Oid keys, const Placement &placement, bool wait);
Datum scope_value(FmgrInfo *input, Oid input_param, Oid type, Datum scope);
void *exported(const char *name);
[[noreturn]] void not_routed(int64 shard, const char *why = nullptr);
bool request_two_phase();
bool two_phase_by_reference_table(Oid keys);
void force_two_phase(Oid keys);
DistributedFunction citus_distributed_function(Oid function);
// The co-location group Citus distributes `relid` in; 0 when it does not.
uint32 colocation_of(Oid relid);

} // namespace idempotency::citus_placement
