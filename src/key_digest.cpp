// The key digest and the database's secret: see key_digest.hpp.
#include "key_digest.hpp"
#include "boundary.hpp"
#include "citus_placement.hpp"
#include "last_key.hpp"
#include "siphash.hpp"
#include "store.hpp"
#include "tenants.hpp"

extern "C"
{
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "executor/tuptable.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
}

namespace idempotency::store
{

constexpr size_t secret_size = siphash::key_size;

// See "Cache" in key_digest.hpp.
struct SecretCache
{
    Oid relation; // where it was read; InvalidOid: nothing cached
    uint8 bytes[secret_size];
};
static SecretCache secret_cache = {InvalidOid, {}};

// The digest this backend computed last, and of which key: a request's
// begin reads its key and its complete writes it, each with its digest.
// Kept only when made with the cached secret, and forgotten with it.
static LastKey<pg_uuid_t> last_digest;

// The first four bytes of the tenant's scope digested last, kept as
// last_digest is (requests of one scope follow each other).
struct ScopePrefix
{
    uint8 bytes[4];
};
static LastKey<ScopePrefix> last_scope;

void forget_secret(Oid relid)
{
    if (relid == InvalidOid || relid == secret_cache.relation)
    {
        secret_cache.relation = InvalidOid;
        last_digest.forget();
        last_scope.forget();
    }
}

// The relation that holds this node's copy of idempotency.digest_secret,
// locked in `lockmode`: the table itself, or with Citus its reference
// table's placement here.
static Oid secret_relation(LOCKMODE lockmode)
{
    Oid namespace_oid = get_namespace_oid("idempotency", true);
    Oid table =
        OidIsValid(namespace_oid) ? get_relname_relid("digest_secret", namespace_oid) : InvalidOid;
    if (!OidIsValid(table))
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                        errmsg("relation \"idempotency.digest_secret\" does not exist"),
                        errhint("Update the extension: ALTER EXTENSION idempotency UPDATE.")));
    LockRelationOid(table, lockmode);
    return citus_placement::reference_placement(table, lockmode);
}

[[noreturn]] static void invalid_secret(const char *problem)
{
    ereport(ERROR, (errcode(errcode_invalid_record),
                    errmsg("table \"idempotency.digest_secret\" %s", problem),
                    errdetail("It holds one row: the 16-byte secret of the keys' digests."),
                    errhint("Restore the row from a dump of this database: without it no stored "
                            "key is found."),
                    errhidestmt(true)));
}

// Who wrote the secret a read found.
enum class Found
{
    none,
    settled, // committed, and nobody deletes it: may be cached
    own,     // this transaction, still open
    other    // a transaction still in progress: only a read may use it
};

// Reads the secret through a dirty snapshot: a committed row, or one that a
// transaction still in progress wrote -- whose keys, written under it, a
// dirty read of idempotency.keys meets, and must find.
static Found read_secret(Oid relid, uint8 (&secret)[secret_size])
{
    Relation relation = table_open(relid, NoLock);
    AttrNumber column = get_attnum(relid, "secret");
    SnapshotData dirty;
    InitDirtySnapshot(dirty);
    TableScanDesc scan = table_beginscan(relation, &dirty, 0, nullptr);
    TupleTableSlot *slot = table_slot_create(relation, nullptr);
    Found found = Found::none;
    while (table_scan_getnextslot(scan, ForwardScanDirection, slot))
    {
        if (found != Found::none)
            invalid_secret("has more than one row");
        bool isnull;
        Datum value = slot_getattr(slot, column, &isnull);
        const bytea *bytes = isnull ? nullptr : DatumGetByteaPP(value);
        if (bytes == nullptr || VARSIZE_ANY_EXHDR(bytes) != secret_size)
            invalid_secret("has a row that is not 16 bytes");
        memcpy(secret, VARDATA_ANY(bytes), secret_size);
        bool should_free;
        HeapTuple tuple = ExecFetchSlotHeapTuple(slot, false, &should_free);
        found =
            TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetXmin(tuple->t_data)) ? Found::own
            : TransactionIdIsValid(dirty.xmin) || TransactionIdIsValid(dirty.xmax) ? Found::other
                                                                                   : Found::settled;
    }
    ExecDropSingleTupleTableSlot(slot);
    table_endscan(scan);
    table_close(relation, NoLock);
    return found;
}

// Makes the secret, unless a transaction that held the lock before made it.
// The lock conflicts with every writer of the table, and with itself: after
// it, no other transaction is writing a secret.  A secret is made only for
// an empty `keys` (when given): keys stored without theirs would never be
// found again, and claimed anew.
static void make_secret(uint8 (&secret)[secret_size], const Storage *keys)
{
    if (RecoveryInProgress() || XactReadOnly)
        ereport(ERROR,
                (errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
                 errmsg("cannot make the secret of the keys' digests in a read-only transaction"),
                 errdetail("The first key written in a database makes it."), errhidestmt(true)));
    Oid relid = secret_relation(ShareRowExclusiveLock);
    if (read_secret(relid, secret) != Found::none)
        return;
    if (keys != nullptr && holds_keys(*keys))
        ereport(ERROR,
                (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                 errmsg("table \"idempotency.digest_secret\" is empty, and "
                        "\"idempotency.keys\" is not"),
                 errdetail("Stored keys are found by a digest made with the secret the table "
                           "held; a new secret would make them unreachable."),
                 errhint("Restore the table's row from a dump of this database."),
                 errhidestmt(true)));
    if (!pg_strong_random(secret, secret_size))
        ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
                        errmsg("could not generate the secret of the keys' digests")));
    bytea *value = static_cast<bytea *>(palloc(VARHDRSZ + secret_size));
    SET_VARSIZE(value, VARHDRSZ + secret_size);
    memcpy(VARDATA(value), secret, secret_size);
    Relation relation = table_open(relid, NoLock);
    int natts = RelationGetDescr(relation)->natts;
    Datum *values = static_cast<Datum *>(palloc0(natts * sizeof(Datum)));
    bool *nulls = static_cast<bool *>(palloc(natts * sizeof(bool)));
    for (int i = 0; i < natts; i++)
        nulls[i] = true;
    AttrNumber column = get_attnum(relid, "secret");
    values[column - 1] = PointerGetDatum(value);
    nulls[column - 1] = false;
    insert_row(relation, values, nulls);
    table_close(relation, NoLock);
}

// The secret, from the cache or the table; false when there is none and
// `use` is read.  A write never uses a secret that another transaction
// still in progress wrote (it may roll back): make_secret waits for it.
static bool database_secret(DigestUse use, uint8 (&secret)[secret_size], const Storage *keys)
{
    if (OidIsValid(secret_cache.relation) && caches_on())
    {
        memcpy(secret, secret_cache.bytes, secret_size);
        return true;
    }
    watch_relation_invalidations();
    Oid relid = secret_relation(AccessShareLock);
    Found found = read_secret(relid, secret);
    if (found == Found::settled && caches_on())
    {
        // Locking the relation processed invalidations; none can arrive
        // between the read and here.
        secret_cache.relation = relid;
        memcpy(secret_cache.bytes, secret, secret_size);
    }
    if (found == Found::settled || found == Found::own ||
        (found == Found::other && use == DigestUse::read))
        return true;
    if (use == DigestUse::read)
        return false;
    make_secret(secret, keys);
    return true;
}

// Appends to a buffer that starts on the stack and moves to palloc'd memory
// when a long scope and key do not fit.
struct Input
{
    uint8 *data;
    size_t size;
    size_t capacity;

    void append(const void *bytes, size_t n)
    {
        if (size + n > capacity)
        {
            size_t grown = Max(capacity * 2, size + n);
            uint8 *moved = static_cast<uint8 *>(palloc(grown));
            memcpy(moved, data, size);
            data = moved;
            capacity = grown;
        }
        memcpy(data + size, bytes, n);
        size += n;
    }
    void append_u32(uint32 value)
    {
        uint8 le[4] = {uint8(value), uint8(value >> 8), uint8(value >> 16), uint8(value >> 24)};
        append(le, 4);
    }
};

// The first four bytes: a tenant's scope's range.
static void scope_prefix(const uint8 (&secret)[secret_size], int32 tenant, const text *scope,
                         uint8 *out)
{
    // Kept only when made with the cached secret, as last_digest is.
    bool cacheable = OidIsValid(secret_cache.relation) && caches_on() &&
                     memcmp(secret, secret_cache.bytes, secret_size) == 0;
    ScopePrefix prefix;
    if (cacheable && last_scope.find(tenant, scope, nullptr, &prefix))
    {
        memcpy(out, prefix.bytes, 4);
        return;
    }
    uint8 stack[256];
    Input input = {stack, 0, sizeof stack};
    uint8 tag = 0x01;
    input.append(&tag, 1);
    input.append_u32(uint32(tenant));
    input.append(VARDATA_ANY(scope), VARSIZE_ANY_EXHDR(scope));
    uint64 hash = siphash::hash64(secret, input.data, input.size);
    for (int i = 0; i < 4; i++)
        out[i] = uint8(hash >> (56 - 8 * i));
    if (cacheable)
    {
        memcpy(prefix.bytes, out, 4);
        last_scope.remember(tenant, scope, nullptr, prefix);
    }
    else
        last_scope.forget();
}

// Whether the digest memo may serve: only digests made with the cached
// secret are kept, and none while keys are made to collide.
static bool digest_memo_on()
{
    return OidIsValid(secret_cache.relation) && caches_on() && injected_fault != fault_weak_digest;
}

bool key_digest(Oid tenant_role, Datum scope_datum, Datum key_datum, DigestUse use,
                pg_uuid_t *digest, const Storage *keys)
{
    int32 tenant;
    if (!tenant_number(tenant_role, use, &tenant))
        return false;
    const text *scope = DatumGetTextPP(scope_datum);
    const text *key_text = DatumGetTextPP(key_datum);
    if (digest_memo_on() && last_digest.find(tenant, scope, key_text, digest))
        return true;
    uint8 secret[secret_size];
    if (!database_secret(use, secret, keys))
        return false;
    scope_prefix(secret, tenant, scope, digest->data);

    uint8 stack[512];
    Input input = {stack, 0, sizeof stack};
    uint8 tag = 0x02;
    input.append(&tag, 1);
    input.append_u32(uint32(tenant));
    input.append_u32(uint32(VARSIZE_ANY_EXHDR(scope)));
    input.append(VARDATA_ANY(scope), VARSIZE_ANY_EXHDR(scope));
    input.append(VARDATA_ANY(key_text), VARSIZE_ANY_EXHDR(key_text));
    uint8 wide[16];
    siphash::hash128(secret, input.data, input.size, wide);
    memcpy(digest->data + 4, wide, 12);
    // idempotency.inject_fault = weak_digest, a test's way to make keys of
    // one scope collide: 16 digests per scope, so that any 17 keys of a
    // scope have two that share one.
    if (unlikely(injected_fault == fault_weak_digest))
    {
        digest->data[4] &= 0xF0;
        memset(digest->data + 5, 0, 11);
    }
    if (digest_memo_on())
        last_digest.remember(tenant, scope, key_text, *digest);
    else
        last_digest.forget();
    return true;
}

bool scope_digest_range(Oid tenant_role, Datum scope, pg_uuid_t *low, pg_uuid_t *high)
{
    int32 tenant;
    uint8 secret[secret_size];
    if (!tenant_number(tenant_role, DigestUse::read, &tenant) ||
        !database_secret(DigestUse::read, secret, nullptr))
        return false;
    scope_prefix(secret, tenant, DatumGetTextPP(scope), low->data);
    memcpy(high->data, low->data, 4);
    memset(low->data + 4, 0x00, 12);
    memset(high->data + 4, 0xFF, 12);
    return true;
}

} // namespace idempotency::store
