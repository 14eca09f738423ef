// The transaction's unsettled claims; see unsettled.hpp.
#include "unsettled.hpp"
#include "boundary.hpp"
#include "errcodes.hpp"

extern "C"
{
#include "access/xact.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
}

namespace idempotency::unsettled
{

// The start of a key: enough for key_for_message, which shows 32 bytes at
// most (and "..." when there were more).
constexpr int prefix_bytes = 36;

// One claim, by the hash of its key, with the subtransaction that made it and
// the start of its key, copied as it is; the message is made only if needed.
struct UnsettledClaim
{
    uint64 key_hash;
    SubTransactionId subxact;
    int prefix_length;
    char prefix[prefix_bytes];
};

// The claims of the current transaction, in TopTransactionContext: made by
// the first claim that needs it, gone with the transaction (its end resets
// the pointer).  Usually one claim: a list, searched from its end.
static UnsettledClaim *claims = nullptr;
static int count = 0;
static int capacity = 0;

static void forget_all()
{
    claims = nullptr; // its memory goes with TopTransactionContext
    count = capacity = 0;
}

// A subtransaction that rolls back takes its claims with it, and those of its
// children: subtransaction ids grow, so they are the ids from its own on.
static void forget_rolled_back(SubTransactionId rolled_back)
{
    for (int i = count - 1; i >= 0; i--)
        if (claims[i].subxact >= rolled_back)
            claims[i] = claims[--count];
}

static int find(uint64 key_hash)
{
    for (int i = count - 1; i >= 0; i--)
        if (claims[i].key_hash == key_hash)
            return i;
    return -1;
}

void refuse()
{
    if (count == 0)
        return;
    const UnsettledClaim &claim = claims[0];
    char *key = key_for_message(
        PointerGetDatum(cstring_to_text_with_len(claim.prefix, claim.prefix_length)));
    ereport(ERROR,
            (errcode(errcode_unfinished_autocommit_claim),
             errmsg("idempotency key \"%s\" was claimed outside a transaction block and is not "
                    "completed",
                    key),
             errdetail_plural("%d claim would commit unfinished: the work after it would not be "
                              "part of its transaction, and a retry after a crash would run it "
                              "again.",
                              "%d claims would commit unfinished: the work after them would not "
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
    if (claims == nullptr)
        return;
    if (event == XACT_EVENT_PRE_COMMIT || event == XACT_EVENT_PARALLEL_PRE_COMMIT)
        refuse();
    else if (event != XACT_EVENT_PRE_PREPARE)
        forget_all();
}

static void on_subtransaction_event(SubXactEvent event, SubTransactionId subxact, SubTransactionId,
                                    void *)
{
    if (event == SUBXACT_EVENT_ABORT_SUB && claims != nullptr)
        forget_rolled_back(subxact);
}

// Room for one more claim.
static UnsettledClaim &add()
{
    static bool callbacks_registered = false;
    if (!callbacks_registered)
    {
        RegisterXactCallback(on_transaction_event, nullptr);
        RegisterSubXactCallback(on_subtransaction_event, nullptr);
        callbacks_registered = true;
    }
    if (count == capacity)
    {
        capacity = Max(4, capacity * 2);
        size_t bytes = size_t(capacity) * sizeof(UnsettledClaim);
        claims = static_cast<UnsettledClaim *>(
            claims == nullptr ? MemoryContextAlloc(TopTransactionContext, bytes)
                              : repalloc(claims, bytes));
    }
    return claims[count++];
}

void note_claim(const store::Key &key, bool lease_given)
{
    if (lease_given || IsTransactionBlock())
        return;
    uint64 hash = store::key_hash(key);
    if (find(hash) >= 0)
        return;
    UnsettledClaim &claim = add();
    claim.key_hash = hash;
    claim.subxact = GetCurrentSubTransactionId();
    const text *name = DatumGetTextPP(key.key);
    claim.prefix_length = Min(int(VARSIZE_ANY_EXHDR(name)), prefix_bytes);
    memcpy(claim.prefix, VARDATA_ANY(name), claim.prefix_length);
}

void note_settled(const store::Key &key)
{
    if (count == 0)
        return;
    int index = find(store::key_hash(key));
    if (index >= 0)
        claims[index] = claims[--count];
}

} // namespace idempotency::unsettled
