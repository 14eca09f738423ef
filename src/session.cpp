// The routed storage session; see session.hpp.
#include "session.hpp"
#include "arguments.hpp"
#include "citus_routing.hpp"
#include "store.hpp"

extern "C"
{
#include "access/htup_details.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/snapmgr.h"
#include "utils/tuplestore.h"
}

namespace idempotency::session
{

namespace
{

// A row a forwarded read gave (a composite of the function's row type), as
// a tuple to copy or store.
HeapTupleData forwarded_row(Datum composite)
{
    HeapTupleData row = {};
    ItemPointerSetInvalid(&row.t_self);
    row.t_tableOid = InvalidOid;
    row.t_data = DatumGetHeapTupleHeader(composite);
    row.t_len = HeapTupleHeaderGetDatumLength(row.t_data);
    return row;
}

enum class ShardRead
{
    answered,   // a replay or a mismatch
    elsewhere,  // the scope's shard is placed on another node
    needs_write // anything else
};

// With the keys in Citus shards: a replay or mismatch answered from a read
// of the shard, which takes no shard metadata lock (citus_placement.hpp) and
// so never waits behind a shard move.  Anything else needs the shard opened
// for writing, under that lock, and the key read again there.
ShardRead answer_from_shard_read(const claims::BeginRequest &request, claims::BeginAnswer *answer)
{
    store::Storage storage;
    if (!store::open_here(AccessShareLock, request.key.scope, &storage))
        return ShardRead::elsewhere;
    claims::BeginRequest read_request = request;
    read_request.key = store::stored_key(storage, request.key);
    bool answered = claims::answer_from_read(storage, read_request, answer);
    store::close(storage);
    return answered ? ShardRead::answered : ShardRead::needs_write;
}

} // namespace

bool begin(FunctionCallInfo fcinfo, claims::BeginRequest request, IsClaim is_claim,
           claims::BeginAnswer *answer, Datum *forwarded)
{
    if (store::keys_in_shards())
    {
        switch (answer_from_shard_read(request, answer))
        {
            case ShardRead::answered:
                return true;
            case ShardRead::elsewhere:
                // During a move of that shard, a completed key is answered
                // there without waiting for the move.
                if (!request.take_over_mismatch &&
                    citus_routing::forward_replay(fcinfo, request.key.scope, request.key.key,
                                                  forwarded, is_claim))
                    return false;
                break;
            case ShardRead::needs_write:
                break;
        }
    }
    store::Storage storage;
    if (!store::open_here(RowExclusiveLock, request.key.scope, &storage))
    {
        // Run on the shard's node, in this transaction, which commits its
        // claim as it would one made here.
        *forwarded = citus_routing::forward_call(fcinfo, request.key.scope);
        claims::after_begin(request, !fcinfo->isnull && is_claim(fcinfo, *forwarded));
        return false;
    }
    if (request.has_claim_data)
        arguments::require_column(storage, store::col_claim_data, "claim_data");
    request.key = store::stored_key(storage, request.key);
    *answer = claims::begin(storage, request);
    store::close(storage);
    claims::after_begin(request, answer->outcome == claims::Outcome::claimed);
    return true;
}

bool write(FunctionCallInfo fcinfo, const store::Key &key, claims::Write kind, Change change,
           void *arg, Datum *forwarded)
{
    store::Storage storage;
    if (!store::open_here(RowExclusiveLock, key.scope, &storage))
    {
        *forwarded = citus_routing::forward_call(fcinfo, key.scope);
        claims::after_write(kind, key);
        return false;
    }
    store::Key stored = store::stored_key(storage, key);
    change(storage, stored, arg);
    store::close(storage);
    claims::after_write(kind, stored);
    return true;
}

bool lookup(FunctionCallInfo fcinfo, const store::Key &key, bool latest, bool *found,
            store::Record *record, HeapTuple *row)
{
    // Each turn follows a shard move or split that committed meanwhile
    // (citus_routing::forward_read).
    for (;;)
    {
        store::Storage storage;
        if (store::open_here(AccessShareLock, key.scope, &storage))
        {
            *found = claims::lookup(storage, store::stored_key(storage, key), latest, record);
            store::close(storage);
            return true;
        }
        // A read runs there without a lock here: it never waits for a move.
        Datum *rows;
        uint64 count = 0;
        if (citus_routing::forward_read(fcinfo, key.scope, &rows, &count))
        {
            *row = nullptr;
            if (count > 0)
            {
                HeapTupleData first = forwarded_row(rows[0]);
                *row = heap_copytuple(&first);
            }
            return false;
        }
        CHECK_FOR_INTERRUPTS();
    }
}

void list(FunctionCallInfo fcinfo, const store::Key &scope, Datum after_key, int max_keys,
          PutRecord put, void *arg)
{
    // This transaction's deferred claims are listed as their rows, which
    // the statement's snapshot sees once written, with a later command id.
    bool wrote = claims::write_all();
    if (wrote)
    {
        PushCopiedSnapshot(ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot());
        UpdateActiveSnapshotCommandId();
    }
    // Each turn follows a shard move or split that committed meanwhile.
    for (;;)
    {
        store::Storage storage;
        if (store::open_here(AccessShareLock, scope.scope, &storage))
        {
            store::Key stored = store::stored_key(storage, scope);
            Snapshot snapshot =
                ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot();
            claims::list(storage, stored, after_key, snapshot, max_keys, put, arg);
            store::close(storage);
            break;
        }
        ReturnSetInfo *result = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
        Datum *rows;
        uint64 count = 0;
        if (citus_routing::forward_read(fcinfo, scope.scope, &rows, &count))
        {
            for (uint64 i = 0; i < count; i++)
            {
                HeapTupleData row = forwarded_row(rows[i]);
                tuplestore_puttuple(result->setResult, &row);
            }
            break;
        }
        CHECK_FOR_INTERRUPTS();
    }
    if (wrote)
        PopActiveSnapshot();
}

} // namespace idempotency::session
