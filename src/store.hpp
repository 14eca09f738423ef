// Access to idempotency.keys: reads through the primary key with the index
// API, writes through the executor's single-row routines (the ones logical
// replication applies changes with), so that every write maintains every
// ready index of the table -- including one being built concurrently or added
// by a DBA -- checks its constraints and fires its row triggers.
//
// What the storage gives the claim protocol above it (claims.hpp, which
// decides who may write what, and when):
//  * Reads through a dirty snapshot (read_latest): the newest committed
//    version, plus versions written by transactions still in progress,
//    flagged as such with the writer's transaction id.  So a caller never
//    claims a key because its own snapshot is older than a completion,
//    whatever the isolation level, and it can tell an uncommitted claim by
//    another transaction from a committed one.  A version that a transaction
//    still in progress is deleting (a sweep that may yet roll back) or
//    replacing counts as held by that transaction, never as absent.
//  * The key lock: a heavyweight lock in the advisory lock space, tagged
//    (database, 64-bit hash of scope and key, key_lock_tag), taken and let
//    go around each decision to write a key (claims.hpp, rule K), so that a
//    transaction holds at most one at a time.
//  * The expiry sweep never waits for a request: it deletes a row only when it
//    gets the key's lock and the row's tuple lock at once, which the newest
//    version with nobody changing it gives; otherwise it skips the row for
//    the next round.
//
// Backend-local caches, and why each is safe:
//  * The OID of idempotency.keys (store.cpp, heap_oid_cache).  Forgotten by a
//    relcache invalidation of that relation (DROP EXTENSION, ALTER, VACUUM,
//    ANALYZE, REINDEX) or of all relations.  It is read into a local before
//    the table is locked, and after the lock -- which processes pending
//    invalidations -- it is used only if no invalidation arrived meanwhile or
//    the name still resolves to it, the check RangeVarGetRelidExtended makes.
//  * The layout of the relation of keys opened last: its primary key's OID
//    and its column map (store.cpp, layout_cache), which open_primary_key and
//    check_layout found.  Forgotten by a relcache invalidation of the table,
//    of the index, or of all relations: ALTER TABLE, an index created or
//    dropped, REINDEX CONCURRENTLY's swap and a recreated primary key each
//    send one for the table.  Read into a local after the table's lock
//    (which processed the invalidations before it), and used only if no
//    invalidation arrived while the index was locked -- the check
//    open_primary_key makes by reading the primary key again; otherwise
//    both are found afresh from the relcache entry.
//  * The database's secret of the key digests and the last digest computed
//    (key_digest.cpp; see key_digest.hpp for why it is safe).
//  * The address of the version this backend wrote last (store.cpp,
//    last_write).  Valid only in the transaction that wrote it (tagged with
//    the local transaction id), forgotten on any rollback to a savepoint
//    (which releases the locks that protect it), and checked on use: the
//    fetch must find a live version of the same key written by this
//    transaction, else the caller reads through the index.
//  * With Citus, the layout of the distributed table: hash function, shard
//    ranges, which shards are placed here (citus_placement.cpp; see citus_placement.hpp for why
//    it is safe).
//  * The result row descriptor of idempotency_begin and its enum's OIDs
//    (api.cpp): a copy of the type cache's descriptor, checked at each call
//    against the type cache's number for the type's current descriptor,
//    which changes with ALTER TYPE or a type recreated under the same OID;
//    the enum's OIDs are forgotten by any pg_enum invalidation.
// Nothing else is kept across calls.
#pragma once

#include "pg.hpp"
#include "request_hash.hpp"

extern "C"
{
#include "access/genam.h"
#include "access/tableam.h"
#include "utils/timestamp.h"
#include "utils/relcache.h"
}

namespace idempotency::store
{

// Column numbers of idempotency.keys (0-based), in table order.  The columns
// of 0.1.0 come first (those a claim never changes first among them); later
// versions append theirs, so that a table upgraded with ALTER TABLE ... ADD
// COLUMN and a freshly installed one have the same layout.
enum Column
{
    col_scope,
    col_key,
    col_request,
    col_created_at,
    col_ttl,
    col_expires_at,
    col_status,
    col_attempt,
    col_lease_expires_at,
    col_completed_at,
    col_response_status,
    col_recovery_point,
    col_response_body,
    col_response_headers,
    // 0.2.0
    col_tenant,                // regrole: the owning role, 0 without tenant isolation
    col_lease,                 // the claim's lease length, which a checkpoint renews
    col_response_body_bytes,   // a response body stored as the caller's bytes
    col_response_body_omitted, // the response was over idempotency.max_response_bytes
    col_claim_data,            // what the holder of a claim said about it
    col_sweep_at,              // unused since 0.3.0: NULL (see store_values)
    // 0.3.0
    col_shard_key, // text and NULL, or the scope as the Citus tenant column's type
                   // (citus_placement.hpp)
    // 0.5.0
    col_digest, // uuid: the key digest (key_digest.hpp), the primary key (with the shard key on
                // Citus)
    column_count
};
// The columns of a table still at 0.1.0: the library of a newer version runs
// against it until ALTER EXTENSION UPDATE (with shared_preload_libraries,
// from the restart that loads it).  Columns it lacks read as NULL, and the
// primary key is (scope, key) without the tenant.
constexpr int columns_0_1_0 = col_tenant;
// The columns of a table still at 0.2.0 (or of a Citus shard made before the
// update): all but shard_key, which only typed Citus tenants need.
constexpr int columns_0_2_0 = col_shard_key;
// The columns of a table still at 0.3.0 or 0.4.0: all but digest, with the
// primary key on (tenant, scope, key) instead of (digest).
constexpr int columns_0_4_0 = col_digest;

constexpr char status_in_progress = 'p';
constexpr char status_completed = 'c';

struct WriteContext; // the executor state of writes; see store.cpp

// idempotency.keys and its primary key, locked to the end of the transaction.
// Its columns are found by name: a column a DBA added and dropped again
// leaves a dropped attribute behind, and a column dropped and added back
// comes last.
struct Storage
{
    Relation heap;
    Relation pkey;
    LOCKMODE lockmode;
    int columns;   // column_count, or columns_0_4_0, _0_2_0 or _0_1_0 before the update
    bool in_order; // attribute n is column n - 1, and there are no others
    AttrNumber attnums[column_count]; // each column's attribute number, while has() it
    WriteContext *writes;             // set up by the first write, finished by close()

    bool has(Column column) const { return column < columns; }
    AttrNumber attnum(Column column) const { return attnums[column]; }
};

// What identifies a record: the tenant (the calling role with tenant
// isolation, else InvalidOid), the scope and the key (detoasted text).
struct Key
{
    Oid tenant;
    Datum scope;
    Datum key;
};

// Who wrote the version a read returned.
enum class Writer
{
    committed, // a committed transaction: the state everyone agrees on
    self,      // the calling transaction (or one of its live subtransactions)
    other      // another transaction still in progress (writer_xid)
};

// One version of a row, decoded.  Datums point into palloc'd memory of the
// calling context; varlena values may still be compressed or TOASTed.
// found == false with writer == other: no version is readable, because a
// transaction in progress when the read checked the newest version is
// deleting or replacing it.  It may have ended before the read returned (a
// rollback takes its new version with it): the caller decides what that
// means (claims.hpp, rule R).
struct Record
{
    bool found;
    Writer writer;
    TransactionId writer_xid; // for Writer::other: the transaction to wait for
    bool deferred = false;    // a deferred claim (claims.hpp): no row, tid invalid
    ItemPointerData tid;
    Datum values[column_count];
    bool nulls[column_count];

    // Another transaction is changing the key: wait for it or answer
    // in_progress, never act on what is there.
    bool held_by_other() const { return writer == Writer::other; }
    const RequestHash *request() const { return datum_get_request_hash(values[col_request]); }
    char status() const { return DatumGetChar(values[col_status]); }
    bool completed() const { return status() == status_completed; }
    int32 attempt() const { return DatumGetInt32(values[col_attempt]); }
    TimestampTz created_at() const { return DatumGetTimestampTz(values[col_created_at]); }
    TimestampTz expires_at() const { return DatumGetTimestampTz(values[col_expires_at]); }
    TimestampTz lease_expires_at() const
    {
        return nulls[col_lease_expires_at] ? DT_NOBEGIN
                                           : DatumGetTimestampTz(values[col_lease_expires_at]);
    }
    void set(Column column, Datum value)
    {
        values[column] = value;
        nulls[column] = false;
    }
    void set_null(Column column)
    {
        values[column] = (Datum)0;
        nulls[column] = true;
    }
};

// Opens idempotency.keys and its primary key; RowExclusiveLock to write,
// AccessShareLock to read; the locks are kept to the end of the transaction.
// Raises an error when the storage is missing.  When Citus distributes the
// table, opens instead its shard that holds `scope` (citus_placement.hpp).
Storage open(LOCKMODE lockmode, Datum scope);
// open() for a call that can be forwarded: false, with `storage` not opened,
// when Citus places the scope's keys on another node (the routed session,
// session.hpp, then forwards the call there).
bool open_here(LOCKMODE lockmode, Datum scope, Storage *storage);

// The OID of idempotency.keys, locked in AccessShareLock to the end of the
// transaction; InvalidOid when the extension is not installed here.
Oid keys_table();
// Whether Citus distributes idempotency.keys, so that open() opens shards.
// False at the cost of one test without Citus.
bool keys_in_shards();
// Fires the AFTER triggers the writes queued and releases what they used.
void close(Storage &storage);

// The scope as the keys store it: with Citus distributing them by a typed
// tenant, the tenant's value as its type prints it, so that every spelling
// of one tenant names one key (citus_placement::tenant_scope); otherwise as given.
Datum tenant_scope(Datum scope);

// The key as this table stores it.  A table still at 0.1.0 has no tenant
// column: as 0.1.0 did, the tenant's OID and a slash prefix the scope.  Every
// other function takes the stored key.
Key stored_key(const Storage &storage, const Key &key);

// The newest version of the key, seen through a dirty snapshot.
Record read_latest(const Storage &storage, const Key &key);
// The caller's own uncommitted version of the key, fetched by its address
// without an index scan when it is the version this backend wrote last (the
// usual complete after begin).  False when it is not; read_latest then knows.
bool fetch_last_write(const Storage &storage, const Key &key, Record *record);
// The version of the key visible to an MVCC snapshot.
Record read_visible(const Storage &storage, const Key &key, Snapshot snapshot);
// The key a decoded record holds.
Key key_of(const Record &record);

// Writes `record` as a new row of `key`; the caller holds the key lock, or
// the key's entry in the shared claims table (claims.hpp, rule A).
void insert_record(Storage &storage, const Key &key, Record &record);
// The same in a subtransaction, for a writer that another may have beaten to
// the key (claims.hpp, rule F), which then asks `keep` whether the row may
// stay.  present, and nothing written, when a row of the key was committed
// meanwhile (a unique violation of the primary key); undone when `keep` said
// no: the subtransaction is rolled back, so that the row is dead at once --
// not merely deleted by a transaction still open, which would make another
// writer of the key wait for this transaction's end.
enum class Inserted
{
    kept,
    undone,
    present
};
// (`keep` is a plain function and its argument: an error may unwind through
// this call, which no object with a destructor may be live for.)
Inserted insert_unless_present(Storage &storage, const Key &key, Record &record,
                               bool (*keep)(void *), void *keep_arg);
// Replaces the version `record.tid` with `record`'s values; the caller holds
// the key lock, or the version is its own transaction's uncommitted one.
void update_record(Storage &storage, Record &record);
// Deletes the version `record.tid`, under the same conditions.
void delete_record(Storage &storage, const Record &record);
// Inserts one row into `relation` (opened and locked by the caller in
// RowExclusiveLock or stronger) through the same executor routine as the
// keys' writes: every index maintained, constraints checked, triggers fired.
// `values` and `nulls` are in the relation's attribute order.
void insert_row(Relation relation, Datum *values, bool *nulls);
// insert_row in a subtransaction: false, with nothing written, when the row
// violates a unique constraint -- against a row another transaction
// committed, for whose end the insert waited (tenants.cpp).
bool insert_row_unless_present(Relation relation, Datum *values, bool *nulls);
// Deletes, through the same executor routine, every row of `relation`
// (locked by the caller in RowExclusiveLock) that the active snapshot sees
// and `doomed` picks, each only if its tuple lock is free at once: a sweep
// never waits (tenants.cpp).
void delete_rows_if_free(Relation relation, bool (*doomed)(TupleTableSlot *slot, void *arg),
                         void *arg);
// Whether the storage has a version of any key, committed or in progress.
bool holds_keys(const Storage &storage);
// Before a call that may store `key` reads it: makes sure its tenant has its
// number in this database (tenants.hpp), which may wait for another
// transaction -- never while a key lock is held.
void number_tenant(const Storage &storage, const Key &key);
// Registers, once per backend, the relcache callback that forgets this
// layer's caches (see "Backend-local caches" above): one for all of them,
// since a backend has only ten for every library it loads.
void watch_relation_invalidations();

// The records of one scope in key order, as an MVCC snapshot sees them,
// after `after_key` when it is not 0: a keyset page through the primary key.
// From 0.5.0 on the order is that of the keys' digests: a scope's keys are
// one range of the primary key (key_digest.hpp), in an order that the
// database's secret fixes, and a page starts after the digest of
// `after_key`, whether or not that key is still stored.
struct KeyScan
{
    const Storage *storage;
    IndexScanDesc scan; // nullptr: nothing to read (no secret yet)
    TupleTableSlot *slot;
    Oid tenant;
    Datum scope;
};
KeyScan begin_key_scan(const Storage &storage, Oid tenant, Datum scope, Datum after_key,
                       Snapshot snapshot);
bool next_key(KeyScan &scan, Record *record);
void end_key_scan(KeyScan &scan);

// How much of a table one expiry call scans.  The sweep reads the heap, in
// block order, from where the last sweep of the relation stopped (a hint in
// shared memory; block 0 without one), wrapping around at its end.
enum class Pace
{
    whole_table, // every block once: idempotency_expire()
    // The worker's: sweep_share_blocks() blocks, so that a sweep costs a few
    // milliseconds however large the table and a whole pass takes at most
    // sweep_shares sweeps; a sweep that deletes a full batch goes on.
    share,
};

// Which records are expired: the claims module's rule (claims.hpp, rule E),
// asked of each record with only its expires_at, status and
// lease_expires_at decoded.
using Expired = bool (*)(const Record &record, TimestampTz now);

// Deletes up to `max_rows` records that are `expired` at `now` (no limit
// when max_rows < 0), found by reading the heap as `pace` says, with a
// snapshot that sees the calling transaction's own changes so far, and the
// keys of dropped roles.  Never waits for a request: see the concurrency
// scheme.  Returns the number deleted.
int64 expire(Storage &storage, TimestampTz now, int64 max_rows, Pace pace, Expired expired);
// The same for every relation of this node that holds keys: the table, and
// when Citus distributes it, each of its shards placed here.  False when the
// storage is missing or (skip_if_busy, for the expiry worker) DDL such as DROP
// or ALTER EXTENSION holds it; `deleted` is then unset.
bool expire_here(TimestampTz now, int64 max_rows, Pace pace, bool skip_if_busy, Expired expired,
                 int64 *deleted);

// A 64-bit hash of the key: the key lock's tag, and the key's identity in
// the transaction's list of claims (claims.cpp).
uint64 key_hash(const Key &key);

// The per-key lock described above: false when another transaction holds it
// and `wait` is false.
bool lock_key(const Key &key, bool wait);
void unlock_key(const Key &key);

// Waits, as an ordinary lock wait (visible in pg_locks, cancellable, seen by
// the deadlock detector), until transaction `xid` ends or `timeout_ms`
// passed; true when it ended.  Other errors (statement_timeout, cancel,
// deadlock) propagate.
bool wait_for_transaction(TransactionId xid, int timeout_ms);
// The same without a limit; lock_timeout applies as to any lock wait.
void wait_for_transaction(TransactionId xid);

} // namespace idempotency::store
