// Tenant numbers: see tenants.hpp.
#include "tenants.hpp"
#include "boundary.hpp"
#include "compat.hpp"
#include "store.hpp"

extern "C"
{
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/skey.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "commands/sequence.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
}

namespace idempotency::store
{

// ---------------------------------------------------------------------------
// The cache (see "Cache" in tenants.hpp)
// ---------------------------------------------------------------------------

struct CachedTenant
{
    Oid role; // InvalidOid: an empty slot
    int32 number;
    bool own; // assigned by this transaction, not committed: see forget_own_numbers
};
constexpr int cached_tenants = 8;
static CachedTenant tenant_cache[cached_tenants];
static int tenant_cache_next = 0; // the slot a new role takes (round robin)
static bool tenant_cache_has_own = false;
static uint64 tenant_invalidations = 0; // counts every forget, for a read in progress
static Oid tenants_relid = InvalidOid;  // the table the cached numbers were read from

static void forget_all_numbers()
{
    for (CachedTenant &entry : tenant_cache)
        entry.role = InvalidOid;
    tenant_cache_has_own = false;
    tenant_invalidations++;
}

void forget_tenant_numbers(Oid relid)
{
    if (relid == InvalidOid || relid == tenants_relid)
        forget_all_numbers();
}

// A role was created, changed or dropped (pg_authid).
static void forget_numbers_of_roles(Datum, int, uint32)
{
    forget_all_numbers();
}

// The numbers this transaction assigned: gone with the (sub)transaction whose
// INSERT it was, and kept no longer than the transaction in any case.
static void forget_own_numbers()
{
    if (!tenant_cache_has_own)
        return;
    for (CachedTenant &entry : tenant_cache)
        if (entry.own)
            entry.role = InvalidOid;
    tenant_cache_has_own = false;
    tenant_invalidations++;
}

static void forget_own_at_end(XactEvent event, void *)
{
    if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
        event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT ||
        event == XACT_EVENT_PREPARE)
        forget_own_numbers();
}

static void forget_own_at_subabort(SubXactEvent event, SubTransactionId, SubTransactionId, void *)
{
    if (event == SUBXACT_EVENT_ABORT_SUB)
        forget_own_numbers();
}

static void watch_tenant_invalidations()
{
    static bool registered = false;
    if (registered)
        return;
    watch_relation_invalidations(); // store.cpp's, which calls forget_tenant_numbers
    CacheRegisterSyscacheCallback(AUTHOID, forget_numbers_of_roles, (Datum)0);
    RegisterXactCallback(forget_own_at_end, nullptr);
    RegisterSubXactCallback(forget_own_at_subabort, nullptr);
    registered = true;
}

static bool cached_number(Oid role, int32 *number)
{
    if (!caches_on())
        return false;
    for (const CachedTenant &entry : tenant_cache)
        if (entry.role == role)
        {
            *number = entry.number;
            return true;
        }
    return false;
}

// Keeps a number read under the table's lock, unless an invalidation arrived
// since `invalidations` was read (before the lock).
static void remember_number(Oid role, int32 number, bool own, uint64 invalidations)
{
    if (!caches_on() || invalidations != tenant_invalidations)
        return;
    CachedTenant *slot = nullptr;
    for (CachedTenant &entry : tenant_cache)
        if (entry.role == role)
            slot = &entry;
    if (slot == nullptr)
    {
        slot = &tenant_cache[tenant_cache_next];
        tenant_cache_next = (tenant_cache_next + 1) % cached_tenants;
    }
    *slot = {role, number, own};
    tenant_cache_has_own = tenant_cache_has_own || own;
}

// ---------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------

struct Tenants
{
    Relation table;
    Relation by_role; // the unique index on the role
    AttrNumber number_column;
    AttrNumber role_column;
};

static Oid tenants_object(const char *name)
{
    Oid namespace_oid = get_namespace_oid("idempotency", true);
    return OidIsValid(namespace_oid) ? get_relname_relid(name, namespace_oid) : InvalidOid;
}

[[noreturn]] static void missing_tenants()
{
    ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                    errmsg("relation \"idempotency.tenants\" does not exist"),
                    errhint("Update the extension: ALTER EXTENSION idempotency UPDATE.")));
}

// Opens the table and its index on the role in `lockmode` (kept to the end of
// the transaction); false when `skip_if_busy` and the table's lock is not
// free, or when the table is missing and `missing_ok`.
static bool open_tenants(LOCKMODE lockmode, Tenants *tenants, bool missing_ok = false,
                         bool skip_if_busy = false)
{
    Oid table = tenants_object("tenants");
    if (!OidIsValid(table))
    {
        if (missing_ok)
            return false;
        missing_tenants();
    }
    if (skip_if_busy)
    {
        if (!ConditionalLockRelationOid(table, lockmode))
            return false;
    }
    else
        LockRelationOid(table, lockmode);
    // Locking processed the invalidations before it: the name still stands
    // for this table unless it was dropped meanwhile (DROP EXTENSION), which
    // then waited for nothing of ours -- checked again, as the keys' are.
    if (tenants_object("tenants") != table)
    {
        UnlockRelationOid(table, lockmode);
        if (missing_ok)
            return false;
        missing_tenants();
    }
    tenants->table = table_open(table, NoLock);
    tenants_relid = table;
    Oid index = tenants_object("tenants_role_key");
    if (!OidIsValid(index))
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("table \"idempotency.tenants\" has no index \"tenants_role_key\""),
                        errdetail("The extension's storage was changed by hand."),
                        errhint("Add it back: ALTER TABLE idempotency.tenants ADD CONSTRAINT "
                                "tenants_role_key UNIQUE (role).")));
    tenants->by_role = index_open(index, lockmode);
    tenants->number_column = get_attnum(table, "number");
    tenants->role_column = get_attnum(table, "role");
    return true;
}

static void close_tenants(Tenants &tenants)
{
    index_close(tenants.by_role, NoLock);
    table_close(tenants.table, NoLock);
}

// Who wrote the row of a role a read found.
enum class Holder
{
    none,
    settled, // committed, and nobody is deleting it
    own,     // this transaction, still open
    other    // a transaction still in progress inserting or deleting it (xid)
};

struct TenantRow
{
    Holder holder;
    int32 number;
    TransactionId xid;
};

// The role's row through a dirty snapshot: a committed one, or one that a
// transaction still in progress inserted or is deleting.  The unique index
// lets at most one row of a role be live or in the making: a second INSERT
// waits for the first one's transaction, a DELETE is the sweep's (of a role
// that no longer exists).
static TenantRow read_tenant(const Tenants &tenants, Oid role)
{
    SnapshotData dirty;
    InitDirtySnapshot(dirty);
    ScanKeyData key;
    ScanKeyInit(&key, 1, BTEqualStrategyNumber, F_OIDEQ, ObjectIdGetDatum(role));
    IndexScanDesc scan = compat::begin_index_scan(tenants.table, tenants.by_role, &dirty, 1);
    index_rescan(scan, &key, 1, nullptr, 0);
    TupleTableSlot *slot = table_slot_create(tenants.table, nullptr);
    TenantRow row = {Holder::none, 0, InvalidTransactionId};
    if (index_getnext_slot(scan, ForwardScanDirection, slot))
    {
        bool isnull;
        row.number = DatumGetInt32(slot_getattr(slot, tenants.number_column, &isnull));
        bool should_free;
        HeapTuple tuple = ExecFetchSlotHeapTuple(slot, false, &should_free);
        if (TransactionIdIsValid(dirty.xmax))
            row = {Holder::other, row.number, dirty.xmax};
        else if (TransactionIdIsValid(dirty.xmin))
            row = {Holder::other, row.number, dirty.xmin};
        else if (TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetXmin(tuple->t_data)))
            row.holder = Holder::own;
        else
            row.holder = Holder::settled;
    }
    ExecDropSingleTupleTableSlot(slot);
    index_endscan(scan);
    return row;
}

// Inserts the role's row with the next number of the sequence; false, with
// nothing written, when the INSERT violates a unique constraint: another
// transaction committed a row of the role meanwhile (the INSERT waited for
// its end), or a row holds the number (a DBA's, or a restore that left the
// sequence behind; the next try draws the next number).
static bool insert_tenant(const Tenants &tenants, Oid role, int32 *number)
{
    if (RecoveryInProgress() || XactReadOnly)
        ereport(ERROR, (errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
                        errmsg("cannot number a tenant in a read-only transaction"),
                        errdetail("A role's first key stores the role's number in table "
                                  "\"idempotency.tenants\"."),
                        errhidestmt(true)));
    if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(role)))
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                        errmsg("role with OID %u does not exist", role), errhidestmt(true)));
    Oid sequence = tenants_object("tenant_numbers");
    if (!OidIsValid(sequence))
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                        errmsg("sequence \"idempotency.tenant_numbers\" does not exist"),
                        errhint("Update the extension: ALTER EXTENSION idempotency UPDATE.")));
    // The caller need not be allowed to use the sequence: EXECUTE on the
    // functions is the gate, as for the keys.
    *number = int32(nextval_internal(sequence, false));
    int natts = RelationGetDescr(tenants.table)->natts;
    Datum *values = static_cast<Datum *>(palloc0(natts * sizeof(Datum)));
    bool *nulls = static_cast<bool *>(palloc(natts * sizeof(bool)));
    for (int i = 0; i < natts; i++)
        nulls[i] = true;
    values[tenants.number_column - 1] = Int32GetDatum(*number);
    nulls[tenants.number_column - 1] = false;
    values[tenants.role_column - 1] = ObjectIdGetDatum(role);
    nulls[tenants.role_column - 1] = false;
    return insert_row_unless_present(tenants.table, values, nulls);
}

bool tenant_number(Oid role, DigestUse use, int32 *number)
{
    if (!OidIsValid(role))
    {
        *number = 0;
        return true;
    }
    if (cached_number(role, number))
        return true;
    watch_tenant_invalidations();
    for (;;)
    {
        uint64 invalidations = tenant_invalidations;
        Tenants tenants;
        (void)open_tenants(use == DigestUse::write ? RowExclusiveLock : AccessShareLock, &tenants);
        TenantRow row = read_tenant(tenants, role);
        if (row.holder == Holder::none && use == DigestUse::write)
        {
            pause_for_test(fault_pause_before_numbering, 18765);
            if (insert_tenant(tenants, role, &row.number))
                row.holder = Holder::own;
            else
            {
                close_tenants(tenants);
                CHECK_FOR_INTERRUPTS();
                continue;
            }
        }
        close_tenants(tenants);
        switch (row.holder)
        {
            case Holder::none:
                return false;
            case Holder::settled:
            case Holder::own:
                remember_number(role, row.number, row.holder == Holder::own, invalidations);
                *number = row.number;
                return true;
            case Holder::other:
                if (use == DigestUse::read)
                {
                    *number = row.number;
                    return true;
                }
                // Its transaction may still roll back, and take the number
                // with it: wait, then read again.
                wait_for_transaction(row.xid);
                CHECK_FOR_INTERRUPTS();
                break;
        }
    }
}

// ---------------------------------------------------------------------------
// The sweep
// ---------------------------------------------------------------------------

static bool role_dropped(TupleTableSlot *slot, void *arg)
{
    const Tenants *tenants = static_cast<const Tenants *>(arg);
    bool isnull;
    Oid role = DatumGetObjectId(slot_getattr(slot, tenants->role_column, &isnull));
    return !SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(role));
}

void forget_dropped_tenants(bool skip_if_busy)
{
    Tenants tenants;
    if (!open_tenants(RowExclusiveLock, &tenants, true, skip_if_busy))
        return;
    if (RelationGetNumberOfBlocks(tenants.table) > 0)
        delete_rows_if_free(tenants.table, role_dropped, &tenants);
    close_tenants(tenants);
}

} // namespace idempotency::store
