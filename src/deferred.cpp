// Deferred claims; see deferred.hpp for why each rule holds.
#include "deferred.hpp"
#include "claims.hpp"
#include "module.hpp"
#include "stats.hpp"

extern "C"
{
#include "access/xact.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/snapmgr.h"
}

namespace idempotency::deferred
{

// A key's identity in the shared table, which every database shares: the
// database, the tenant, then the scope's and the key's bytes, zero-padded so
// that whole tags compare with memcmp.
struct Tag
{
    Oid database;
    Oid tenant;
    uint16 scope_bytes;
    uint16 key_bytes;
    char bytes[key_bytes_max];
};

// What another transaction needs to answer as it would for the claim's row.
struct Entry
{
    Tag tag; // the hash key: first
    TransactionId xid;
    bool written; // the row exists: readers go to the table
    RequestHash request;
    TimestampTz created_at;
    TimestampTz expires_at;
    TimestampTz lease_expires_at;
};

// One of this transaction's deferred claims, with all its row needs.
struct OwnClaim
{
    Tag tag;
    uint32 hash;
    TransactionId xid;
    SubTransactionId made_in;
    SubTransactionId written_in; // InvalidSubTransactionId while not written
    RequestHash request;
    TimestampTz created_at;
    TimestampTz expires_at;
    TimestampTz sweep_at;
    TimestampTz lease_expires_at;
    Interval ttl;
    Interval lease;
};

// Lock partitions of the shared table (a power of two, as dynahash wants).
constexpr int partitions = 16;
constexpr const char *table_name = "idempotency deferred claims";
constexpr const char *count_name = "idempotency deferred claims in use";
// A partitioned dynahash gives each of its 32 free lists at least one entry,
// so a smaller table holds 32 entries: the limit is kept by `in_use`.
constexpr long dynahash_free_lists = 32;

static HTAB *table = nullptr;              // null unless preloaded with slots
static LWLockPadded *locks = nullptr;      // one per partition
static pg_atomic_uint32 *in_use = nullptr; // entries in `table`, at most max_deferred_claims
static OwnClaim own[own_claims_max];       // this transaction's
static int own_count = 0;

// ---------------------------------------------------------------------------
// Tags and the shared table
// ---------------------------------------------------------------------------

static uint32 tag_hash(const void *key, Size)
{
    const Tag *tag = static_cast<const Tag *>(key);
    return hash_bytes(static_cast<const unsigned char *>(key),
                      int(offsetof(Tag, bytes) + tag->scope_bytes + tag->key_bytes));
}

// False when scope and key are too long to be deferred.
static bool make_tag(const store::Key &key, Tag *tag)
{
    const text *scope = DatumGetTextPP(key.scope);
    const text *name = DatumGetTextPP(key.key);
    size_t scope_bytes = VARSIZE_ANY_EXHDR(scope);
    size_t key_bytes = VARSIZE_ANY_EXHDR(name);
    if (scope_bytes + key_bytes > size_t(key_bytes_max))
        return false;
    memset(tag, 0, sizeof(Tag));
    tag->database = MyDatabaseId;
    tag->tenant = key.tenant;
    tag->scope_bytes = uint16(scope_bytes);
    tag->key_bytes = uint16(key_bytes);
    memcpy(tag->bytes, VARDATA_ANY(scope), scope_bytes);
    memcpy(tag->bytes + scope_bytes, VARDATA_ANY(name), key_bytes);
    return true;
}

static LWLock *partition_lock(uint32 hash)
{
    return &locks[hash % partitions].lock;
}

static long table_entries()
{
    return Max(long(settings::max_deferred_claims), dynahash_free_lists);
}

static Size table_size()
{
    return add_size(hash_estimate_size(table_entries(), sizeof(Entry)), sizeof(pg_atomic_uint32));
}

void reserve_shared_memory()
{
    if (settings::max_deferred_claims == 0)
        return;
    RequestAddinShmemSpace(table_size());
    RequestNamedLWLockTranche(table_name, partitions);
}

void attach_shared_memory()
{
    if (settings::max_deferred_claims == 0)
        return;
    HASHCTL info;
    info.keysize = sizeof(Tag);
    info.entrysize = sizeof(Entry);
    info.hash = tag_hash;
    info.num_partitions = partitions;
    LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
    // A fixed size: a full table refuses new entries (HASH_ENTER_NULL)
    // instead of taking shared memory meant for others.
    table = ShmemInitHash(table_name, table_entries(), table_entries(), &info,
                          HASH_ELEM | HASH_FUNCTION | HASH_PARTITION | HASH_FIXED_SIZE);
    bool found;
    in_use = static_cast<pg_atomic_uint32 *>(
        ShmemInitStruct(count_name, sizeof(pg_atomic_uint32), &found));
    if (!found)
        pg_atomic_init_u32(in_use, 0);
    locks = GetNamedLWLockTranche(table_name);
    LWLockRelease(AddinShmemInitLock);
}

// Removes the shared entry of `claim`, if it is still this transaction's:
// an entry left by a transaction that ended may have been taken over.
static void remove_entry(const OwnClaim &claim)
{
    LWLock *lock = partition_lock(claim.hash);
    LWLockAcquire(lock, LW_EXCLUSIVE);
    auto *entry = static_cast<Entry *>(
        hash_search_with_hash_value(table, &claim.tag, claim.hash, HASH_FIND, nullptr));
    if (entry != nullptr && entry->xid == claim.xid)
    {
        hash_search_with_hash_value(table, &claim.tag, claim.hash, HASH_REMOVE, nullptr);
        pg_atomic_fetch_sub_u32(in_use, 1);
    }
    LWLockRelease(lock);
}

static void set_written(const OwnClaim &claim, bool written)
{
    LWLock *lock = partition_lock(claim.hash);
    LWLockAcquire(lock, LW_EXCLUSIVE);
    auto *entry = static_cast<Entry *>(
        hash_search_with_hash_value(table, &claim.tag, claim.hash, HASH_FIND, nullptr));
    if (entry != nullptr && entry->xid == claim.xid)
        entry->written = written;
    LWLockRelease(lock);
}

// ---------------------------------------------------------------------------
// This transaction's claims
// ---------------------------------------------------------------------------

static void remove_own(int index)
{
    remove_entry(own[index]);
    own[index] = own[--own_count];
}

static void remove_all_own()
{
    while (own_count > 0)
        remove_own(own_count - 1);
}

static int find_own(const Tag &tag)
{
    for (int i = 0; i < own_count; i++)
        if (memcmp(&own[i].tag, &tag, sizeof(Tag)) == 0)
            return i;
    return -1;
}

static Datum text_datum(const char *bytes, int length)
{
    return PointerGetDatum(cstring_to_text_with_len(bytes, length));
}

static store::Key key_of(const OwnClaim &claim)
{
    const Tag &tag = claim.tag;
    return store::Key{tag.tenant, text_datum(tag.bytes, tag.scope_bytes),
                      text_datum(tag.bytes + tag.scope_bytes, tag.key_bytes)};
}

template <typename T> static Datum copy_datum(const T &value)
{
    T *copy = static_cast<T *>(palloc(sizeof(T)));
    *copy = value;
    return PointerGetDatum(copy);
}

// What every claim's row says: an in-progress claim, attempt 1, by `key`.
static store::Record claim_record(const store::Key &key, const RequestHash &request,
                                  TimestampTz created_at, TimestampTz expires_at,
                                  TimestampTz lease_expires_at)
{
    store::Record record;
    record.found = true;
    record.deferred = true;
    ItemPointerSetInvalid(&record.tid);
    for (int column = 0; column < store::column_count; column++)
        record.set_null(store::Column(column));
    record.set(store::col_tenant, ObjectIdGetDatum(key.tenant));
    record.set(store::col_scope, key.scope);
    record.set(store::col_key, key.key);
    record.set(store::col_request, copy_datum(request));
    record.set(store::col_created_at, TimestampTzGetDatum(created_at));
    record.set(store::col_expires_at, TimestampTzGetDatum(expires_at));
    record.set(store::col_status, CharGetDatum(store::status_in_progress));
    record.set(store::col_attempt, Int32GetDatum(1));
    record.set(store::col_lease_expires_at, TimestampTzGetDatum(lease_expires_at));
    return record;
}

// This transaction's claim, complete with what only its writer needs.
static store::Record own_record(const OwnClaim &claim, const store::Key &key)
{
    store::Record record = claim_record(key, claim.request, claim.created_at, claim.expires_at,
                                        claim.lease_expires_at);
    record.writer = store::Writer::self;
    record.writer_xid = InvalidTransactionId;
    record.set(store::col_ttl, copy_datum(claim.ttl));
    record.set(store::col_lease, copy_datum(claim.lease));
    record.set(store::col_sweep_at, TimestampTzGetDatum(claim.sweep_at));
    return record;
}

// Writes the rows of the claims that have none yet, through the store as
// any write; the AFTER triggers those writes queue for the end of the
// transaction are fired here, since the commit has fired its own already.
static bool write_unwritten(bool at_commit)
{
    bool any = false;
    for (int i = 0; i < own_count && !any; i++)
        any = own[i].written_in == InvalidSubTransactionId;
    if (!any)
        return false;
    bool snapshot_pushed = !ActiveSnapshotSet();
    if (snapshot_pushed)
        PushActiveSnapshot(GetTransactionSnapshot());
    for (int i = 0; i < own_count; i++)
    {
        if (own[i].written_in != InvalidSubTransactionId)
            continue;
        store::Key key = key_of(own[i]);
        // With Citus, each scope's keys are in that scope's shard.
        store::Storage storage = store::open(RowExclusiveLock, key.scope);
        store::Record record = own_record(own[i], key);
        store::insert_record(storage, key, record);
        store::close(storage);
        own[i].written_in = GetCurrentSubTransactionId();
        set_written(own[i], true);
    }
    if (at_commit)
        AfterTriggerFireDeferred();
    if (snapshot_pushed)
        PopActiveSnapshot();
    return true;
}

static void on_transaction_event(XactEvent event, void *)
{
    if (own_count == 0)
        return;
    switch (event)
    {
        case XACT_EVENT_PRE_COMMIT:
        case XACT_EVENT_PRE_PREPARE:
            // A claim that must not commit unsettled fails the commit
            // before anything is written for it.
            claims::refuse_unsettled();
            (void)write_unwritten(true);
            break;
        case XACT_EVENT_COMMIT:
        case XACT_EVENT_ABORT:
        case XACT_EVENT_PREPARE:
            remove_all_own();
            break;
        default:
            break;
    }
}

// A rolled-back subtransaction takes the claims it made with it, and the
// rows it wrote: subtransaction ids grow, so those of it and its children are
// the ids from its own on.
static void on_subtransaction_event(SubXactEvent event, SubTransactionId subxact, SubTransactionId,
                                    void *)
{
    if (event != SUBXACT_EVENT_ABORT_SUB)
        return;
    for (int i = own_count - 1; i >= 0; i--)
    {
        if (own[i].made_in >= subxact)
            remove_own(i);
        else if (own[i].written_in != InvalidSubTransactionId && own[i].written_in >= subxact)
        {
            own[i].written_in = InvalidSubTransactionId;
            set_written(own[i], false);
        }
    }
}

// At backend exit, whatever the path to it.
static void on_exit(int, Datum)
{
    remove_all_own();
}

static void register_callbacks()
{
    static bool registered = false;
    if (registered)
        return;
    RegisterXactCallback(on_transaction_event, nullptr);
    RegisterSubXactCallback(on_subtransaction_event, nullptr);
    before_shmem_exit(on_exit, 0);
    registered = true;
}

// ---------------------------------------------------------------------------
// The interface
// ---------------------------------------------------------------------------

bool publish(const store::Storage &storage, const store::Key &key, const store::Record &record)
{
    Tag tag;
    if (table == nullptr || !storage.has(store::col_sweep_at) ||
        !record.nulls[store::col_claim_data] || !make_tag(key, &tag))
        return false;
    if (own_count == own_claims_max)
    {
        stats::add(stats::deferred_fallbacks);
        return false;
    }
    register_callbacks();
    OwnClaim &claim = own[own_count];
    claim.tag = tag;
    claim.hash = tag_hash(&tag, sizeof(Tag));
    claim.xid = GetCurrentTransactionId();
    claim.made_in = GetCurrentSubTransactionId();
    claim.written_in = InvalidSubTransactionId;
    claim.request = *datum_get_request_hash(record.values[store::col_request]);
    claim.created_at = DatumGetTimestampTz(record.values[store::col_created_at]);
    claim.expires_at = DatumGetTimestampTz(record.values[store::col_expires_at]);
    claim.sweep_at = DatumGetTimestampTz(record.values[store::col_sweep_at]);
    claim.lease_expires_at = DatumGetTimestampTz(record.values[store::col_lease_expires_at]);
    claim.ttl = *DatumGetIntervalP(record.values[store::col_ttl]);
    claim.lease = *DatumGetIntervalP(record.values[store::col_lease]);

    // Take a slot first; an entry found below already holds one.
    if (pg_atomic_fetch_add_u32(in_use, 1) >= uint32(settings::max_deferred_claims))
    {
        pg_atomic_fetch_sub_u32(in_use, 1);
        stats::add(stats::deferred_fallbacks);
        return false;
    }
    LWLock *lock = partition_lock(claim.hash);
    LWLockAcquire(lock, LW_EXCLUSIVE);
    bool found;
    auto *entry = static_cast<Entry *>(
        hash_search_with_hash_value(table, &tag, claim.hash, HASH_ENTER_NULL, &found));
    if (entry == nullptr || found)
        pg_atomic_fetch_sub_u32(in_use, 1);
    // An entry found is one whose transaction ended before removing it: the
    // caller read the key under its lock and found nothing live.
    if (entry != nullptr)
    {
        entry->xid = claim.xid;
        entry->written = false;
        entry->request = claim.request;
        entry->created_at = claim.created_at;
        entry->expires_at = claim.expires_at;
        entry->lease_expires_at = claim.lease_expires_at;
    }
    LWLockRelease(lock);
    if (entry == nullptr)
    {
        stats::add(stats::deferred_fallbacks);
        return false;
    }
    own_count++;
    stats::add(stats::deferred_claims);
    return true;
}

bool find(const store::Key &key, bool others, store::Record *record)
{
    // Most reads of a key ask for this transaction's claims only, and it
    // has none: no tag to build.
    if (table == nullptr || (own_count == 0 && !others))
        return false;
    Tag tag;
    if (!make_tag(key, &tag))
        return false;
    int index = find_own(tag);
    if (index >= 0)
    {
        if (own[index].written_in != InvalidSubTransactionId)
            return false;
        *record = own_record(own[index], key);
        return true;
    }
    if (!others)
        return false;
    uint32 hash = tag_hash(&tag, sizeof(Tag));
    Entry copy;
    bool live = false;
    LWLock *lock = partition_lock(hash);
    LWLockAcquire(lock, LW_SHARED);
    auto *entry =
        static_cast<Entry *>(hash_search_with_hash_value(table, &tag, hash, HASH_FIND, nullptr));
    if (entry != nullptr && !entry->written)
    {
        copy = *entry;
        live = true;
    }
    LWLockRelease(lock);
    // An entry whose transaction has ended is on its way out: the table
    // holds the committed row, or nothing after an abort.
    if (!live || !TransactionIdIsInProgress(copy.xid))
        return false;
    *record =
        claim_record(key, copy.request, copy.created_at, copy.expires_at, copy.lease_expires_at);
    record->writer = store::Writer::other;
    record->writer_xid = copy.xid;
    return true;
}

void note_written(const store::Key &key)
{
    Tag tag;
    if (table == nullptr || !make_tag(key, &tag))
        return;
    int index = find_own(tag);
    if (index < 0 || own[index].written_in != InvalidSubTransactionId)
        return;
    own[index].written_in = GetCurrentSubTransactionId();
    set_written(own[index], true);
}

bool write_all()
{
    return own_count > 0 && write_unwritten(false);
}

} // namespace idempotency::deferred
