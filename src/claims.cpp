// The claim protocol; see claims.hpp for the invariant and why each rule
// keeps it.  The rule a piece of code keeps is named in its comment.
#include "claims.hpp"
#include "boundary.hpp"
#include "module.hpp"
#include "stats.hpp"
#include "unsettled.hpp"

extern "C"
{
#include "access/xact.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lock.h"
#include "storage/lwlock.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/snapmgr.h"
}

namespace idempotency::claims
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

// Who holds a deferred claim (rule O).
struct Owner
{
    TransactionId xid; // the (sub)transaction that made the claim
    TransactionId top; // its top-level transaction

    bool operator==(const Owner &other) const { return xid == other.xid && top == other.top; }
};

// What another transaction needs to answer as it would for the claim's row.
struct Entry
{
    Tag tag; // the hash key: first
    Owner owner;
    RequestHash request;
    TimestampTz created_at;
    TimestampTz expires_at;
    TimestampTz lease_expires_at;
};

// This transaction's record of its deferred claim of a key (rule 1), with
// all the claim's row needs.
struct OwnClaim
{
    Tag tag;
    uint32 hash;
    Owner owner;
    SubTransactionId made_in;
    SubTransactionId written_in; // InvalidSubTransactionId while not written
    RequestHash request;
    TimestampTz created_at;
    TimestampTz expires_at;
    TimestampTz sweep_at;
    TimestampTz lease_expires_at;
    Interval ttl;
    Interval lease;

    bool written() const { return written_in != InvalidSubTransactionId; }
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

// A copy of the entry of `tag`, if there is one; taken under the partition
// lock, judged (rule O) after it is let go.
static bool copy_entry(const Tag &tag, uint32 hash, Entry *copy)
{
    LWLock *lock = partition_lock(hash);
    LWLockAcquire(lock, LW_SHARED);
    auto *entry =
        static_cast<Entry *>(hash_search_with_hash_value(table, &tag, hash, HASH_FIND, nullptr));
    if (entry != nullptr)
        *copy = *entry;
    LWLockRelease(lock);
    return entry != nullptr;
}

// Rule O: live while its owner is in progress, as the procarray says now.
static bool live(const Entry &entry)
{
    return TransactionIdIsInProgress(entry.owner.xid);
}

enum class Published
{
    yes,
    no_room, // no free slot: write the claim instead
    held     // a live entry is there (rule P): not overwritten
};

// Rule P: puts `claim`'s entry in the table, over no entry or a dead one.
// The caller holds the key lock, so nobody else publishes this key
// meanwhile: an entry found can only go away (its owner removing it), never
// change hands.  Whether it is dead is judged without the partition lock
// (the procarray has locks of its own); under the lock, the entry is taken
// only if it is still the one judged, else answered as a holder.
static Published publish_entry(const OwnClaim &claim, Entry *holder)
{
    Entry judged;
    bool was_there = copy_entry(claim.tag, claim.hash, &judged);
    if (was_there && live(judged))
    {
        *holder = judged;
        return Published::held;
    }
    LWLock *lock = partition_lock(claim.hash);
    LWLockAcquire(lock, LW_EXCLUSIVE);
    auto *entry = static_cast<Entry *>(
        hash_search_with_hash_value(table, &claim.tag, claim.hash, HASH_FIND, nullptr));
    if (entry != nullptr && !(was_there && entry->owner == judged.owner))
    {
        *holder = *entry;
        LWLockRelease(lock);
        return Published::held;
    }
    if (entry == nullptr)
    {
        // A new entry takes a slot: at most max_deferred_claims are in use.
        bool found;
        if (pg_atomic_fetch_add_u32(in_use, 1) < uint32(settings::max_deferred_claims))
            entry = static_cast<Entry *>(hash_search_with_hash_value(
                table, &claim.tag, claim.hash, HASH_ENTER_NULL, &found));
        if (entry == nullptr)
        {
            pg_atomic_fetch_sub_u32(in_use, 1);
            LWLockRelease(lock);
            return Published::no_room;
        }
    }
    entry->owner = claim.owner;
    entry->request = claim.request;
    entry->created_at = claim.created_at;
    entry->expires_at = claim.expires_at;
    entry->lease_expires_at = claim.lease_expires_at;
    LWLockRelease(lock);
    return Published::yes;
}

// Rule C: removes the entry of `claim` if `claim` still owns it.
static void remove_entry(const OwnClaim &claim)
{
    LWLock *lock = partition_lock(claim.hash);
    LWLockAcquire(lock, LW_EXCLUSIVE);
    auto *entry = static_cast<Entry *>(
        hash_search_with_hash_value(table, &claim.tag, claim.hash, HASH_FIND, nullptr));
    if (entry != nullptr && entry->owner == claim.owner)
    {
        hash_search_with_hash_value(table, &claim.tag, claim.hash, HASH_REMOVE, nullptr);
        pg_atomic_fetch_sub_u32(in_use, 1);
    }
    LWLockRelease(lock);
}

// ---------------------------------------------------------------------------
// This transaction's own records
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

static int find_own_index(const Tag &tag)
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

// What every deferred claim's row says: an in-progress claim, attempt 1.
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

// Another transaction's live claim, as a reader answers it.
static store::Record holder_record(const store::Key &key, const Entry &entry)
{
    store::Record record = claim_record(key, entry.request, entry.created_at, entry.expires_at,
                                        entry.lease_expires_at);
    record.writer = store::Writer::other;
    record.writer_xid = entry.owner.xid;
    return record;
}

// Writes the rows of the claims that have none yet, through the store as
// any write; the AFTER triggers those writes queue for the end of the
// transaction are fired here, since the commit has fired its own already.
static bool write_unwritten(bool at_commit)
{
    bool any = false;
    for (int i = 0; i < own_count && !any; i++)
        any = !own[i].written();
    if (!any)
        return false;
    bool snapshot_pushed = !ActiveSnapshotSet();
    if (snapshot_pushed)
        PushActiveSnapshot(GetTransactionSnapshot());
    for (int i = 0; i < own_count; i++)
    {
        if (own[i].written())
            continue;
        store::Key key = key_of(own[i]);
        // With Citus, each scope's keys are in that scope's shard.
        store::Storage storage = store::open(RowExclusiveLock, key.scope);
        store::Record record = own_record(own[i], key);
        store::insert_record(storage, key, record);
        store::close(storage);
        own[i].written_in = GetCurrentSubTransactionId();
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
            // before anything is written for it.  In autocommit, the
            // statement being committed is the caller's, with its data.
            (void)errors_without_request_data(
                [](FunctionCallInfo) {
                    unsettled::refuse();
                    return BoolGetDatum(write_unwritten(true)); // rule C
                },
                nullptr);
            break;
        case XACT_EVENT_COMMIT:
        case XACT_EVENT_ABORT:
        case XACT_EVENT_PREPARE:
            remove_all_own(); // rule C
            break;
        default:
            break;
    }
}

// idempotency.inject_fault = pause_at_subtransaction_abort, a superuser's
// test hook: holds the rollback of a subtransaction here -- after it is
// marked aborted, before this module's callback has done anything -- while
// another session holds pg_advisory_lock(pause_lock_key).  The pause is an
// ordinary lock wait, which the isolation tester sees as such; tests look at
// the keys of the paused transaction in that window (rule L).
static void pause_for_test()
{
    constexpr uint64 pause_lock_key = 18756;
    LOCKTAG tag;
    // As pg_advisory_lock(bigint) tags it.
    SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, uint32(pause_lock_key >> 32), uint32(pause_lock_key),
                         1);
    (void)LockAcquire(&tag, ShareLock, false, false);
    LockRelease(&tag, ShareLock, false);
}

// A rolled-back subtransaction takes the claims it made with it, and the
// rows it wrote: subtransaction ids grow, so those of it and its children are
// the ids from its own on.  The entry of a claim whose row rolled back stays
// (rule L).
static void on_subtransaction_event(SubXactEvent event, SubTransactionId subxact, SubTransactionId,
                                    void *)
{
    if (event != SUBXACT_EVENT_ABORT_SUB)
        return;
    if (unlikely(injected_fault == fault_pause_at_subtransaction_abort))
        pause_for_test();
    for (int i = own_count - 1; i >= 0; i--)
    {
        if (own[i].made_in >= subxact)
            remove_own(i);
        else if (own[i].written() && own[i].written_in >= subxact)
            own[i].written_in = InvalidSubTransactionId;
    }
}

// Rule X: at backend exit, whatever the path to it.
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

// Fills the own record of `record`, a fresh claim of `key` as begin filled it.
static void make_own(OwnClaim &claim, const Tag &tag, const store::Record &record)
{
    claim.tag = tag;
    claim.hash = tag_hash(&tag, sizeof(Tag));
    claim.owner = Owner{GetCurrentTransactionId(), GetTopTransactionId()};
    claim.made_in = GetCurrentSubTransactionId();
    claim.written_in = InvalidSubTransactionId;
    claim.request = *datum_get_request_hash(record.values[store::col_request]);
    claim.created_at = DatumGetTimestampTz(record.values[store::col_created_at]);
    claim.expires_at = DatumGetTimestampTz(record.values[store::col_expires_at]);
    claim.sweep_at = DatumGetTimestampTz(record.values[store::col_sweep_at]);
    claim.lease_expires_at = DatumGetTimestampTz(record.values[store::col_lease_expires_at]);
    claim.ttl = *DatumGetIntervalP(record.values[store::col_ttl]);
    claim.lease = *DatumGetIntervalP(record.values[store::col_lease]);
}

// Whether a fresh claim of `key` may be deferred (see "Which claims are
// deferred" in claims.hpp); fills its tag when it may.
static bool qualifies(const store::Storage &storage, const store::Key &key,
                      const store::Record &record, Tag *tag)
{
    if (table == nullptr || !storage.has(store::col_sweep_at) ||
        !record.nulls[store::col_claim_data] || !make_tag(key, tag))
        return false;
    if (find_own_index(*tag) >= 0)
        return false; // rule 1
    if (own_count == own_claims_max)
    {
        stats::add(stats::deferred_fallbacks);
        return false;
    }
    return true;
}

// ---------------------------------------------------------------------------
// The interface
// ---------------------------------------------------------------------------

store::Record read_latest(const store::Storage &storage, const store::Key &key)
{
    Tag tag;
    if (table != nullptr && make_tag(key, &tag))
    {
        int index = own_count > 0 ? find_own_index(tag) : -1;
        if (index >= 0 && !own[index].written())
            return own_record(own[index], key);
        // Once written, this transaction's row speaks for its own claim.
        Entry entry;
        if (index < 0 && pg_atomic_read_u32(in_use) > 0 &&
            copy_entry(tag, tag_hash(&tag, sizeof(Tag)), &entry) && live(entry) &&
            !TransactionIdIsCurrentTransactionId(entry.owner.xid))
            return holder_record(key, entry);
    }
    return store::read_latest(storage, key);
}

store::Record read_visible(const store::Storage &storage, const store::Key &key,
                           Snapshot snapshot)
{
    Tag tag;
    if (own_count > 0 && make_tag(key, &tag))
    {
        int index = find_own_index(tag);
        if (index >= 0 && !own[index].written())
            return own_record(own[index], key);
    }
    return store::read_visible(storage, key, snapshot);
}

bool find_own(const store::Storage &storage, const store::Key &key, store::Record *record)
{
    Tag tag;
    if (own_count > 0 && make_tag(key, &tag))
    {
        int index = find_own_index(tag);
        if (index >= 0 && !own[index].written())
        {
            *record = own_record(own[index], key);
            return true;
        }
    }
    return store::fetch_last_write(storage, key, record);
}

bool claim_absent(store::Storage &storage, const store::Key &key, store::Record &record,
                  bool deferrable)
{
    Tag tag;
    if (deferrable && qualifies(storage, key, record, &tag))
    {
        register_callbacks();
        OwnClaim &claim = own[own_count];
        make_own(claim, tag, record);
        Entry holder;
        switch (publish_entry(claim, &holder))
        {
            case Published::yes:
                own_count++;
                stats::add(stats::deferred_claims);
                record.found = true;
                record.writer = store::Writer::self;
                record.deferred = true;
                return true;
            case Published::held:
                record = holder_record(key, holder);
                return false;
            case Published::no_room:
                stats::add(stats::deferred_fallbacks);
                break;
        }
    }
    store::insert_record(storage, key, record);
    return true;
}

// Records that this transaction's deferred claim of the record's key has its
// row from now on, in the current subtransaction.
static void note_written(const store::Record &record)
{
    Tag tag;
    store::Key key = store::key_of(record);
    if (!make_tag(key, &tag))
        return;
    int index = find_own_index(tag);
    if (index >= 0 && !own[index].written())
        own[index].written_in = GetCurrentSubTransactionId();
}

void write(store::Storage &storage, store::Record &record)
{
    if (!record.deferred)
    {
        store::update_record(storage, record);
        return;
    }
    store::insert_record(storage, store::key_of(record), record);
    note_written(record);
}

void remove(store::Storage &storage, const store::Record &record)
{
    store::Record row = record;
    if (record.deferred)
    {
        store::insert_record(storage, store::key_of(row), row);
        note_written(row);
    }
    store::delete_record(storage, row);
}

bool write_all()
{
    return own_count > 0 && write_unwritten(false);
}

} // namespace idempotency::claims
