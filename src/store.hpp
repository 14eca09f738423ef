// Access to idempotency.keys through the heap and index APIs: no SQL text on
// the hot path.
//
// Concurrency scheme (the reason for every function here):
//  * Reads use a dirty snapshot: they see the newest committed version, plus
//    versions written by transactions still in progress, flagged as such with
//    the writer's transaction id.  So a caller never claims a key because its
//    own snapshot is older than a completion, whatever the isolation level,
//    and it can tell an uncommitted claim by another transaction (in_progress,
//    or mismatch) from a committed one.
//  * A writer takes the key's lock -- a heavyweight lock in the advisory lock
//    space, tagged (database, 64-bit hash of scope and key, key_lock_tag) --
//    reads, decides, writes, and lets the lock go.  From then on its
//    uncommitted version keeps everyone else out: they see it and answer
//    in_progress or mismatch, or wait for its transaction (an ordinary lock
//    wait on the transaction id).  So two callers never both claim, and a
//    transaction holds at most one key lock at a time, however many keys it
//    claims.  Callers that only read never take it, nor does a transaction
//    that changes its own uncommitted claim (complete after begin): nobody
//    else writes that version before the transaction ends.
//  * The expiry sweep deletes without the key lock but never waits: a row some
//    transaction is changing right now is skipped.  A writer that loses a race
//    against a committed expiry sees TM_Deleted from update_record and reads
//    again.
#pragma once

#include "pg.hpp"
#include "request_hash.hpp"

extern "C"
{
#include "access/tableam.h"
#include "utils/timestamp.h"
#include "utils/relcache.h"
}

namespace idempotency::store
{

// Column numbers of idempotency.keys (0-based), in table order.  The columns a
// claim never changes come first; see the install script.
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
    column_count
};

constexpr char status_in_progress = 'p';
constexpr char status_completed = 'c';

struct Relations
{
    Relation heap;
    Relation pkey;
    Relation expiry; // opened on first use; see expiry_index() in store.cpp
    Oid expiry_oid;
    LOCKMODE lockmode;
};

// Who wrote the version a read returned.
enum class Writer
{
    committed, // a committed transaction: the state everyone agrees on
    self,      // the calling transaction (or one of its live subtransactions)
    other      // another transaction still in progress; it holds the key lock
};

// One version of a row, decoded.  Datums point into palloc'd memory of the
// calling context; varlena values may still be compressed or TOASTed.
struct Record
{
    bool found;
    Writer writer;
    TransactionId writer_xid; // for Writer::other: the transaction to wait for
    ItemPointerData tid;
    Datum values[column_count];
    bool nulls[column_count];

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
    // A record past its expiry is as good as absent -- unless it is an
    // unfinished claim whose lease still runs.
    bool expired(TimestampTz now) const
    {
        return expires_at() <= now && (completed() || lease_expires_at() <= now);
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

// Opens idempotency.keys and its indexes; RowExclusiveLock to write,
// AccessShareLock to read; the lock is kept to the end of the transaction.
// Raises an error when the storage is missing.
Relations open_relations(LOCKMODE lockmode);
// The same, for the expiry worker: false, without waiting, when the storage is
// missing or DDL (DROP or ALTER EXTENSION) holds it.
bool try_open_relations(Relations *rels, LOCKMODE lockmode);
void close_relations(const Relations &rels);

// The newest version of (scope, key), seen through a dirty snapshot.
Record read_latest(const Relations &rels, Datum scope, Datum key);
// The caller's own uncommitted claim on (scope, key), fetched by its address
// without an index scan when it is the version this backend wrote last (the
// usual complete after begin).  False when it is not; read_latest then knows.
bool fetch_own_claim(const Relations &rels, Datum scope, Datum key, Record *record);
// The version of (scope, key) visible to an MVCC snapshot.
Record read_visible(const Relations &rels, Datum scope, Datum key, Snapshot snapshot);

// Writes `record` as a new row; the caller holds the key lock.
void insert_record(Relations &rels, Record &record);
// Replaces the version `record.tid` with `record`'s values; the caller holds
// the key lock, or the version is its own transaction's.  Returns TM_Ok, or TM_Deleted/TM_Updated when a concurrent
// expiry got there first (the caller reads again).
TM_Result update_record(Relations &rels, Record &record);

// Deletes up to `max_rows` records that are expired at `now` (no limit when
// max_rows < 0), found through the expiry index under the active snapshot.
// Never waits: a row another transaction is changing right now is skipped.
// Returns the number deleted.
int64 expire(Relations &rels, TimestampTz now, int64 max_rows);

// The per-key lock described above: false when another transaction holds it
// and `wait` is false.
bool lock_key(Datum scope, Datum key, bool wait);
void unlock_key(Datum scope, Datum key);

// Waits, as an ordinary lock wait (visible in pg_locks, cancellable, seen by
// the deadlock detector), until transaction `xid` ends or `timeout_ms`
// passed; true when it ended.  Other errors (statement_timeout, cancel,
// deadlock) propagate.
bool wait_for_transaction(TransactionId xid, int timeout_ms);
// The same without a limit; lock_timeout applies as to any lock wait.
void wait_for_transaction(TransactionId xid);

} // namespace idempotency::store
