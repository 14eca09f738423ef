// Storage of idempotency keys: see store.hpp for the concurrency scheme.
#include "store.hpp"

extern "C"
{
#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/skey.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation_d.h"
#include "common/hashfn.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "nodes/execnodes.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "utils/resowner.h"
#include "utils/fmgroids.h"
#include "utils/fmgrprotos.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/inval.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
}

namespace idempotency::store
{

// locktag_field4 of key locks.  PostgreSQL's own advisory lock functions use 1
// and 2, so key locks never collide with an application's advisory locks; in
// pg_locks they show as locktype 'advisory' with objsubid 18756.
constexpr uint16 key_lock_tag = 0x4944;

// The storage's OIDs, looked up once per backend.  Any relcache invalidation
// of one of them (DROP EXTENSION, or merely a change of its pg_class row)
// forgets them, and taking a lock processes pending invalidations, so a
// stale OID is noticed right after locking it.
struct StorageOids
{
    Oid heap;
    Oid pkey;
    Oid expiry;
};
static StorageOids storage_oids = {InvalidOid, InvalidOid, InvalidOid};

static void forget_storage_oids(Datum, Oid relid)
{
    if (relid == InvalidOid || relid == storage_oids.heap || relid == storage_oids.pkey ||
        relid == storage_oids.expiry)
        storage_oids = {InvalidOid, InvalidOid, InvalidOid};
}

static Oid index_relid(Oid namespace_oid, const char *name)
{
    Oid relid = get_relname_relid(name, namespace_oid);
    if (!OidIsValid(relid))
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                        errmsg("index \"idempotency.%s\" does not exist", name),
                        errhint("The extension's storage was changed by hand; reinstall the "
                                "extension.")));
    return relid;
}

// Looks the storage up by name, without a privilege check on the private
// schema: EXECUTE on the functions is the gate.
static bool look_up_storage()
{
    static bool callback_registered = false;
    if (!callback_registered)
    {
        CacheRegisterRelcacheCallback(forget_storage_oids, (Datum)0);
        callback_registered = true;
    }
    Oid namespace_oid = get_namespace_oid("idempotency", true);
    Oid heap = OidIsValid(namespace_oid) ? get_relname_relid("keys", namespace_oid) : InvalidOid;
    if (!OidIsValid(heap))
        return false;
    storage_oids = {heap, index_relid(namespace_oid, "keys_pkey"),
                    index_relid(namespace_oid, "keys_expires_at_idx")};
    return true;
}

// Finds and locks idempotency.keys and its primary key.  The lock is held to
// the end of the transaction, as for any table a statement reads or writes:
// DDL such as DROP EXTENSION then waits for transactions that used the
// storage instead of pulling it from under their uncommitted rows.
static bool open_storage(Relations *rels, LOCKMODE lockmode, bool skip_if_busy)
{
    for (;;)
    {
        if (!OidIsValid(storage_oids.heap) && !look_up_storage())
            return false;
        Oid heap = storage_oids.heap;
        if (skip_if_busy)
        {
            if (!ConditionalLockRelationOid(heap, lockmode))
                return false;
        }
        else
            LockRelationOid(heap, lockmode);
        if (storage_oids.heap == heap)
            break;
        // The lock brought an invalidation: the OID may be stale.  Look again.
        UnlockRelationOid(heap, lockmode);
    }
    rels->lockmode = lockmode;
    rels->heap = table_open(storage_oids.heap, NoLock);
    if (RelationGetDescr(rels->heap)->natts != column_count)
        ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                        errmsg("table \"idempotency.keys\" has %d columns, expected %d",
                               RelationGetDescr(rels->heap)->natts, (int)column_count),
                        errhint("The extension's storage was changed by hand; reinstall the "
                                "extension.")));
    rels->pkey = index_open(storage_oids.pkey, lockmode);
    rels->expiry_oid = storage_oids.expiry;
    rels->expiry = nullptr;
    return true;
}

Relations open_relations(LOCKMODE lockmode)
{
    Relations rels;
    if (!open_storage(&rels, lockmode, false))
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                        errmsg("relation \"idempotency.keys\" does not exist"),
                        errhint("Run CREATE EXTENSION idempotency in this database.")));
    return rels;
}

bool try_open_relations(Relations *rels, LOCKMODE lockmode)
{
    return open_storage(rels, lockmode, true);
}

// The expiry index is needed only to write or to expire, not to replay.
static Relation expiry_index(Relations &rels)
{
    if (rels.expiry == nullptr)
        rels.expiry = index_open(rels.expiry_oid, rels.lockmode);
    return rels.expiry;
}

void close_relations(const Relations &rels)
{
    if (rels.expiry != nullptr)
        index_close(rels.expiry, NoLock);
    index_close(rels.pkey, NoLock);
    table_close(rels.heap, NoLock);
}

// Copies the slot's tuple out of the shared buffer and decodes it.
static void decode_version(TupleTableSlot *slot, Record &record)
{
    HeapTuple copy = ExecCopySlotHeapTuple(slot);
    heap_deform_tuple(copy, slot->tts_tupleDescriptor, record.values, record.nulls);
    record.tid = copy->t_self;
    record.found = true;
}

static Record not_found()
{
    Record record;
    record.found = false;
    record.writer = Writer::committed;
    record.writer_xid = InvalidTransactionId;
    return record;
}

// Decodes the version in `slot`, which satisfied the dirty `snapshot`, unless
// another transaction is replacing or deleting it (then false).
// HeapTupleSatisfiesDirty left that transaction in snapshot->xmax, and the
// inserter still in progress, if any, in snapshot->xmin.
static bool decode_newest(TupleTableSlot *slot, Snapshot snapshot, Record &record)
{
    if (TransactionIdIsValid(snapshot->xmax))
        return false;
    decode_version(slot, record);
    if (TransactionIdIsValid(snapshot->xmin))
    {
        record.writer = Writer::other;
        record.writer_xid = snapshot->xmin;
        return true;
    }
    bool should_free;
    HeapTuple tuple = ExecFetchSlotHeapTuple(slot, false, &should_free);
    record.writer = TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetXmin(tuple->t_data))
                        ? Writer::self
                        : Writer::committed;
    return true;
}

// Scans the primary key for (scope, key).  With a dirty snapshot an index scan
// returns every version that is committed-live or touched by a transaction in
// progress (including each member of a HOT chain); the newest is the one no
// other transaction is deleting or replacing.
static Record scan_key(const Relations &rels, Datum scope, Datum key, Snapshot snapshot)
{
    Record record = not_found();
    ScanKeyData keys[2];
    // ScanKeyInit compares with the "C" collation, which the key columns use.
    ScanKeyInit(&keys[0], col_scope + 1, BTEqualStrategyNumber, F_TEXTEQ, scope);
    ScanKeyInit(&keys[1], col_key + 1, BTEqualStrategyNumber, F_TEXTEQ, key);
    IndexScanDesc scan = index_beginscan(rels.heap, rels.pkey, snapshot, 2, 0);
    index_rescan(scan, keys, 2, nullptr, 0);
    TupleTableSlot *slot = table_slot_create(rels.heap, nullptr);
    const bool dirty = snapshot->snapshot_type == SNAPSHOT_DIRTY;

    while (index_getnext_slot(scan, ForwardScanDirection, slot))
    {
        if (!dirty)
        {
            decode_version(slot, record);
            break;
        }
        if (decode_newest(slot, snapshot, record))
            break;
    }
    ExecDropSingleTupleTableSlot(slot);
    index_endscan(scan);
    return record;
}

Record read_latest(const Relations &rels, Datum scope, Datum key)
{
    SnapshotData dirty;
    InitDirtySnapshot(dirty);
    return scan_key(rels, scope, key, &dirty);
}

Record read_visible(const Relations &rels, Datum scope, Datum key, Snapshot snapshot)
{
    return scan_key(rels, scope, key, snapshot);
}

// The version this backend wrote last, and in which transaction.  complete,
// checkpoint and release nearly always follow the caller's own begin in the
// same transaction; fetching that version by its address saves them an index
// scan.  fetch_own_claim checks that it is still the live version of the key,
// written by this transaction.  The address stays valid while the
// transaction lasts: the version cannot be pruned while live, and the table
// cannot be truncated under the lock the writer took -- unless the writer was
// a subtransaction that rolled back, which releases its locks, so any
// rollback to a savepoint forgets the address.
struct LastWrite
{
    Oid heap;
    LocalTransactionId lxid;
    ItemPointerData tid;
};
static LastWrite last_write = {InvalidOid, InvalidLocalTransactionId, {}};

static LocalTransactionId current_lxid()
{
#if PG_VERSION_NUM >= 170000
    return MyProc->vxid.lxid;
#else
    return MyProc->lxid;
#endif
}

static void forget_last_write(SubXactEvent event, SubTransactionId, SubTransactionId, void *)
{
    if (event == SUBXACT_EVENT_ABORT_SUB)
        last_write.heap = InvalidOid;
}

static void remember_write(const Relations &rels, const ItemPointerData &tid)
{
    static bool callback_registered = false;
    if (!callback_registered)
    {
        RegisterSubXactCallback(forget_last_write, nullptr);
        callback_registered = true;
    }
    last_write = {RelationGetRelid(rels.heap), current_lxid(), tid};
}

// Key columns compare byte-wise, as the primary key does ("C" collation).
static bool same_text(Datum a, Datum b)
{
    return DatumGetBool(DirectFunctionCall2Coll(texteq, C_COLLATION_OID, a, b));
}

bool fetch_own_claim(const Relations &rels, Datum scope, Datum key, Record *record)
{
    if (last_write.heap != RelationGetRelid(rels.heap) || last_write.lxid != current_lxid())
        return false;
    ItemPointerData tid = last_write.tid;
    // Prune the page first, as an index scan would: completions leave a dead
    // version behind, and pruning it on the page new claims go to keeps the
    // table compact (without it, twice the size).
    Buffer buffer = ReadBuffer(rels.heap, ItemPointerGetBlockNumber(&tid));
    heap_page_prune_opt(rels.heap, buffer);
    ReleaseBuffer(buffer);

    SnapshotData dirty;
    InitDirtySnapshot(dirty);
    TupleTableSlot *slot = table_slot_create(rels.heap, nullptr);
    *record = not_found();
    bool hit = table_tuple_fetch_row_version(rels.heap, &tid, &dirty, slot) &&
               decode_newest(slot, &dirty, *record) && record->writer == Writer::self &&
               same_text(record->values[col_scope], scope) &&
               same_text(record->values[col_key], key);
    ExecDropSingleTupleTableSlot(slot);
    return hit;
}

static void insert_index_entry(Relation index, Relation heap, Datum *values, ItemPointer tid,
                               IndexUniqueCheck check, bool unchanged)
{
    bool nulls[2] = {false, false};
    index_insert(index, values, nulls, tid, heap, check, unchanged, BuildIndexInfo(index));
}

// New index entries for a version that is not heap-only.  The primary key
// checks uniqueness as a safety net under the key lock.
static void insert_index_entries(Relations &rels, HeapTuple tuple, const Record &record,
                                 bool is_update)
{
    Datum pkey_values[2] = {record.values[col_scope], record.values[col_key]};
    insert_index_entry(rels.pkey, rels.heap, pkey_values, &tuple->t_self, UNIQUE_CHECK_YES,
                       is_update);
    Datum expiry_values[1] = {record.values[col_expires_at]};
    insert_index_entry(expiry_index(rels), rels.heap, expiry_values, &tuple->t_self, UNIQUE_CHECK_NO,
                       false);
}

void insert_record(Relations &rels, Record &record)
{
    HeapTuple tuple = heap_form_tuple(RelationGetDescr(rels.heap), record.values, record.nulls);
    heap_insert(rels.heap, tuple, GetCurrentCommandId(true), 0, nullptr);
    insert_index_entries(rels, tuple, record, false);
    record.tid = tuple->t_self;
    record.found = true;
    record.writer = Writer::self;
    remember_write(rels, record.tid);
    // Lets a later call in the same statement update the row we just wrote.
    CommandCounterIncrement();
}

TM_Result update_record(Relations &rels, Record &record)
{
    HeapTuple tuple = heap_form_tuple(RelationGetDescr(rels.heap), record.values, record.nulls);
    TM_FailureData failure;
    LockTupleMode lockmode;
    TM_Result result = heap_update(rels.heap, &record.tid, tuple, GetCurrentCommandId(true),
                                   InvalidSnapshot, true, &failure, &lockmode);
    switch (result)
    {
        case TM_Ok:
            break;
        case TM_Deleted:
        case TM_Updated:
            return result;
        default:
            elog(ERROR, "unexpected heap_update result %d on idempotency.keys", (int)result);
    }
    if (!HeapTupleIsHeapOnly(tuple))
        insert_index_entries(rels, tuple, record, true);
    record.tid = tuple->t_self;
    record.writer = Writer::self;
    remember_write(rels, record.tid);
    CommandCounterIncrement();
    return TM_Ok;
}

// Only the fields Record::expired reads, straight from the buffer: the
// sweep looks at many rows and deletes most of them, so it copies none.
static void decode_expiry_fields(TupleTableSlot *slot, Record &record)
{
    constexpr Column fields[] = {col_expires_at, col_status, col_lease_expires_at};
    for (Column column : fields)
        record.values[column] = slot_getattr(slot, column + 1, &record.nulls[column]);
    record.tid = slot->tts_tid;
}

int64 expire(Relations &rels, TimestampTz now, int64 max_rows)
{
    ScanKeyData bound;
    ScanKeyInit(&bound, 1, BTLessEqualStrategyNumber, F_TIMESTAMPTZ_LE, TimestampTzGetDatum(now));
    IndexScanDesc scan = index_beginscan(rels.heap, expiry_index(rels), GetActiveSnapshot(), 1, 0);
    index_rescan(scan, &bound, 1, nullptr, 0);
    TupleTableSlot *slot = table_slot_create(rels.heap, nullptr);
    CommandId command = GetCurrentCommandId(true);
    int64 deleted = 0;
    while ((max_rows < 0 || deleted < max_rows) &&
           index_getnext_slot(scan, ForwardScanDirection, slot))
    {
        Record record;
        decode_expiry_fields(slot, record);
        if (!record.expired(now))
            continue; // an unfinished claim whose lease still runs
        TM_FailureData failure;
        if (heap_delete(rels.heap, &record.tid, command, InvalidSnapshot, false, &failure, false) ==
            TM_Ok)
            deleted++;
        CHECK_FOR_INTERRUPTS();
    }
    ExecDropSingleTupleTableSlot(slot);
    index_endscan(scan);
    return deleted;
}

static void key_locktag(LOCKTAG *tag, Datum scope, Datum key)
{
    const text *s = DatumGetTextPP(scope);
    const text *k = DatumGetTextPP(key);
    uint32 scope_hash =
        hash_bytes(reinterpret_cast<const unsigned char *>(VARDATA_ANY(s)), VARSIZE_ANY_EXHDR(s));
    uint64 hash = hash_bytes_extended(reinterpret_cast<const unsigned char *>(VARDATA_ANY(k)),
                                      VARSIZE_ANY_EXHDR(k), scope_hash);
    SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32)(hash >> 32), (uint32)hash, key_lock_tag);
}

bool lock_key(Datum scope, Datum key, bool wait)
{
    LOCKTAG tag;
    key_locktag(&tag, scope, key);
    return LockAcquire(&tag, ExclusiveLock, false, !wait) != LOCKACQUIRE_NOT_AVAIL;
}

void unlock_key(Datum scope, Datum key)
{
    LOCKTAG tag;
    key_locktag(&tag, scope, key);
    LockRelease(&tag, ExclusiveLock, false);
}

void wait_for_transaction(TransactionId xid)
{
    XactLockTableWait(xid, nullptr, nullptr, XLTW_None);
}

bool wait_for_transaction(TransactionId xid, int timeout_ms)
{
    // The lock manager can only give up on a wait by raising lock_timeout's
    // error, so the wait runs in a subtransaction that absorbs exactly that
    // error, as a PL/pgSQL exception block would.
    MemoryContext context = CurrentMemoryContext;
    ResourceOwner owner = CurrentResourceOwner;
    int saved_lock_timeout = LockTimeout;
    volatile bool ended = true;
    BeginInternalSubTransaction(nullptr);
    MemoryContextSwitchTo(context);
    PG_TRY();
    {
        LockTimeout = timeout_ms;
        XactLockTableWait(xid, nullptr, nullptr, XLTW_None);
        LockTimeout = saved_lock_timeout;
        ReleaseCurrentSubTransaction();
    }
    PG_CATCH();
    {
        LockTimeout = saved_lock_timeout;
        MemoryContextSwitchTo(context);
        ErrorData *error = CopyErrorData();
        FlushErrorState();
        RollbackAndReleaseCurrentSubTransaction();
        MemoryContextSwitchTo(context);
        CurrentResourceOwner = owner;
        if (error->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
            ReThrowError(error);
        FreeErrorData(error);
        ended = false;
    }
    PG_END_TRY();
    MemoryContextSwitchTo(context);
    CurrentResourceOwner = owner;
    return ended;
}

} // namespace idempotency::store
