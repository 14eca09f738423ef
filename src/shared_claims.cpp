// The shared claims table and deferred claims; see claims.hpp for the
// invariant and why each rule keeps it.  The rule a piece of code keeps is
// named in its comment.
#include "shared_claims.hpp"
#include "boundary.hpp"
#include "last_key.hpp"
#include "settings.hpp"
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
#include "utils/memutils.h"
#include "utils/snapmgr.h"
}

namespace idempotency::claims
{

// A key's identity in the shared table, which every database shares: the
// database, the tenant and a 128-bit hash of scope and key (see "Entries
// are found by a 128-bit hash" in claims.hpp).
struct Tag
{
    Oid database;
    Oid tenant;
    uint64 hash[2];
};
// The shared table's key: dynahash copies it with memcpy and, with no match
// function given, compares keys with memcmp, so a padding byte (whose value
// nothing sets) could make one key two.
static_assert(fits_postgres_memory<Tag> && std::has_unique_object_representations_v<Tag>,
              "a Tag is a memcmp-compared dynahash key: plain bytes, no padding");

// Who holds a claim (rule O).
struct Owner
{
    TransactionId xid; // the (sub)transaction that made the claim
    TransactionId top; // its top-level transaction

    bool operator==(const Owner &other) const { return xid == other.xid && top == other.top; }
};

// What another transaction needs to answer for the claim (as_held).
struct Entry
{
    Tag tag; // the hash key: first
    Owner owner;
    // The claim's row was written by the claiming subtransaction right after
    // the entry: the row says all the entry says and more (claim data), and
    // lives exactly as long (rule O), so readers read it instead.
    bool row_written;
    RequestHash request;
    TimestampTz created_at;
};
// In shared memory (a dynahash entry), which hands it out uninitialised, is
// never destroyed and is copied out by readers (live_other_entry).
static_assert(fits_postgres_memory<Entry>, "an Entry lives in shared memory");

// This transaction's record of its fresh claim of a key (rule 1), with all
// a deferred claim's row needs.
struct OwnClaim
{
    Tag tag;
    Owner owner;
    Datum scope; // text, in TopTransactionContext
    Datum key;
    SubTransactionId made_in;
    SubTransactionId written_in; // InvalidSubTransactionId while not written
    RequestHash request;
    TimestampTz created_at;
    TimestampTz expires_at;
    TimestampTz lease_expires_at;
    Interval ttl;
    Interval lease;

    bool written() const { return written_in != InvalidSubTransactionId; }
};
// An array in TopMemoryContext, grown with repalloc (which copies bytes) and
// forgotten at transaction end without a destructor call.
static_assert(fits_postgres_memory<OwnClaim>, "an OwnClaim lives in palloc'd memory");

// Lock partitions of the shared table (a power of two, as dynahash wants),
// and the buckets of rule A: each bucket belongs to the partition whose lock
// also covers its entries (bucket % partitions == partition).
constexpr int partitions = 16;
constexpr int buckets = 1024;
static_assert(buckets % partitions == 0, "a bucket lies in one partition");
// Slots one transaction may hold; its later fresh claims take the key lock.
constexpr int own_claims_max = 64;
constexpr const char *table_name = "idempotency claims";
constexpr const char *state_name = "idempotency claims state";
// A partitioned dynahash gives each of its 32 free lists at least one entry,
// so a smaller table holds 32 entries: the limit is kept by `in_use`.
constexpr long dynahash_free_lists = 32;

struct SharedState
{
    pg_atomic_uint32 in_use; // entries in `table`, at most max_deferred_claims
    pg_atomic_uint64 generations[buckets];
};
// From ShmemInitStruct: raw shared memory, initialised by hand
// (attach_shared_memory), never destroyed.
static_assert(fits_postgres_memory<SharedState>, "SharedState lives in shared memory");

static HTAB *table = nullptr;         // null unless preloaded with slots
static LWLockPadded *locks = nullptr; // one per partition
static SharedState *shared = nullptr;
static OwnClaim *own = nullptr; // this transaction's, in TopMemoryContext
static int own_count = 0;
static int own_capacity = 0;

// ---------------------------------------------------------------------------
// Tags and the shared table
// ---------------------------------------------------------------------------

static uint32 tag_hash(const void *key, Size)
{
    return uint32(static_cast<const Tag *>(key)->hash[0]);
}

// The tag made last, and of which key (backend-local): a request's begin
// tags its key to read and to claim it, its complete to find its claim.
// Safe: a tag is a function of the key and this backend's database alone,
// so the memo is never stale.
static LastKey<Tag> last_tag;

static Tag make_tag(const store::Key &key)
{
    const text *scope = DatumGetTextPP(key.scope);
    const text *name = DatumGetTextPP(key.key);
    Tag tag;
    if (caches_on() && last_tag.find(key.tenant, scope, name, &tag))
        return tag;
    int scope_bytes = VARSIZE_ANY_EXHDR(scope);
    int key_bytes = VARSIZE_ANY_EXHDR(name);
    tag.database = MyDatabaseId;
    tag.tenant = key.tenant;
    // Two hashes with different seeds; the scope's length seeds the key's
    // part, so that ("ab", "c") and ("a", "bc") differ.
    for (int i = 0; i < 2; i++)
    {
        uint64 seed = (uint64(tag.database) << 32 | tag.tenant) + uint64(i) * 0x9e3779b97f4a7c15;
        uint64 part = hash_bytes_extended(
            reinterpret_cast<const unsigned char *>(VARDATA_ANY(scope)), scope_bytes, seed);
        tag.hash[i] =
            hash_bytes_extended(reinterpret_cast<const unsigned char *>(VARDATA_ANY(name)),
                                key_bytes, part + uint64(scope_bytes));
    }
    if (caches_on())
        last_tag.remember(key.tenant, scope, name, tag);
    else
        last_tag.forget();
    return tag;
}

static bool same_tag(const Tag &a, const Tag &b)
{
    return a.database == b.database && a.tenant == b.tenant && a.hash[0] == b.hash[0] &&
           a.hash[1] == b.hash[1];
}

static LWLock *partition_lock(const Tag &tag)
{
    return &locks[tag_hash(&tag, sizeof(Tag)) % partitions].lock;
}

static pg_atomic_uint64 *generation_of(const Tag &tag)
{
    return &shared->generations[tag_hash(&tag, sizeof(Tag)) % buckets];
}

static long table_entries()
{
    return Max(long(settings::max_deferred_claims), dynahash_free_lists);
}

static Size table_size()
{
    return add_size(hash_estimate_size(table_entries(), sizeof(Entry)), sizeof(SharedState));
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
    shared = static_cast<SharedState *>(ShmemInitStruct(state_name, sizeof(SharedState), &found));
    if (!found)
    {
        pg_atomic_init_u32(&shared->in_use, 0);
        for (pg_atomic_uint64 &generation : shared->generations)
            pg_atomic_init_u64(&generation, 0);
    }
    locks = GetNamedLWLockTranche(table_name);
    LWLockRelease(AddinShmemInitLock);
}

static Entry *find_entry(const Tag &tag)
{
    return static_cast<Entry *>(
        hash_search_with_hash_value(table, &tag, tag_hash(&tag, sizeof(Tag)), HASH_FIND, nullptr));
}

// Rule O: live while its owner is in progress, as the procarray says now.
static bool live(const Entry &entry)
{
    return TransactionIdIsInProgress(entry.owner.xid);
}

// A live entry of `tag` that belongs to another transaction, copied: the
// caller holds the partition lock.  (The procarray's locks nest inside it;
// nothing takes them the other way round.)
static bool live_other_entry(const Tag &tag, Entry *copy)
{
    Entry *entry = find_entry(tag);
    if (entry == nullptr || !live(*entry) || TransactionIdIsCurrentTransactionId(entry->owner.xid))
        return false;
    *copy = *entry;
    return true;
}

enum class Published
{
    yes,
    changed, // the bucket's generation moved since the ticket (rule A)
    held,    // a live entry of another transaction is there
    no_room  // no free slot
};

// Rule A: puts `claim`'s entry in the table if nothing was published in the
// key's bucket since `ticket`, over no entry or a dead one, and bumps the
// bucket's generation.
static Published publish_entry(const OwnClaim &claim, const Ticket &ticket, Entry *holder)
{
    LWLock *lock = partition_lock(claim.tag);
    LWLockAcquire(lock, LW_EXCLUSIVE);
    Published result = Published::yes;
    pg_atomic_uint64 *generation = generation_of(claim.tag);
    if (pg_atomic_read_u64(generation) != ticket.generation)
        result = Published::changed;
    else if (live_other_entry(claim.tag, holder))
        result = Published::held;
    else
    {
        Entry *entry = find_entry(claim.tag);
        if (entry == nullptr)
        {
            // A new entry takes a slot: at most max_deferred_claims are in use.
            bool found;
            if (pg_atomic_fetch_add_u32(&shared->in_use, 1) < uint32(settings::max_deferred_claims))
                entry = static_cast<Entry *>(hash_search_with_hash_value(
                    table, &claim.tag, tag_hash(&claim.tag, 0), HASH_ENTER_NULL, &found));
            if (entry == nullptr)
            {
                pg_atomic_fetch_sub_u32(&shared->in_use, 1);
                result = Published::no_room;
            }
        }
        if (entry != nullptr)
        {
            entry->owner = claim.owner;
            entry->row_written = false;
            entry->request = claim.request;
            entry->created_at = claim.created_at;
            pg_atomic_fetch_add_u64(generation, 1);
        }
    }
    LWLockRelease(lock);
    return result;
}

// Rule F, after the row is written: bumps the bucket's generation, and
// reports a live entry that another transaction published meanwhile.
static bool published_meanwhile(const Tag &tag, Entry *holder)
{
    LWLock *lock = partition_lock(tag);
    LWLockAcquire(lock, LW_EXCLUSIVE);
    pg_atomic_fetch_add_u64(generation_of(tag), 1);
    bool held = live_other_entry(tag, holder);
    LWLockRelease(lock);
    return held;
}

// After the claiming subtransaction wrote the claim's row: readers read it.
static void note_row_written(const OwnClaim &claim)
{
    LWLock *lock = partition_lock(claim.tag);
    LWLockAcquire(lock, LW_EXCLUSIVE);
    Entry *entry = find_entry(claim.tag);
    if (entry != nullptr && entry->owner == claim.owner)
        entry->row_written = true;
    LWLockRelease(lock);
}

// Rule C: removes the entry of `claim` if `claim` still owns it.
static void remove_entry(const OwnClaim &claim)
{
    LWLock *lock = partition_lock(claim.tag);
    LWLockAcquire(lock, LW_EXCLUSIVE);
    Entry *entry = find_entry(claim.tag);
    if (entry != nullptr && entry->owner == claim.owner)
    {
        hash_search_with_hash_value(table, &claim.tag, tag_hash(&claim.tag, 0), HASH_REMOVE,
                                    nullptr);
        pg_atomic_fetch_sub_u32(&shared->in_use, 1);
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

// Key columns compare byte-wise, as the primary key does.
static bool same_text(Datum a, Datum b)
{
    const text *x = DatumGetTextPP(a);
    const text *y = DatumGetTextPP(b);
    return VARSIZE_ANY_EXHDR(x) == VARSIZE_ANY_EXHDR(y) &&
           memcmp(VARDATA_ANY(x), VARDATA_ANY(y), VARSIZE_ANY_EXHDR(x)) == 0;
}

static int find_own_index(const Tag &tag, const store::Key &key)
{
    for (int i = 0; i < own_count; i++)
        if (same_tag(own[i].tag, tag) && same_text(own[i].scope, key.scope) &&
            same_text(own[i].key, key.key))
            return i;
    return -1;
}

template <typename T> static Datum copy_datum(const T &value)
{
    // The copy is freed with its memory context, never destroyed.
    static_assert(fits_postgres_memory<T>, "a Datum's value lives in palloc'd memory");
    T *copy = static_cast<T *>(palloc(sizeof(T)));
    *copy = value;
    return PointerGetDatum(copy);
}

static store::Key key_of(const OwnClaim &claim)
{
    return store::Key{claim.tag.tenant, claim.scope, claim.key};
}

// What every fresh claim's row says: an in-progress claim, attempt 1.
static store::Record claim_record(const store::Key &key, const RequestHash &request,
                                  TimestampTz created_at)
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
    record.set(store::col_status, CharGetDatum(store::status_in_progress));
    record.set(store::col_attempt, Int32GetDatum(1));
    return record;
}

// This transaction's deferred claim, complete with what only its writer needs.
static store::Record own_record(const OwnClaim &claim)
{
    store::Record record = claim_record(key_of(claim), claim.request, claim.created_at);
    record.writer = store::Writer::self;
    record.writer_xid = InvalidTransactionId;
    record.set(store::col_expires_at, TimestampTzGetDatum(claim.expires_at));
    record.set(store::col_lease_expires_at, TimestampTzGetDatum(claim.lease_expires_at));
    record.set(store::col_ttl, copy_datum(claim.ttl));
    record.set(store::col_lease, copy_datum(claim.lease));
    return record;
}

// What every reader learns of a key that another transaction is still
// changing, whether from that transaction's entry or from the version it
// wrote: that it is in progress, for which request, at which attempt, since
// when, with which claim data -- and nothing that transaction may still
// change or roll back: no response, recovery point, lease or expiry (which
// apply once it commits).  So the answer is the same whether the claim is
// deferred -- an entry, whose row a completion in the same transaction
// writes completed at once, and which a PREPARE TRANSACTION leaves to that
// row -- or written at once, as a row whose first version is the claim.
// (A held record is never asked whether it expired: its holder decides.)
static store::Record as_held(store::Record version)
{
    constexpr store::Column shown[] = {
        store::col_scope,   store::col_key,    store::col_request,    store::col_created_at,
        store::col_attempt, store::col_tenant, store::col_claim_data, store::col_shard_key};
    store::Record held = version;
    for (int column = 0; column < store::column_count; column++)
        held.set_null(store::Column(column));
    for (store::Column column : shown)
    {
        held.values[column] = version.values[column];
        held.nulls[column] = version.nulls[column];
    }
    held.set(store::col_status, CharGetDatum(store::status_in_progress));
    return held;
}

// Rule R: whether `record`, read through store::read_latest, is a key held
// by a transaction that has ended since: one that was deleting or replacing
// its committed version when the read checked it, and whose new version,
// checked after its end, was not there to show.
static bool holder_ended(const store::Record &record)
{
    return !record.found && record.held_by_other() && !TransactionIdIsInProgress(record.writer_xid);
}

// The newest version of the key in the table, as a claimer must see it.
static store::Record latest_version(const store::Storage &storage, const store::Key &key)
{
    store::Record record = store::read_latest(storage, key);
    // Rule R: read again what the holder's end left -- the committed version
    // again after a rollback, its replacement or no record after a commit.
    // Each turn needs another transaction to have changed the key and ended
    // during the read.
    while (holder_ended(record))
    {
        CHECK_FOR_INTERRUPTS();
        record = store::read_latest(storage, key);
    }
    return record.found && record.held_by_other() ? as_held(record) : record;
}

// Another transaction's live claim, as a reader answers it.
static store::Record holder_record(const store::Key &key, const Entry &entry)
{
    store::Record record = claim_record(key, entry.request, entry.created_at);
    record.deferred = false;
    record.writer = store::Writer::other;
    record.writer_xid = entry.owner.xid;
    return as_held(record);
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
        store::Record record = own_record(own[i]);
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

// A rolled-back subtransaction takes the claims it made with it, and the
// rows it wrote: subtransaction ids grow, so those of it and its children are
// the ids from its own on.  The entry of a claim whose row rolled back stays
// (rule L).
static void on_subtransaction_event(SubXactEvent event, SubTransactionId subxact, SubTransactionId,
                                    void *)
{
    if (event != SUBXACT_EVENT_ABORT_SUB)
        return;
    pause_for_test(fault_pause_at_subtransaction_abort, 18756);
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

// A new own record, at the end of the list (made room for).
static OwnClaim &add_own()
{
    if (own_count == own_capacity)
    {
        int capacity = Max(16, own_capacity * 2);
        size_t bytes = size_t(capacity) * sizeof(OwnClaim);
        own = static_cast<OwnClaim *>(own == nullptr ? MemoryContextAlloc(TopMemoryContext, bytes)
                                                     : repalloc(own, bytes));
        own_capacity = capacity;
    }
    return own[own_count];
}

// Fills the own record of `record`, a fresh claim of `key` as begin filled it;
// its key is the caller's until keep_key().
static void make_own(OwnClaim &claim, const Tag &tag, const store::Key &key,
                     const store::Record &record)
{
    claim.scope = key.scope;
    claim.key = key.key;
    claim.tag = tag;
    claim.owner = Owner{GetCurrentTransactionId(), GetTopTransactionId()};
    claim.made_in = GetCurrentSubTransactionId();
    claim.written_in = InvalidSubTransactionId;
    claim.request = *datum_get_request_hash(record.values[store::col_request]);
    claim.created_at = DatumGetTimestampTz(record.values[store::col_created_at]);
    claim.expires_at = DatumGetTimestampTz(record.values[store::col_expires_at]);
    claim.lease_expires_at = DatumGetTimestampTz(record.values[store::col_lease_expires_at]);
    claim.ttl = *DatumGetIntervalP(record.values[store::col_ttl]);
    claim.lease = *DatumGetIntervalP(record.values[store::col_lease]);
}

// Copies the key of a published claim for the rest of the transaction.
static void keep_key(OwnClaim &claim)
{
    MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
    claim.scope = PointerGetDatum(DatumGetTextPCopy(claim.scope));
    claim.key = PointerGetDatum(DatumGetTextPCopy(claim.key));
    MemoryContextSwitchTo(old);
}

// ---------------------------------------------------------------------------
// The interface
// ---------------------------------------------------------------------------

store::Record read_latest(const store::Storage &storage, const store::Key &key, Ticket *ticket)
{
    if (ticket != nullptr)
        ticket->valid = false;
    if (table == nullptr)
        return latest_version(storage, key);
    Tag tag = make_tag(key);
    int index = own_count > 0 ? find_own_index(tag, key) : -1;
    if (index >= 0 && !own[index].written())
        return own_record(own[index]);
    // Rule A: the bucket's generation and the entry, under one lock, before
    // the row.  (Once written, this transaction's row speaks for its own
    // claim; its entry is looked up anyway, for the generation.)
    LWLock *lock = partition_lock(tag);
    LWLockAcquire(lock, LW_SHARED);
    uint64 generation = pg_atomic_read_u64(generation_of(tag));
    Entry *found = find_entry(tag);
    Entry entry;
    bool entry_found = found != nullptr;
    if (entry_found)
        entry = *found;
    LWLockRelease(lock);
    if (ticket != nullptr)
        *ticket = Ticket{generation, true};
    if (entry_found && !entry.row_written && live(entry) &&
        !TransactionIdIsCurrentTransactionId(entry.owner.xid))
        return holder_record(key, entry);
    return latest_version(storage, key);
}

store::Record read_visible(const store::Storage &storage, const store::Key &key, Snapshot snapshot)
{
    if (own_count > 0)
    {
        int index = find_own_index(make_tag(key), key);
        if (index >= 0 && !own[index].written())
            return own_record(own[index]);
    }
    return store::read_visible(storage, key, snapshot);
}

bool find_own(const store::Storage &storage, const store::Key &key, store::Record *record)
{
    if (own_count > 0)
    {
        int index = find_own_index(make_tag(key), key);
        if (index >= 0 && !own[index].written())
        {
            *record = own_record(own[index]);
            return true;
        }
    }
    return store::fetch_last_write(storage, key, record);
}

// A deferred claim needs a table of 0.2.0 or later (its lease) and no claim
// data, which only a row can hold.
static bool deferrable_claim(const store::Storage &storage, const store::Record &record)
{
    return storage.has(store::col_lease) && record.nulls[store::col_claim_data];
}

// Rule F's check, made inside the subtransaction of the fallback's insert:
// whether the row may stay, no claimer having published an entry of the key
// meanwhile.  When one has, the subtransaction rolls back and the row is dead
// at once.  Deleting it instead would leave a row deleted by a transaction
// still open, which makes the publisher's insert of its own row wait for this
// transaction -- while this one, answered in_progress, may wait for the
// publisher's: a deadlock.
struct FallbackCheck
{
    const Tag *tag;
    Entry *holder;
};

static bool no_publication_meanwhile(void *arg)
{
    const FallbackCheck *check = static_cast<const FallbackCheck *>(arg);
    pause_for_test(fault_pause_in_fallback, 18758);
    return !published_meanwhile(*check->tag, check->holder);
}

Claim claim_absent(store::Storage &storage, const store::Key &key, store::Record &record,
                   bool deferrable, const Ticket &ticket, bool key_locked)
{
    if (table == nullptr || !ticket.valid)
    {
        // No shared table: the key lock arbitrates (rule K).
        Assert(key_locked);
        store::insert_record(storage, key, record);
        return Claim::claimed;
    }
    Tag tag = make_tag(key);
    if (own_count > 0 && find_own_index(tag, key) >= 0)
    {
        // Rule 1: this transaction's live entry keeps everyone else out.
        store::insert_record(storage, key, record);
        return Claim::claimed;
    }
    register_callbacks();
    OwnClaim &claim = add_own();
    make_own(claim, tag, key, record);
    Entry holder;
    pause_for_test(fault_pause_before_publish, 18757);
    // A transaction holds at most own_claims_max slots: its memory stays
    // bounded however many keys it claims, and it leaves the table to others.
    Published published = injected_fault == fault_pause_in_fallback || own_count == own_claims_max
                              ? Published::no_room
                              : publish_entry(claim, ticket, &holder);
    switch (published)
    {
        case Published::yes:
            keep_key(claim);
            own_count++;
            if (deferrable && deferrable_claim(storage, record))
            {
                stats::add(stats::deferred_claims);
                record.found = true;
                record.writer = store::Writer::self;
                record.deferred = true;
            }
            else
            {
                store::insert_record(storage, key, record);
                own[own_count - 1].written_in = own[own_count - 1].made_in;
                note_row_written(own[own_count - 1]);
            }
            return Claim::claimed;
        case Published::changed:
            return Claim::read_again;
        case Published::held:
            record = holder_record(key, holder);
            return Claim::held;
        case Published::no_room:
            break;
    }
    if (!key_locked)
        return Claim::lock_key;
    // Rule F.  A claimer that published meanwhile and wrote its row at once
    // makes the insert wait for its transaction; if that commits, the key is
    // taken: read it again.
    stats::add(stats::deferred_fallbacks);
    FallbackCheck check{&tag, &holder};
    switch (store::insert_unless_present(storage, key, record, no_publication_meanwhile, &check))
    {
        case store::Inserted::kept:
            return Claim::claimed;
        case store::Inserted::undone:
            record = holder_record(key, holder);
            return Claim::held;
        case store::Inserted::present:
            break;
    }
    return Claim::read_again;
}

// Records that this transaction's deferred claim of the record's key has its
// row from now on, in the current subtransaction.
static void note_written(const store::Record &record)
{
    store::Key key = store::key_of(record);
    int index = find_own_index(make_tag(key), key);
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
