// The claim protocol: who may hold an idempotency key, and how every other
// transaction learns of it.  Every rule about claims lives here; the storage
// layer below (store.hpp) knows rows and versions only, and never calls back.
//
// A claim is held by the (sub)transaction that made it, and shows itself in
// one of two ways:
//   row    a version of the key's row written by that transaction, which a
//          dirty snapshot shows as written by a transaction in progress;
//   entry  a deferred claim: an entry in the shared claims table, published
//          instead of the row, so that a request whose begin and complete
//          share a transaction writes its record once, completed.
//
// THE INVARIANT.  While a claim can still commit, every other transaction
// that reads its key (read_latest) finds a row or an entry that says so.
// So nobody claims a key that is already claimed, and a key completed by a
// commit is never claimed again.
//
// The rules that keep it, and why each is needed:
//  K.  The key lock (store::lock_key) is held by whoever decides to claim a
//      key, take a claim over, change a committed record or delete it: it
//      reads the key under the lock, decides on what it read, writes, and
//      lets go.  Two deciders never act on the same state; once the lock is
//      let go, the claim's row or entry keeps everyone else out.
//  O.  An entry records its owner: the id of the (sub)transaction that made
//      the claim, and of its top-level transaction.  It is live exactly while
//      TransactionIdIsInProgress(owner): until the top-level transaction
//      ends, or the owner's subtransaction (or an ancestor) rolls back -- the
//      life of a row version the owner would have inserted.  Readers check
//      the procarray every time; liveness is never assumed from the entry
//      being there.
//  P.  An entry is published only under the key lock, for a key that reads
//      as absent, over no entry or a dead one.  A live entry is never
//      overwritten (a live one found then is answered as a holder).
//  L.  An entry stays in the table, answering readers, for as long as its
//      owner is live, whether or not the claim's row has been written since.
//      A row written in a subtransaction that then rolls back is gone at the
//      moment that subtransaction is marked aborted, while the entry, whose
//      owner is an ancestor, still speaks: there is no instant in which
//      neither the entry nor the row can be seen.
//  C.  Before the owner's transaction commits or prepares, every deferred
//      claim it still holds gets its row (XACT_EVENT_PRE_COMMIT,
//      XACT_EVENT_PRE_PREPARE), while the entry is still live.  Entries are
//      removed only after the transaction has left the procarray (COMMIT,
//      ABORT) or handed its xid to the prepared transaction (PREPARE), or
//      when the owner's subtransaction rolls back, and only by their owner,
//      checked by owner id: an entry taken over after its owner's
//      subtransaction aborted is left to its new owner.
//  X.  At backend exit the entries go first (before_shmem_exit); the
//      transaction, if any, is then aborted and cannot commit the claims.  A
//      crash resets shared memory along with every transaction.
//  1.  A transaction has at most one own record per key: the one of its
//      deferred claim.  Once that record exists, a later claim of the key in
//      the same transaction (after idempotency_forget) is written as a row,
//      and the entry, whose owner is still live, keeps answering for the
//      key.  So a savepoint rollback never has two records of one key to
//      reconcile.
//
// Transitions of a deferred claim (own record R, entry E):
//   claim       under K, key absent: E published (P), R made in the current
//               subtransaction, unwritten.
//   write       complete, checkpoint, release, forget, a listing or the
//               commit: R's row inserted (forget then deletes it), R marked
//               written in the current subtransaction; E unchanged (L).
//   rollback    of the subtransaction that wrote R: R unwritten again (its
//   to savept.  row is gone), E unchanged; of the subtransaction that made R
//               (or an ancestor): R and E removed (E's owner is aborted).
//   end         R's rows written before commit/prepare (C); R and E removed
//               after it, or after abort.
//
// Which claims are deferred: a fresh claim of an absent key, when the
// library is preloaded with idempotency.max_deferred_claims > 0 and
// idempotency.defer_claims is on, a slot is free, the transaction holds
// fewer than own_claims_max and none of this key (rule 1), scope and key fit
// in key_bytes_max, it carries no claim data, and the table is at 0.2.0 or
// later.  Every other claim is written at once, which needs no entry: its
// row is its evidence.
//
// Backend-local state: this transaction's own records.  Cleared at every
// transaction end, trimmed at every subtransaction rollback (the callbacks
// below), so that it never outlives what it describes.
#pragma once

#include "store.hpp"

namespace idempotency::claims
{

// Scope and key bytes that fit in a shared entry; longer keys are written.
constexpr int key_bytes_max = 240;
// Deferred claims one transaction may hold; later ones are written.
constexpr int own_claims_max = 64;

// Asks for the shared claims table (module.cpp's shmem_request_hook), then
// finds or creates it (its shmem_startup_hook).
void reserve_shared_memory();
void attach_shared_memory();

// The newest state of `key` as a claimer must see it: this transaction's own
// deferred claim, another transaction's live entry (held by it), or the
// newest version of the row through a dirty snapshot.
store::Record read_latest(const store::Storage &storage, const store::Key &key);
// The key as `snapshot` sees it, this transaction's deferred claim included.
store::Record read_visible(const store::Storage &storage, const store::Key &key,
                           Snapshot snapshot);
// This transaction's own uncommitted claim of `key`, found without the key
// lock: its deferred claim, or the version this backend wrote last.  False
// when it is not found that way; read_latest under the key lock then knows.
bool find_own(const store::Storage &storage, const store::Key &key, store::Record *record);

// Under the key lock, for a key that read as absent: makes `record`, filled
// as a fresh claim, this transaction's claim -- deferred when `deferrable`
// and the claim qualifies, else written as a row.  False when another
// transaction turns out to hold the key after all; `record` is then its
// claim, as read_latest would return it.
bool claim_absent(store::Storage &storage, const store::Key &key, store::Record &record,
                  bool deferrable);
// Writes the changed `record`, read through this module by its holder: a
// deferred claim's row is inserted, any other version replaced.
void write(store::Storage &storage, store::Record &record);
// Deletes `record`'s version; a deferred claim is written first, so that the
// deletion rolls back with its subtransaction like any other.
void remove(store::Storage &storage, const store::Record &record);

// Writes the rows of this transaction's deferred claims that have none yet,
// as the commit would (for readers of the table itself, such as a listing);
// true when it wrote any.
bool write_all();

} // namespace idempotency::claims
