// The transaction's unsettled claims; see unsettled.hpp.
#include "unsettled.hpp"
#include "boundary.hpp"

extern "C"
{
#include "access/xact.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
}

namespace idempotency::unsettled
{

const int errcode_unfinished_autocommit_claim = MAKE_SQLSTATE('I', 'K', '0', '0', '4');

// One claim, by the hash of its key, with the subtransaction that made it and
// the start of its key for the message.
struct UnsettledClaim
{
    uint64 key_hash;
    SubTransactionId subxact;
    char key_prefix[40];
};

// The claims of the current transaction, in TopTransactionContext: created
// by the first claim that needs it, gone with the transaction (its end resets
// the pointer).
static HTAB *unsettled = nullptr;

static void forget_all()
{
    unsettled = nullptr; // its memory goes with TopTransactionContext
}

// A subtransaction that rolls back takes its claims with it, and those of its
// children: subtransaction ids grow, so they are the ids from its own on.
static void forget_rolled_back(SubTransactionId rolled_back)
{
    HASH_SEQ_STATUS scan;
    hash_seq_init(&scan, unsettled);
    UnsettledClaim *claim;
    while ((claim = static_cast<UnsettledClaim *>(hash_seq_search(&scan))) != nullptr)
        if (claim->subxact >= rolled_back)
            hash_search(unsettled, &claim->key_hash, HASH_REMOVE, nullptr);
}

void refuse()
{
    if (unsettled == nullptr)
        return;
    HASH_SEQ_STATUS scan;
    hash_seq_init(&scan, unsettled);
    UnsettledClaim *claim = static_cast<UnsettledClaim *>(hash_seq_search(&scan));
    if (claim == nullptr)
        return;
    hash_seq_term(&scan);
    long count = hash_get_num_entries(unsettled);
    ereport(ERROR,
            (errcode(errcode_unfinished_autocommit_claim),
             errmsg("idempotency key \"%s\" was claimed outside a transaction block and is not "
                    "completed",
                    claim->key_prefix),
             errdetail_plural("%ld claim would commit unfinished: the work after it would not be "
                              "part of its transaction, and a retry after a crash would run it "
                              "again.",
                              "%ld claims would commit unfinished: the work after them would not "
                              "be part of their transaction, and a retry after a crash would run "
                              "it again.",
                              count, count),
             errhint("Run idempotency_begin(), the work and idempotency_complete() inside "
                     "BEGIN ... COMMIT, or pass lease => ... to commit the claim on purpose "
                     "(the two-phase pattern)."),
             errhidestmt(true)));
}

static void on_transaction_event(XactEvent event, void *)
{
    if (unsettled == nullptr)
        return;
    if (event == XACT_EVENT_PRE_COMMIT || event == XACT_EVENT_PARALLEL_PRE_COMMIT)
        refuse();
    else if (event != XACT_EVENT_PRE_PREPARE)
        forget_all();
}

static void on_subtransaction_event(SubXactEvent event, SubTransactionId subxact, SubTransactionId,
                                    void *)
{
    if (event == SUBXACT_EVENT_ABORT_SUB && unsettled != nullptr)
        forget_rolled_back(subxact);
}

static HTAB *unsettled_claims()
{
    static bool callbacks_registered = false;
    if (!callbacks_registered)
    {
        RegisterXactCallback(on_transaction_event, nullptr);
        RegisterSubXactCallback(on_subtransaction_event, nullptr);
        callbacks_registered = true;
    }
    if (unsettled == nullptr)
    {
        HASHCTL control;
        control.keysize = sizeof(uint64);
        control.entrysize = sizeof(UnsettledClaim);
        control.hcxt = TopTransactionContext;
        unsettled = hash_create("idempotency unsettled claims", 16, &control,
                                HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
    }
    return unsettled;
}

void note_claim(const store::Key &key, bool lease_given)
{
    if (lease_given || IsTransactionBlock())
        return;
    uint64 hash = store::key_hash(key);
    bool found;
    UnsettledClaim *claim =
        static_cast<UnsettledClaim *>(hash_search(unsettled_claims(), &hash, HASH_ENTER, &found));
    if (found)
        return;
    claim->subxact = GetCurrentSubTransactionId();
    strlcpy(claim->key_prefix, key_for_message(key.key), sizeof(claim->key_prefix));
}

void note_settled(const store::Key &key)
{
    if (unsettled == nullptr)
        return;
    uint64 hash = store::key_hash(key);
    hash_search(unsettled, &hash, HASH_REMOVE, nullptr);
}

} // namespace idempotency::unsettled
