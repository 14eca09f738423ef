// Storage of idempotency keys: see store.hpp for the concurrency scheme and
// the caches.
#include "store.hpp"
#include "boundary.hpp"
#include "citus_placement.hpp"
#include "compat.hpp"
#include "key_digest.hpp"
#include "stats.hpp"
#include "tenants.hpp"

extern "C"
{
#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/skey.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation_d.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "executor/executor.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "nodes/execnodes.h"
#include "nodes/makefuncs.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "storage/sinval.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/fmgrprotos.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/uuid.h"
}

namespace idempotency::store
{

// locktag_field4 of key locks.  PostgreSQL's own advisory lock functions use 1
// and 2, so key locks never collide with an application's advisory locks; in
// pg_locks they show as locktype 'advisory' with objsubid 18756.
constexpr uint16 key_lock_tag = 0x4944;

// ---------------------------------------------------------------------------
// Finding and locking the storage
// ---------------------------------------------------------------------------

// The OID of idempotency.keys; see "Backend-local caches" in store.hpp.
static Oid heap_oid_cache = InvalidOid;

static void forget_layout(Oid relid);

// The table by name, without a privilege check on the private schema:
// EXECUTE on the functions is the gate.
static Oid look_up_heap()
{
    Oid namespace_oid = get_namespace_oid("idempotency", true);
    return OidIsValid(namespace_oid) ? get_relname_relid("keys", namespace_oid) : InvalidOid;
}

// Finds and locks idempotency.keys.  The lock is held to the end of the
// transaction, as for any table a statement reads or writes: DDL such as
// DROP EXTENSION then waits for transactions that used the storage instead
// of pulling it from under their uncommitted rows.
static Oid lock_heap(LOCKMODE lockmode, bool skip_if_busy)
{
    watch_relation_invalidations();
    for (;;)
    {
        uint64 invalidations = SharedInvalidMessageCounter;
        Oid heap = heap_oid_cache;
        if (!OidIsValid(heap) && !OidIsValid(heap = look_up_heap()))
            return InvalidOid;
        if (skip_if_busy)
        {
            if (!ConditionalLockRelationOid(heap, lockmode))
                return InvalidOid;
        }
        else
            LockRelationOid(heap, lockmode);
        // Locking processed pending invalidations.  If any arrived since the
        // OID was read, the name may stand for another relation by now.
        if (invalidations == SharedInvalidMessageCounter || look_up_heap() == heap)
        {
            heap_oid_cache = heap;
            return heap;
        }
        UnlockRelationOid(heap, lockmode);
        heap_oid_cache = InvalidOid;
    }
}

// A change a DBA made to the table that the functions cannot work with: the
// hint says how to undo it, keeping the keys.
[[noreturn]] static void report_changed_storage(const char *problem, const char *repair)
{
    ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                    errmsg("table \"idempotency.keys\" %s", problem),
                    errdetail("The extension's storage was changed by hand."),
                    errhint("%s", repair), errhidestmt(true)));
}

// Opens and locks the primary key.  Its OID comes from the table's relcache
// entry, and locking the index may process invalidations that change it (a
// REINDEX CONCURRENTLY swapping in its new index), so it is checked again
// after the lock.
static Relation open_primary_key(Relation heap, LOCKMODE lockmode)
{
    for (;;)
    {
        Oid pkey_oid = compat::primary_key_index(heap);
        if (!OidIsValid(pkey_oid))
            report_changed_storage(
                "has no primary key",
                get_attnum(RelationGetRelid(heap), "digest") != InvalidAttrNumber
                    ? "Add it back: ALTER TABLE idempotency.keys ADD PRIMARY KEY (digest)."
                : get_attnum(RelationGetRelid(heap), "tenant") != InvalidAttrNumber
                    ? "Add it back: ALTER TABLE idempotency.keys ADD PRIMARY KEY (tenant, scope, "
                      "key)."
                    : "Add it back: ALTER TABLE idempotency.keys ADD PRIMARY KEY (scope, key).");
        Relation pkey = index_open(pkey_oid, lockmode);
        if (compat::primary_key_index(heap) == pkey_oid)
            return pkey;
        index_close(pkey, lockmode);
    }
}

// The columns' names, in Column order.
constexpr const char *column_names[column_count] = {"scope",
                                                    "key",
                                                    "request",
                                                    "created_at",
                                                    "ttl",
                                                    "expires_at",
                                                    "status",
                                                    "attempt",
                                                    "lease_expires_at",
                                                    "completed_at",
                                                    "response_status",
                                                    "recovery_point",
                                                    "response_body",
                                                    "response_headers",
                                                    "tenant",
                                                    "lease",
                                                    "response_body_bytes",
                                                    "response_body_omitted",
                                                    "claim_data",
                                                    "sweep_at",
                                                    "shard_key",
                                                    "digest"};

// Finds the columns of storage->heap by name.  A table as the install and
// update scripts make it has them in order, which one pass over its
// attributes confirms (no name compared: a call does this every time).
// Otherwise (ALTER TABLE ... ADD COLUMN x, DROP COLUMN x leaves a dropped
// attribute, counted in natts; a column dropped and added back comes last)
// each live attribute is looked up by name.  A column the functions do not
// know is refused, since their writes would leave it NULL, and so is a
// missing one; the hints undo the change without losing a key.
static void map_columns(Storage *storage)
{
    TupleDesc desc = RelationGetDescr(storage->heap);
    int natts = desc->natts;
    bool in_order = natts == column_count || natts == columns_0_4_0 || natts == columns_0_2_0 ||
                    natts == columns_0_1_0;
    for (int i = 0; i < natts && in_order; i++)
        in_order = !TupleDescAttr(desc, i)->attisdropped;
    for (int column = 0; column < column_count; column++)
        storage->attnums[column] = in_order && column < natts ? AttrNumber(column + 1) : 0;
    storage->in_order = in_order;
    if (in_order)
    {
        storage->columns = natts;
        return;
    }
    for (int i = 0; i < natts; i++)
    {
        Form_pg_attribute attribute = TupleDescAttr(desc, i);
        if (attribute->attisdropped)
            continue;
        int column = 0;
        while (column < column_count && strcmp(NameStr(attribute->attname), column_names[column]))
            column++;
        if (column == column_count)
            report_changed_storage(psprintf("has a column \"%s\" that the extension does not write",
                                            NameStr(attribute->attname)),
                                   psprintf("Drop it: ALTER TABLE idempotency.keys DROP COLUMN %s.",
                                            quote_identifier(NameStr(attribute->attname))));
        storage->attnums[column] = attribute->attnum;
    }
    int columns = 0;
    while (columns < column_count && storage->attnums[columns] != 0)
        columns++;
    for (int column = columns; column < column_count; column++)
        if (storage->attnums[column] != 0 || (columns != column_count && columns != columns_0_4_0 &&
                                              columns != columns_0_2_0 && columns != columns_0_1_0))
            report_changed_storage(
                psprintf("has no column \"%s\"", column_names[columns]),
                "Add it back with the type the extension's install script gives it (ALTER TABLE "
                "idempotency.keys ADD COLUMN ...): the functions find their columns by name.");
    storage->columns = columns;
}

// The layout of the table: that of this version, of 0.4.0, 0.2.0 or 0.1.0
// (see columns_0_4_0, _0_2_0 and _0_1_0).  The primary key is the digest
// from 0.5.0 on -- with Citus (digest, scope) or (digest, shard_key), as
// Citus takes the distribution column in every unique constraint; the
// scope is a function of the key, so the digest still identifies a record.
// Before, it is on (tenant, scope, key) or (scope, key) -- or (tenant,
// scope, key, shard_key) with Citus.
static void check_layout(Storage *storage)
{
    map_columns(storage);
    int key_columns = IndexRelationGetNumberOfKeyAttributes(storage->pkey);
    const int16 *indexed = storage->pkey->rd_index->indkey.values;
    if (storage->has(col_digest))
    {
        bool with_distribution_column =
            key_columns == 2 && (indexed[1] == storage->attnum(col_scope) ||
                                 indexed[1] == storage->attnum(col_shard_key));
        if ((key_columns != 1 && !with_distribution_column) ||
            indexed[0] != storage->attnum(col_digest))
            report_changed_storage("has a primary key on other columns than (digest)",
                                   "Recreate the primary key on (digest).");
        return;
    }
    bool with_shard_key = key_columns == 4 && storage->has(col_shard_key) &&
                          indexed[3] == storage->attnum(col_shard_key);
    if (key_columns != (storage->has(col_tenant) ? 3 : 2) && !with_shard_key)
        report_changed_storage(psprintf("has a primary key of %d columns", key_columns),
                               "Recreate the primary key on (tenant, scope, key), or (scope, "
                               "key) before the extension's update to 0.2.0.");
}

// The layout of the relation of keys opened last: its primary key and its
// column map, as open_primary_key and check_layout found them; see
// "Backend-local caches" in store.hpp.  Forgotten by a relcache
// invalidation of the relation or of its primary key (or of all relations):
// every change that could make it stale -- ALTER TABLE, an index added,
// dropped or swapped in by REINDEX CONCURRENTLY, the primary key recreated --
// sends one for the table.
struct LayoutCache
{
    Oid heap; // InvalidOid: nothing cached
    Oid pkey;
    int columns;
    bool in_order;
    AttrNumber attnums[column_count];
};
static LayoutCache layout_cache = {InvalidOid, InvalidOid, 0, false, {}};
static uint64 layout_invalidations = 0;

static void forget_layout(Oid relid)
{
    if (relid == InvalidOid || relid == layout_cache.heap || relid == layout_cache.pkey)
        layout_cache.heap = InvalidOid;
    layout_invalidations++;
}

// The storage's one relcache callback, for every cache of this layer (a
// backend has ten such callbacks for all its libraries: Citus takes several).
static void forget_relation(Datum, Oid relid)
{
    if (relid == InvalidOid || relid == heap_oid_cache)
        heap_oid_cache = InvalidOid;
    forget_layout(relid);
    forget_secret(relid);
    forget_tenant_numbers(relid);
}

void watch_relation_invalidations()
{
    static bool callback_registered = false;
    if (!callback_registered)
    {
        CacheRegisterRelcacheCallback(forget_relation, (Datum)0);
        callback_registered = true;
    }
}

// The cached layout of `heap_oid`, with its primary key opened and locked:
// false when there is none, or when locking the index processed an
// invalidation (then nothing is left open or cached).  Read into a local
// first: the lock may process invalidations.
static bool open_cached_layout(Storage *storage, Oid heap_oid, LOCKMODE lockmode)
{
    LayoutCache cached = layout_cache;
    if (cached.heap != heap_oid || !caches_on())
        return false;
    uint64 invalidations = layout_invalidations;
    Relation pkey = index_open(cached.pkey, lockmode);
    if (invalidations != layout_invalidations)
    {
        index_close(pkey, lockmode);
        return false;
    }
    storage->pkey = pkey;
    storage->columns = cached.columns;
    storage->in_order = cached.in_order;
    memcpy(storage->attnums, cached.attnums, sizeof cached.attnums);
    return true;
}

// Opens a relation that holds keys, already locked in `lockmode`.  The
// lock taken on the table already processed the invalidations before it.
static void open_locked(Storage *storage, Oid heap_oid, LOCKMODE lockmode)
{
    watch_relation_invalidations();
    storage->heap = table_open(heap_oid, NoLock);
    storage->lockmode = lockmode;
    storage->writes = nullptr;
    if (open_cached_layout(storage, heap_oid, lockmode))
        return;
    uint64 invalidations = layout_invalidations;
    storage->pkey = open_primary_key(storage->heap, lockmode);
    check_layout(storage);
    // Kept only if nothing was invalidated while it was read.
    if (invalidations == layout_invalidations && caches_on())
    {
        layout_cache.heap = heap_oid;
        layout_cache.pkey = RelationGetRelid(storage->pkey);
        layout_cache.columns = storage->columns;
        layout_cache.in_order = storage->in_order;
        memcpy(layout_cache.attnums, storage->attnums, sizeof layout_cache.attnums);
    }
}

// `scope`: the scope whose keys are to be read or written, (Datum)0 for the
// table itself (expiry).  False when the table is missing (or busy); with
// elsewhere_ok, storage->heap is NULL when Citus places the scope's keys on
// another node.
static bool open_storage(Storage *storage, LOCKMODE lockmode, bool skip_if_busy, Datum scope,
                         bool elsewhere_ok = false)
{
    Oid heap_oid = lock_heap(lockmode, skip_if_busy);
    if (!OidIsValid(heap_oid))
        return false;
    // Citus hook: when Citus distributes idempotency.keys, the keys of the
    // scope are in its shard for the scope, which must be placed on this node
    // (else IK005, or elsewhere), locked as Citus's executor locks a shard it
    // writes.  Left as is otherwise -- then a write asks Citus for two-phase
    // commit.  See citus_placement.hpp.
    if (scope != (Datum)0)
        heap_oid = citus_placement::relation_for_scope(heap_oid, scope, lockmode, elsewhere_ok);
    if (!OidIsValid(heap_oid))
    {
        storage->heap = nullptr;
        return true;
    }
    open_locked(storage, heap_oid, lockmode);
    return true;
}

[[noreturn]] static void missing_table()
{
    ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                    errmsg("relation \"idempotency.keys\" does not exist"),
                    errhint("Run CREATE EXTENSION idempotency in this database.")));
}

Storage open(LOCKMODE lockmode, Datum scope)
{
    Storage storage;
    if (!open_storage(&storage, lockmode, false, scope))
        missing_table();
    return storage;
}

bool open_here(LOCKMODE lockmode, Datum scope, Storage *storage)
{
    if (!open_storage(storage, lockmode, false, scope, true))
        missing_table();
    return storage->heap != nullptr;
}

Oid keys_table()
{
    return lock_heap(AccessShareLock, false);
}

bool keys_in_shards()
{
    if (!citus_placement::loaded())
        return false;
    Oid heap = keys_table();
    return OidIsValid(heap) && citus_placement::distributes(heap);
}

Datum tenant_scope(Datum scope)
{
    if (!citus_placement::loaded())
        return scope;
    Oid heap = keys_table();
    return OidIsValid(heap) ? citus_placement::tenant_scope(heap, scope) : scope;
}

Key stored_key(const Storage &storage, const Key &key)
{
    if (storage.has(col_tenant) || !OidIsValid(key.tenant))
        return key;
    const text *scope = DatumGetTextPP(key.scope);
    Datum prefixed = CStringGetTextDatum(
        psprintf("%u/%.*s", key.tenant, int(VARSIZE_ANY_EXHDR(scope)), VARDATA_ANY(scope)));
    return Key{InvalidOid, prefixed, key.key};
}

// ---------------------------------------------------------------------------
// The executor state of writes
// ---------------------------------------------------------------------------

// What the executor's single-row routines need, set up as the logical
// replication apply worker sets it up: an EState with a one-entry range
// table, a ResultRelInfo with every index of the table open, and the AFTER
// trigger queue of a query of its own, fired by close().
struct WriteContext
{
    EState *estate;
    ResultRelInfo *result;
    EPQState epq;
    TupleTableSlot *new_version; // the values to write
    TupleTableSlot *old_version; // only its address: the version to replace
};
// palloc0'd, and gone with its memory context: no constructor or destructor runs.
static_assert(fits_postgres_memory<WriteContext>, "a WriteContext lives in palloc'd memory");

static WriteContext *make_writes(Relation heap)
{
    WriteContext *writes = static_cast<WriteContext *>(palloc0(sizeof(WriteContext)));
    EState *estate = writes->estate = CreateExecutorState();
    RangeTblEntry *rte = makeNode(RangeTblEntry);
    rte->rtekind = RTE_RELATION;
    rte->relid = RelationGetRelid(heap);
    rte->relkind = heap->rd_rel->relkind;
    rte->rellockmode = RowExclusiveLock;
    compat::init_range_table(estate, rte);
    writes->result = makeNode(ResultRelInfo);
    InitResultRelInfo(writes->result, heap, 1, nullptr, 0);
    // As in the apply worker: enough for ExecGetTriggerResultRel to find it.
    estate->es_opened_result_relations =
        lappend(estate->es_opened_result_relations, writes->result);
    estate->es_output_cid = GetCurrentCommandId(true);
    // Every index the table has now, ready ones to be written: the list and
    // the readiness come from the relcache entry under our lock.
    ExecOpenIndices(writes->result, false);
    compat::init_epq(&writes->epq, estate);
    TupleDesc desc = RelationGetDescr(heap);
    writes->new_version = ExecInitExtraTupleSlot(estate, desc, &TTSOpsVirtual);
    writes->old_version = ExecInitExtraTupleSlot(estate, desc, &TTSOpsVirtual);
    AfterTriggerBeginQuery();
    return writes;
}

static WriteContext *start_writes(Storage &storage)
{
    if (storage.writes == nullptr)
        storage.writes = make_writes(storage.heap);
    return storage.writes;
}

static void finish_writes(WriteContext *writes)
{
    AfterTriggerEndQuery(writes->estate);
    EvalPlanQualEnd(&writes->epq);
    ExecCloseIndices(writes->result);
    ExecResetTupleTable(writes->estate->es_tupleTable, false);
    FreeExecutorState(writes->estate);
    pfree(writes);
}

void close(Storage &storage)
{
    if (storage.writes != nullptr)
        finish_writes(storage.writes);
    storage.writes = nullptr;
    index_close(storage.pkey, NoLock);
    table_close(storage.heap, NoLock);
}

// The slot has the table's attributes; each column goes to its own (a
// dropped attribute, or a column an older table lacks, is NULL).  sweep_at
// is NULL since 0.3.0, when expiry stopped indexing records; a table still
// at 0.2.0 requires it, and gets its old default.
static TupleTableSlot *store_values(const Storage &storage, TupleTableSlot *slot,
                                    const Record &record)
{
    ExecClearTuple(slot);
    TupleDesc descriptor = slot->tts_tupleDescriptor;
    if (storage.in_order)
    {
        memcpy(slot->tts_values, record.values, storage.columns * sizeof(Datum));
        memcpy(slot->tts_isnull, record.nulls, storage.columns * sizeof(bool));
    }
    else
    {
        for (int i = 0; i < descriptor->natts; i++)
        {
            slot->tts_values[i] = (Datum)0;
            slot->tts_isnull[i] = true;
        }
        for (int column = 0; column < storage.columns; column++)
        {
            slot->tts_values[storage.attnum(Column(column)) - 1] = record.values[column];
            slot->tts_isnull[storage.attnum(Column(column)) - 1] = record.nulls[column];
        }
    }
    if (storage.has(col_sweep_at))
    {
        int sweep_at = storage.attnum(col_sweep_at) - 1;
        if (TupleDescAttr(descriptor, sweep_at)->attnotnull && slot->tts_isnull[sweep_at])
        {
            slot->tts_values[sweep_at] = TimestampTzGetDatum(DT_NOBEGIN);
            slot->tts_isnull[sweep_at] = false;
        }
    }
    ExecStoreVirtualTuple(slot);
    ItemPointerSetInvalid(&slot->tts_tid);
    return slot;
}

static TupleTableSlot *store_address(TupleTableSlot *slot, const ItemPointerData &tid)
{
    ExecClearTuple(slot);
    ExecStoreAllNullTuple(slot);
    slot->tts_tid = tid;
    return slot;
}

// Runs one write of the executor.  Errors of class 23 (a unique or check
// violation, which a user's index or constraint, or writes that bypass the
// functions, could cause) carry a DETAIL that prints the whole row -- scope,
// key, response: it is replaced, and the statement is kept out of the log,
// as for the extension's own errors.
template <typename Write> static void run_write(Write write)
{
    MemoryContext context = CurrentMemoryContext;
    PG_TRY();
    {
        write();
    }
    PG_CATCH();
    {
        MemoryContextSwitchTo(context);
        ErrorData *error = CopyErrorData();
        if (ERRCODE_TO_CATEGORY(error->sqlerrcode) != ERRCODE_INTEGRITY_CONSTRAINT_VIOLATION)
            PG_RE_THROW();
        FlushErrorState();
        error->detail =
            pstrdup("The values of the row are not shown: they may contain request data.");
        error->hide_stmt = true;
        ReThrowError(error);
    }
    PG_END_TRY();
}

// A BEFORE ROW trigger that returns NULL suppresses the write; the claim or
// response would then silently not exist.
static void check_written(const TupleTableSlot *slot)
{
    if (!ItemPointerIsValid(&slot->tts_tid))
        ereport(ERROR, (errcode(ERRCODE_TRIGGERED_ACTION_EXCEPTION),
                        errmsg("a trigger on table \"idempotency.keys\" suppressed a write"),
                        errhint("Drop BEFORE ROW triggers on the extension's table.")));
}

// ---------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------

// Copies the slot's tuple out of the shared buffer and decodes it; columns
// an older table lacks are NULL.
static void decode_version(const Storage &storage, TupleTableSlot *slot, Record &record)
{
    HeapTuple copy = ExecCopySlotHeapTuple(slot);
    TupleDesc descriptor = slot->tts_tupleDescriptor;
    if (storage.in_order)
        heap_deform_tuple(copy, descriptor, record.values, record.nulls);
    else
    {
        Datum *values = static_cast<Datum *>(palloc(descriptor->natts * sizeof(Datum)));
        bool *nulls = static_cast<bool *>(palloc(descriptor->natts * sizeof(bool)));
        heap_deform_tuple(copy, descriptor, values, nulls);
        for (int column = 0; column < storage.columns; column++)
        {
            record.values[column] = values[storage.attnum(Column(column)) - 1];
            record.nulls[column] = nulls[storage.attnum(Column(column)) - 1];
        }
    }
    for (int column = storage.columns; column < column_count; column++)
        record.set_null(Column(column));
    record.tid = copy->t_self;
    record.found = true;
    record.deferred = false;
    // The table has no CHECK constraints (they cost every write; see the
    // install script): a version this library did not write is refused here.
    if ((record.status() != status_in_progress && record.status() != status_completed) ||
        record.attempt() <= 0)
        ereport(ERROR, (errcode(errcode_invalid_record),
                        errmsg("a record in table \"idempotency.keys\" has an invalid status or "
                               "attempt"),
                        errhint("A row of the extension's storage was changed by hand; correct "
                                "or delete it."),
                        errhidestmt(true)));
}

static Record not_found()
{
    Record record;
    record.found = false;
    record.writer = Writer::committed;
    record.writer_xid = InvalidTransactionId;
    return record;
}

// Who wrote a version that is not another transaction's in progress.
static Writer committed_or_self(TupleTableSlot *slot)
{
    bool should_free;
    HeapTuple tuple = ExecFetchSlotHeapTuple(slot, false, &should_free);
    return TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetXmin(tuple->t_data))
               ? Writer::self
               : Writer::committed;
}

// Decodes the version in `slot`, which satisfied the dirty `snapshot`:
// HeapTupleSatisfiesDirty left the inserter still in progress, if any, in
// snapshot->xmin.  The caller has made sure no transaction is deleting or
// replacing it (snapshot->xmax).
static void decode_newest(const Storage &storage, TupleTableSlot *slot, Snapshot snapshot,
                          Record &record)
{
    decode_version(storage, slot, record);
    if (TransactionIdIsValid(snapshot->xmin))
    {
        record.writer = Writer::other;
        record.writer_xid = snapshot->xmin;
        return;
    }
    record.writer = committed_or_self(slot);
}

// Key columns compare byte-wise, as the "C" collation of their columns does.
static bool same_text(Datum a, Datum b)
{
    const text *x = DatumGetTextPP(a);
    const text *y = DatumGetTextPP(b);
    size_t size = VARSIZE_ANY_EXHDR(x);
    return size == VARSIZE_ANY_EXHDR(y) && memcmp(VARDATA_ANY(x), VARDATA_ANY(y), size) == 0;
}

// Whether a version with these key columns is one of `key`: the full key
// compared after a fetch by digest, which another key may share, or through
// the update chain rather than the index.
static bool is_key(const Storage &storage, Oid tenant, Datum scope, Datum key_text, const Key &key)
{
    return (!storage.has(col_tenant) || tenant == key.tenant) && same_text(scope, key.scope) &&
           same_text(key_text, key.key);
}

static bool is_version_of(const Storage &storage, const Record &record, const Key &key)
{
    return is_key(storage, DatumGetObjectId(record.values[col_tenant]), record.values[col_scope],
                  record.values[col_key], key);
}

// A fetch by digest found another key's version: the two keys' digests are
// equal (key_digest.hpp says how unlikely that is without the secret).  An
// error, never an answer about the other key.
[[noreturn]] static void digest_collision(const Key &key)
{
    ereport(ERROR,
            (errcode(errcode_key_digest_collision),
             errmsg("idempotency key \"%s\" has the digest of another stored key",
                    key_for_message(key.key)),
             errdetail("Keys are stored under a 128-bit digest of their tenant, scope and key; "
                       "the key stored under this one's digest is another."),
             errhint("Send the request with another idempotency key."), errhidestmt(true)));
}

// The key columns of the version in `slot`, checked against `key`: for a
// version the caller does not decode (one being replaced or deleted).
static void check_key_in_slot(const Storage &storage, TupleTableSlot *slot, const Key &key)
{
    bool isnull;
    Oid tenant = storage.has(col_tenant)
                     ? DatumGetObjectId(slot_getattr(slot, storage.attnum(col_tenant), &isnull))
                     : InvalidOid;
    if (!is_key(storage, tenant, slot_getattr(slot, storage.attnum(col_scope), &isnull),
                slot_getattr(slot, storage.attnum(col_key), &isnull), key))
        digest_collision(key);
}

static void check_version_of(const Storage &storage, const Record &record, const Key &key)
{
    if (storage.has(col_digest) && !is_version_of(storage, record, key))
        digest_collision(key);
}

// The version that replaces the one at `replaced`, which a transaction still
// in progress is updating, read through the dirty `snapshot` into `record`
// when there is one (of the same key).  A non-HOT update inserts the new
// version into the heap before its index entry, and an index scan reads a
// leaf page's entries at once: a dirty scan can pass the old version without
// meeting the new one, and would answer in_progress without the holder's
// claim, where a moment later it answers with it.  The update chain, which
// PostgreSQL follows as for a TID scan (table_tuple_get_latest_tid), leads
// to it either way.  A version being deleted has no successor: `record`
// stays as it was.
static void read_replacement(const Storage &storage, const Key &key, ItemPointerData replaced,
                             Snapshot snapshot, TupleTableSlot *slot, Record &record)
{
    ItemPointerData newest = replaced;
    TableScanDesc chain = table_beginscan_tid(storage.heap, snapshot);
    table_tuple_get_latest_tid(chain, &newest);
    table_endscan(chain);
    if (ItemPointerEquals(&newest, &replaced) ||
        !table_tuple_fetch_row_version(storage.heap, &newest, snapshot, slot) ||
        TransactionIdIsValid(snapshot->xmax))
        return;
    Record successor = not_found();
    decode_newest(storage, slot, snapshot, successor);
    if (is_version_of(storage, successor, key))
        record = successor;
}

// The scan keys that find `key` in the primary key: its digest, or before
// 0.5.0 its columns (tenant, scope, key), or (scope, key) before 0.2.0;
// ScanKeyInit compares text with the "C" collation, which the columns use.
// 0 when the key can have no digest yet: the database has no secret, or
// its tenant no number (tenants.hpp) -- then no key of it is stored.
static int key_scan_keys(const Storage &storage, const Key &key, ScanKeyData (&keys)[3],
                         pg_uuid_t *digest)
{
    if (storage.has(col_digest))
    {
        if (!key_digest(key.tenant, key.scope, key.key, DigestUse::read, digest))
            return 0;
        ScanKeyInit(&keys[0], 1, BTEqualStrategyNumber, F_UUID_EQ, UUIDPGetDatum(digest));
        return 1;
    }
    int count = 0;
    if (storage.has(col_tenant))
    {
        ScanKeyInit(&keys[count], count + 1, BTEqualStrategyNumber, F_OIDEQ,
                    ObjectIdGetDatum(key.tenant));
        count++;
    }
    ScanKeyInit(&keys[count], count + 1, BTEqualStrategyNumber, F_TEXTEQ, key.scope);
    count++;
    ScanKeyInit(&keys[count], count + 1, BTEqualStrategyNumber, F_TEXTEQ, key.key);
    count++;
    return count;
}

// Scans the primary key for the key (key_scan_keys).  With a dirty snapshot an index scan
// returns every version that is committed-live or touched by a transaction in
// progress (including each member of a HOT chain).  The newest is the one no
// other transaction is deleting or replacing; a replacement comes later in
// the scan, or, not indexed yet, at the end of the update chain
// (read_replacement); when there is none, the version is being deleted (or
// its replacement rolled back after the scan checked it: see Record): the
// key is then held by that transaction.
// *passed_over tells whether an index entry led to no visible version.
static Record scan_key(const Storage &storage, const Key &key, Snapshot snapshot,
                       bool *passed_over = nullptr)
{
    Record record = not_found();
    ScanKeyData keys[3];
    pg_uuid_t digest;
    int count = key_scan_keys(storage, key, keys, &digest);
    if (count == 0)
        return record;
    IndexScanDesc scan = compat::begin_index_scan(storage.heap, storage.pkey, snapshot, count);
    index_rescan(scan, keys, count, nullptr, 0);
    // Made at the first index entry: a new key has none.
    TupleTableSlot *slot = nullptr;
    const bool dirty = snapshot->snapshot_type == SNAPSHOT_DIRTY;
    ItemPointerData replaced; // the last version found being deleted or replaced
    ItemPointerSetInvalid(&replaced);

    // index_getnext_slot's loop, which says nothing of the entries it passes.
    for (;;)
    {
        if (!scan->xs_heap_continue)
        {
            if (index_getnext_tid(scan, ForwardScanDirection) == nullptr)
                break;
            if (dirty)
                pause_for_test(fault_pause_in_read, 18759);
        }
        if (slot == nullptr)
            slot = table_slot_create(storage.heap, nullptr);
        if (!index_fetch_heap(scan, slot))
        {
            if (passed_over != nullptr)
                *passed_over = true;
            continue;
        }
        if (!dirty)
        {
            decode_version(storage, slot, record);
            check_version_of(storage, record, key);
            record.writer = committed_or_self(slot);
            break;
        }
        if (TransactionIdIsValid(snapshot->xmax))
        {
            if (storage.has(col_digest))
                check_key_in_slot(storage, slot, key);
            record.writer = Writer::other;
            record.writer_xid = snapshot->xmax;
            replaced = slot->tts_tid;
            pause_for_test(fault_pause_in_read, 18762);
            continue;
        }
        decode_newest(storage, slot, snapshot, record);
        check_version_of(storage, record, key);
        break;
    }
    if (!record.found && ItemPointerIsValid(&replaced))
        read_replacement(storage, key, replaced, snapshot, slot, record);
    if (slot != nullptr)
        ExecDropSingleTupleTableSlot(slot);
    index_endscan(scan);
    return record;
}

Record read_latest(const Storage &storage, const Key &key)
{
    SnapshotData dirty;
    InitDirtySnapshot(dirty);
    bool passed_over = false;
    Record record = scan_key(storage, key, &dirty, &passed_over);
    if (record.found || record.writer == Writer::other || !passed_over)
        return record;
    // A dirty scan checks each version when it gets to it, not all at one
    // moment: a transaction that replaces the key's only version with one
    // elsewhere (a non-HOT update, under a new index entry) and commits after
    // the scan read the index page but before it checked the old version,
    // leaves the scan with neither -- as if the key were absent, and a claim
    // would follow.  A snapshot taken now sees every commit of that kind,
    // with the version it committed.  (Absent keys, with no index entry,
    // never get here: only keys with versions passed over do.)
    Snapshot latest = RegisterSnapshot(GetLatestSnapshot());
    record = scan_key(storage, key, latest);
    UnregisterSnapshot(latest);
    return record;
}

Record read_visible(const Storage &storage, const Key &key, Snapshot snapshot)
{
    return scan_key(storage, key, snapshot);
}

// The version this backend wrote last, and in which transaction; see
// "Backend-local caches" in store.hpp.  complete, checkpoint and release
// nearly always follow the caller's own begin in the same transaction;
// fetching that version by its address saves them an index scan.  The
// address stays valid while the transaction lasts: the version cannot be
// pruned while live, and the table cannot be rewritten or truncated under the
// lock the writer took -- unless the writer was a subtransaction that rolled
// back, which releases its locks, so any rollback to a savepoint forgets it.
struct LastWrite
{
    Oid heap;
    LocalTransactionId lxid;
    ItemPointerData tid;
};
static LastWrite last_write = {InvalidOid, InvalidLocalTransactionId, {}};

static void forget_last_write(SubXactEvent event, SubTransactionId, SubTransactionId, void *)
{
    if (event == SUBXACT_EVENT_ABORT_SUB)
        last_write.heap = InvalidOid;
}

static void remember_write(const Storage &storage, const ItemPointerData &tid)
{
    static bool callback_registered = false;
    if (!callback_registered)
    {
        RegisterSubXactCallback(forget_last_write, nullptr);
        callback_registered = true;
    }
    last_write = {RelationGetRelid(storage.heap), compat::current_lxid(), tid};
}

bool fetch_last_write(const Storage &storage, const Key &key, Record *record)
{
    if (last_write.heap != RelationGetRelid(storage.heap) ||
        last_write.lxid != compat::current_lxid())
        return false;
    ItemPointerData tid = last_write.tid;
    // Prune the page first, as an index scan would: completions leave a dead
    // version behind, and pruning it on the page new claims go to keeps the
    // table compact (without it, twice the size).
    Buffer buffer = ReadBuffer(storage.heap, ItemPointerGetBlockNumber(&tid));
    heap_page_prune_opt(storage.heap, buffer);
    ReleaseBuffer(buffer);

    SnapshotData dirty;
    InitDirtySnapshot(dirty);
    TupleTableSlot *slot = table_slot_create(storage.heap, nullptr);
    *record = not_found();
    bool hit = table_tuple_fetch_row_version(storage.heap, &tid, &dirty, slot) &&
               !TransactionIdIsValid(dirty.xmax);
    if (hit)
    {
        decode_newest(storage, slot, &dirty, *record);
        hit = record->writer == Writer::self && is_version_of(storage, *record, key);
    }
    ExecDropSingleTupleTableSlot(slot);
    return hit;
}

// ---------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------

static void written(Storage &storage, Record &record, const TupleTableSlot *slot)
{
    check_written(slot);
    record.tid = slot->tts_tid;
    record.found = true;
    record.deferred = false;
    record.writer = Writer::self;
    remember_write(storage, record.tid);
    // Lets a later call in the same statement see and change the row.
    CommandCounterIncrement();
}

// shard_key: NULL while the column is text (no typed Citus tenant), else the
// scope as the column's type -- which the shard of the scope was chosen by.
static void set_shard_key(const Storage &storage, Record &record)
{
    if (!storage.has(col_shard_key))
        return;
    Oid type =
        TupleDescAttr(RelationGetDescr(storage.heap), storage.attnum(col_shard_key) - 1)->atttypid;
    if (type == TEXTOID)
        record.set_null(col_shard_key);
    else
        record.set(col_shard_key, citus_placement::scope_as(type, record.values[col_scope]));
}

// digest: the key's digest for this database (key_digest.hpp), made with
// the database's secret and its tenant's number (assigned by the first key
// of the tenant: tenants.hpp), unless the table is older than 0.5.0.
static void set_digest(const Storage &storage, const Key &key, Record &record)
{
    if (!storage.has(col_digest))
        return;
    pg_uuid_t *digest = static_cast<pg_uuid_t *>(palloc(sizeof(pg_uuid_t)));
    (void)key_digest(key.tenant, key.scope, key.key, DigestUse::write, digest, &storage);
    record.set(col_digest, UUIDPGetDatum(digest));
}

void number_tenant(const Storage &storage, const Key &key)
{
    int32 number;
    if (storage.has(col_digest) && OidIsValid(key.tenant))
        (void)tenant_number(key.tenant, DigestUse::write, &number);
}

void insert_record(Storage &storage, const Key &key, Record &record)
{
    record.set(col_tenant, ObjectIdGetDatum(key.tenant));
    record.set(col_scope, key.scope);
    record.set(col_key, key.key);
    set_shard_key(storage, record);
    set_digest(storage, key, record);
    WriteContext *writes = start_writes(storage);
    TupleTableSlot *slot = store_values(storage, writes->new_version, record);
    run_write([&] { ExecSimpleRelationInsert(writes->result, writes->estate, slot); });
    written(storage, record, slot);
}

Key key_of(const Record &record)
{
    return Key{DatumGetObjectId(record.values[col_tenant]), record.values[col_scope],
               record.values[col_key]};
}

void update_record(Storage &storage, Record &record)
{
    WriteContext *writes = start_writes(storage);
    TupleTableSlot *old_version = store_address(writes->old_version, record.tid);
    TupleTableSlot *slot = store_values(storage, writes->new_version, record);
    run_write([&] {
        ExecSimpleRelationUpdate(writes->result, writes->estate, &writes->epq, old_version, slot);
    });
    written(storage, record, slot);
}

void delete_record(Storage &storage, const Record &record)
{
    WriteContext *writes = start_writes(storage);
    TupleTableSlot *old_version = store_address(writes->old_version, record.tid);
    run_write([&] {
        ExecSimpleRelationDelete(writes->result, writes->estate, &writes->epq, old_version);
    });
    CommandCounterIncrement();
}

bool holds_keys(const Storage &storage)
{
    SnapshotData dirty;
    InitDirtySnapshot(dirty);
    IndexScanDesc scan = compat::begin_index_scan(storage.heap, storage.pkey, &dirty, 0);
    index_rescan(scan, nullptr, 0, nullptr, 0);
    TupleTableSlot *slot = table_slot_create(storage.heap, nullptr);
    bool any = index_getnext_slot(scan, ForwardScanDirection, slot);
    ExecDropSingleTupleTableSlot(slot);
    index_endscan(scan);
    return any;
}

// Locks the newest version at `tid` into `check` for a delete, only if
// nobody holds or is changing it (never waits): false otherwise.
static bool lock_version_if_free(Relation heap, ItemPointer tid, WriteContext *writes,
                                 TupleTableSlot *check)
{
    TM_FailureData failure;
    return table_tuple_lock(heap, tid, GetActiveSnapshot(), check, writes->estate->es_output_cid,
                            LockTupleExclusive, LockWaitSkip, 0, &failure) == TM_Ok;
}

// Deletes the version lock_version_if_free locked into `check`.
static void delete_locked(WriteContext *writes, TupleTableSlot *check)
{
    run_write(
        [&] { ExecSimpleRelationDelete(writes->result, writes->estate, &writes->epq, check); });
}

void delete_rows_if_free(Relation relation, bool (*doomed)(TupleTableSlot *slot, void *arg),
                         void *arg)
{
    WriteContext *writes = make_writes(relation);
    TupleTableSlot *slot = table_slot_create(relation, nullptr);
    TupleTableSlot *check = table_slot_create(relation, nullptr);
    TableScanDesc scan = table_beginscan(relation, GetActiveSnapshot(), 0, nullptr);
    while (table_scan_getnextslot(scan, ForwardScanDirection, slot))
    {
        if (!doomed(slot, arg))
            continue;
        if (lock_version_if_free(relation, &slot->tts_tid, writes, check))
            delete_locked(writes, check);
        CHECK_FOR_INTERRUPTS();
    }
    table_endscan(scan);
    ExecDropSingleTupleTableSlot(check);
    ExecDropSingleTupleTableSlot(slot);
    finish_writes(writes);
    CommandCounterIncrement();
}

void insert_row(Relation relation, Datum *values, bool *nulls)
{
    WriteContext *writes = make_writes(relation);
    TupleTableSlot *slot = writes->new_version;
    ExecClearTuple(slot);
    int natts = slot->tts_tupleDescriptor->natts;
    memcpy(slot->tts_values, values, natts * sizeof(Datum));
    memcpy(slot->tts_isnull, nulls, natts * sizeof(bool));
    ExecStoreVirtualTuple(slot);
    run_write([&] { ExecSimpleRelationInsert(writes->result, writes->estate, slot); });
    check_written(slot);
    finish_writes(writes);
    CommandCounterIncrement();
}

// ---------------------------------------------------------------------------
// Listing a scope
// ---------------------------------------------------------------------------

// From 0.5.0 on: the range of the tenant's and scope's digests, after the
// digest of after_key when it is given (see KeyScan in store.hpp); 0 when
// they can have no key (no secret, or the tenant no number).
static int digest_range_keys(Oid tenant, Datum scope, Datum after_key, ScanKeyData (&keys)[3])
{
    pg_uuid_t *low = static_cast<pg_uuid_t *>(palloc(sizeof(pg_uuid_t)));
    pg_uuid_t *high = static_cast<pg_uuid_t *>(palloc(sizeof(pg_uuid_t)));
    if (!scope_digest_range(tenant, scope, low, high))
        return 0;
    StrategyNumber from = BTGreaterEqualStrategyNumber;
    RegProcedure compare = F_UUID_GE;
    if (after_key != (Datum)0)
    {
        (void)key_digest(tenant, scope, after_key, DigestUse::read, low);
        from = BTGreaterStrategyNumber;
        compare = F_UUID_GT;
    }
    ScanKeyInit(&keys[0], 1, from, compare, UUIDPGetDatum(low));
    ScanKeyInit(&keys[1], 1, BTLessEqualStrategyNumber, F_UUID_LE, UUIDPGetDatum(high));
    return 2;
}

KeyScan begin_key_scan(const Storage &storage, Oid tenant, Datum scope, Datum after_key,
                       Snapshot snapshot)
{
    KeyScan key_scan = {&storage, nullptr, nullptr, tenant, scope};
    ScanKeyData keys[3];
    int count = 0;
    if (storage.has(col_digest))
    {
        count = digest_range_keys(tenant, scope, after_key, keys);
        if (count == 0)
            return key_scan;
    }
    else
    {
        // Before 0.5.0: (tenant, scope, key) order, or (scope, key).
        if (storage.has(col_tenant))
        {
            ScanKeyInit(&keys[count], count + 1, BTEqualStrategyNumber, F_OIDEQ,
                        ObjectIdGetDatum(tenant));
            count++;
        }
        ScanKeyInit(&keys[count], count + 1, BTEqualStrategyNumber, F_TEXTEQ, scope);
        count++;
        if (after_key != (Datum)0)
        {
            ScanKeyInit(&keys[count], count + 1, BTGreaterStrategyNumber, F_TEXT_GT, after_key);
            count++;
        }
    }
    key_scan.scan = compat::begin_index_scan(storage.heap, storage.pkey, snapshot, count);
    index_rescan(key_scan.scan, keys, count, nullptr, 0);
    key_scan.slot = table_slot_create(storage.heap, nullptr);
    return key_scan;
}

bool next_key(KeyScan &scan, Record *record)
{
    if (scan.scan == nullptr)
        return false;
    const Storage &storage = *scan.storage;
    for (;;)
    {
        if (!index_getnext_slot(scan.scan, ForwardScanDirection, scan.slot))
            return false;
        *record = not_found();
        decode_version(storage, scan.slot, *record);
        record->writer = committed_or_self(scan.slot);
        // A digest range holds the tenant's keys of the scope, and those of
        // any tenant and scope whose first four bytes are the same.
        if (!storage.has(col_digest) ||
            (DatumGetObjectId(record->values[col_tenant]) == scan.tenant &&
             same_text(record->values[col_scope], scan.scope)))
            return true;
    }
}

void end_key_scan(KeyScan &scan)
{
    if (scan.scan == nullptr)
        return;
    ExecDropSingleTupleTableSlot(scan.slot);
    index_endscan(scan.scan);
}

// ---------------------------------------------------------------------------
// Expiry
// ---------------------------------------------------------------------------

// Only the fields an Expired test reads, and the tenant, straight from the
// buffer: the sweep looks at many rows and deletes most of them, so it
// copies none.
static void decode_expiry_fields(const Storage &storage, TupleTableSlot *slot, Record &record)
{
    constexpr Column fields[] = {col_expires_at, col_status, col_lease_expires_at};
    for (Column column : fields)
        record.values[column] = slot_getattr(slot, storage.attnum(column), &record.nulls[column]);
    if (storage.has(col_tenant))
        record.values[col_tenant] =
            slot_getattr(slot, storage.attnum(col_tenant), &record.nulls[col_tenant]);
    record.tid = slot->tts_tid;
}

// One sweep: what it deletes with, and how much it may still delete.
struct Sweep
{
    Storage &storage;
    WriteContext *writes;
    TupleTableSlot *slot;  // the version a scan returned
    TupleTableSlot *check; // the same version, locked to delete it
    int64 max_rows;        // < 0: no limit
    int64 deleted;
    Expired expired;
    Oid tenant_checked; // the last tenant orphaned() looked up, and
    bool tenant_exists; //   whether its role exists

    bool has_room() const { return max_rows < 0 || deleted < max_rows; }
};

// From 0.5.0 on, whether the record belongs to a role that no longer
// exists (see delete_orphaned): the primary key no longer starts with the
// tenant, so the heap sweep finds them, as it finds expired keys.
static bool orphaned(Sweep &sweep, const Record &record)
{
    if (!sweep.storage.has(col_digest))
        return false;
    Oid tenant = DatumGetObjectId(record.values[col_tenant]);
    if (!OidIsValid(tenant))
        return false;
    if (tenant != sweep.tenant_checked)
    {
        sweep.tenant_checked = tenant;
        sweep.tenant_exists = SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(tenant));
    }
    return !sweep.tenant_exists;
}

// Deletes the version in sweep.slot if nobody is changing its key or the
// version.  The key lock keeps the functions' writers away.  A tuple lock,
// taken only if it is free at once, checks that the version is still the
// newest one with no transaction changing it, and keeps away writers that
// bypass the key lock (a DBA's DELETE or UPDATE) until the delete: without
// it, such a writer could delete the version between the sweep's check and
// its delete, which then waited for that writer's transaction and failed
// with "tuple concurrently deleted" (XX000).
static void delete_if_idle(Sweep &sweep)
{
    TupleTableSlot *slot = sweep.slot;
    bool isnull;
    const Storage &storage = sweep.storage;
    Key key = {InvalidOid, slot_getattr(slot, storage.attnum(col_scope), &isnull),
               slot_getattr(slot, storage.attnum(col_key), &isnull)};
    if (storage.has(col_tenant))
        key.tenant = DatumGetObjectId(slot_getattr(slot, storage.attnum(col_tenant), &isnull));
    if (!lock_key(key, false))
        return;
    if (lock_version_if_free(sweep.storage.heap, &slot->tts_tid, sweep.writes, sweep.check))
    {
        pause_for_test(fault_pause_before_sweep_delete, 18761);
        delete_locked(sweep.writes, sweep.check);
        sweep.deleted++;
    }
    unlock_key(key);
}

// Blocks a sweep at the worker's pace reads (Pace::share): small tables whole,
// a large one in shares of 1/sweep_shares of its blocks, so that a sweep of
// ten million keys (about 270,000 blocks) reads some 4,500 of them, a few
// milliseconds, and a whole pass takes at most sweep_shares sweeps (ten
// minutes at the default idempotency.expire_interval).  A sweep that finds a
// full batch to delete goes on (see the worker), so a backlog goes at the
// speed of deleting, not of this share.
constexpr BlockNumber sweep_min_blocks = 1024;
constexpr BlockNumber sweep_shares = 60;

static BlockNumber sweep_share_blocks(BlockNumber blocks)
{
    return Max(sweep_min_blocks, blocks / sweep_shares + 1);
}

// Deletes the expired records of blocks [first, end) of the heap, until the
// sweep has no room left.  Returns the block to go on from: the one of the
// first version it did not look at, or `end`.  The records have no index by
// expiry (one would cost every new request its entry and WAL record): the
// heap is read in block order, pages in shared buffers at a few
// microseconds each.
static BlockNumber delete_expired(Sweep &sweep, TimestampTz now, BlockNumber first, BlockNumber end)
{
    ItemPointerData low, high;
    ItemPointerSet(&low, first, FirstOffsetNumber);
    ItemPointerSet(&high, end - 1, MaxOffsetNumber);
    TableScanDesc scan =
        table_beginscan_tidrange(sweep.storage.heap, GetActiveSnapshot(), &low, &high);
    BlockNumber stopped = end;
    while (table_scan_getnextslot_tidrange(scan, ForwardScanDirection, sweep.slot))
    {
        if (!sweep.has_room())
        {
            stopped = ItemPointerGetBlockNumber(&sweep.slot->tts_tid);
            break;
        }
        Record record;
        decode_expiry_fields(sweep.storage, sweep.slot, record);
        if (sweep.expired(record, now) || orphaned(sweep, record))
            delete_if_idle(sweep);
        CHECK_FOR_INTERRUPTS();
    }
    table_endscan(scan);
    return stopped;
}

// Reads `count` blocks from where the last sweep of the relation stopped,
// wrapping around at the end, and keeps where this one stops for the next.
// Rows added past the end meanwhile are the next pass's.  The position is a
// hint and survives what the sweep's transaction does: if that rolls back
// (an error, a cancel), the rows it deleted come back behind the position,
// and the next pass, which wraps around, reads them again; a position past a
// table that shrank (VACUUM, TRUNCATE, pg_repack) restarts at block 0.
static void delete_expired_from_last_stop(Sweep &sweep, TimestampTz now, Pace pace)
{
    Oid relation = RelationGetRelid(sweep.storage.heap);
    BlockNumber blocks = RelationGetNumberOfBlocks(sweep.storage.heap);
    if (blocks == 0)
        return;
    BlockNumber start = stats::sweep_start(relation);
    if (start >= blocks)
        start = 0;
    BlockNumber count =
        pace == Pace::whole_table ? blocks : Min(blocks, sweep_share_blocks(blocks));
    BlockNumber first_end = Min(blocks, start + count);
    BlockNumber stop = delete_expired(sweep, now, start, first_end);
    if (stop == first_end && count > first_end - start)
        stop = delete_expired(sweep, now, 0, count - (first_end - start));
    stats::set_sweep_start(relation, stop);
}

// The first tenant after `after` that has keys, through the primary key
// (tenant first); InvalidOid when none.
static Oid next_tenant(Sweep &sweep, Oid after)
{
    ScanKeyData bound;
    ScanKeyInit(&bound, 1, BTGreaterStrategyNumber, F_OIDGT, ObjectIdGetDatum(after));
    IndexScanDesc scan =
        compat::begin_index_scan(sweep.storage.heap, sweep.storage.pkey, GetActiveSnapshot(), 1);
    index_rescan(scan, &bound, 1, nullptr, 0);
    Oid tenant = InvalidOid;
    bool isnull;
    if (index_getnext_slot(scan, ForwardScanDirection, sweep.slot))
        tenant =
            DatumGetObjectId(slot_getattr(sweep.slot, sweep.storage.attnum(col_tenant), &isnull));
    index_endscan(scan);
    return tenant;
}

// The keys of roles that no longer exist.  Nobody can reach them -- a role
// made later under the same name has another OID -- and deleting them within
// a sweep of the DROP ROLE keeps them out of dumps and away from a role that
// gets the same OID once the OID counter wraps around.  Before 0.5.0, one
// index descent per tenant finds the tenants; from 0.5.0 on, the primary key
// starts with the digest, and the heap sweep finds them (orphaned), within a
// pass of the table, as it finds expired keys.
static void delete_orphaned(Sweep &sweep)
{
    if (!sweep.storage.has(col_tenant) || sweep.storage.has(col_digest))
        return;
    for (Oid tenant = next_tenant(sweep, InvalidOid); sweep.has_room() && OidIsValid(tenant);
         tenant = next_tenant(sweep, tenant))
    {
        if (SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(tenant)))
            continue;
        ScanKeyData owner;
        ScanKeyInit(&owner, 1, BTEqualStrategyNumber, F_OIDEQ, ObjectIdGetDatum(tenant));
        IndexScanDesc scan = compat::begin_index_scan(sweep.storage.heap, sweep.storage.pkey,
                                                      GetActiveSnapshot(), 1);
        index_rescan(scan, &owner, 1, nullptr, 0);
        while (sweep.has_room() && index_getnext_slot(scan, ForwardScanDirection, sweep.slot))
        {
            delete_if_idle(sweep);
            CHECK_FOR_INTERRUPTS();
        }
        index_endscan(scan);
    }
}

int64 expire(Storage &storage, TimestampTz now, int64 max_rows, Pace pace, Expired expired)
{
    Sweep sweep = {storage,
                   start_writes(storage),
                   table_slot_create(storage.heap, nullptr),
                   table_slot_create(storage.heap, nullptr),
                   max_rows,
                   0,
                   expired,
                   InvalidOid,
                   true};
    // A snapshot that sees what this transaction did so far, as the next
    // statement would: a version it replaced earlier in this statement (a
    // takeover) is then gone, and its replacement is not expired.
    CommandCounterIncrement();
    PushCopiedSnapshot(GetActiveSnapshot());
    UpdateActiveSnapshotCommandId();
    delete_expired_from_last_stop(sweep, now, pace);
    delete_orphaned(sweep);
    PopActiveSnapshot();
    ExecDropSingleTupleTableSlot(sweep.check);
    ExecDropSingleTupleTableSlot(sweep.slot);
    return sweep.deleted;
}

bool expire_here(TimestampTz now, int64 max_rows, Pace pace, bool skip_if_busy, Expired expired,
                 int64 *deleted)
{
    Storage storage;
    if (!open_storage(&storage, RowExclusiveLock, skip_if_busy, (Datum)0))
        return false;
    *deleted = expire(storage, now, max_rows, pace, expired);
    Oid table = RelationGetRelid(storage.heap);
    bool numbered_tenants = storage.has(col_digest);
    close(storage);
    // The numbers of dropped roles (tenants.hpp): nobody can reach their
    // keys, and no number is handed out twice.
    if (numbered_tenants)
    {
        PushCopiedSnapshot(GetActiveSnapshot());
        UpdateActiveSnapshotCommandId();
        forget_dropped_tenants(skip_if_busy);
        PopActiveSnapshot();
    }
    // With Citus, the table is an empty shell and the keys are in its shards.
    ListCell *cell;
    foreach (cell, citus_placement::local_shards(table, RowExclusiveLock, skip_if_busy))
    {
        if (max_rows >= 0 && *deleted >= max_rows)
            break;
        open_locked(&storage, lfirst_oid(cell), RowExclusiveLock);
        *deleted += expire(storage, now, max_rows < 0 ? -1 : max_rows - *deleted, pace, expired);
        close(storage);
    }
    return true;
}

// ---------------------------------------------------------------------------
// Key locks and waits
// ---------------------------------------------------------------------------

uint64 key_hash(const Key &key)
{
    const text *s = DatumGetTextPP(key.scope);
    const text *k = DatumGetTextPP(key.key);
    uint32 scope_hash =
        hash_bytes_uint32(key.tenant) ^
        hash_bytes(reinterpret_cast<const unsigned char *>(VARDATA_ANY(s)), VARSIZE_ANY_EXHDR(s));
    return hash_bytes_extended(reinterpret_cast<const unsigned char *>(VARDATA_ANY(k)),
                               VARSIZE_ANY_EXHDR(k), scope_hash);
}

static void key_locktag(LOCKTAG *tag, const Key &key)
{
    uint64 hash = key_hash(key);
    SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32)(hash >> 32), (uint32)hash, key_lock_tag);
}

bool lock_key(const Key &key, bool wait)
{
    LOCKTAG tag;
    key_locktag(&tag, key);
    return LockAcquire(&tag, ExclusiveLock, false, !wait) != LOCKACQUIRE_NOT_AVAIL;
}

void unlock_key(const Key &key)
{
    LOCKTAG tag;
    key_locktag(&tag, key);
    LockRelease(&tag, ExclusiveLock, false);
}

void wait_for_transaction(TransactionId xid)
{
    XactLockTableWait(xid, nullptr, nullptr, XLTW_None);
}

bool wait_for_transaction(TransactionId xid, int timeout_ms)
{
    // The lock manager can only give up on a wait by raising lock_timeout's
    // error, which the subtransaction absorbs.
    int saved_lock_timeout = LockTimeout;
    return absorbing(
        ERRCODE_LOCK_NOT_AVAILABLE,
        [&] {
            LockTimeout = timeout_ms;
            XactLockTableWait(xid, nullptr, nullptr, XLTW_None);
            return true;
        },
        [&] { LockTimeout = saved_lock_timeout; });
}

bool insert_row_unless_present(Relation relation, Datum *values, bool *nulls)
{
    return absorbing(
        ERRCODE_UNIQUE_VIOLATION,
        [&] {
            insert_row(relation, values, nulls);
            return true;
        },
        [] {});
}

Inserted insert_unless_present(Storage &storage, const Key &key, Record &record,
                               bool (*keep)(void *), void *keep_arg)
{
    // The executor state of writes is made outside the subtransaction, whose
    // resource owner would take the relations and slots with it.
    (void)start_writes(storage);
    bool present = true;
    bool kept = absorbing(
        ERRCODE_UNIQUE_VIOLATION,
        [&] {
            insert_record(storage, key, record);
            present = false;
            return keep(keep_arg);
        },
        [] {});
    return kept ? Inserted::kept : present ? Inserted::present : Inserted::undone;
}

} // namespace idempotency::store
