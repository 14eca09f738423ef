// The claim protocol: who may hold an idempotency key, and how every other
// transaction learns of it.  Every rule about claims lives here; the storage
// layer below (store.hpp) knows rows and versions only, and never calls back.
//
// A claim is held by the (sub)transaction that made it, and shows itself
// through an entry in the shared claims table, a version of the key's row
// that a dirty snapshot shows as written by a transaction in progress, or
// both:
//   entry  published by every fresh claim (of a key that has no record) while
//          the library is preloaded with slots; it names its owner and says
//          what a reader needs to answer.  A *deferred* claim has only its
//          entry until its transaction needs the row, so that a request
//          whose begin and complete share a transaction writes its record
//          once, completed.
//   row    written at once by every other claim: a takeover of a record whose
//          lease or ttl ended (an update), a claim made while the table has
//          no free slot, and every claim when the library is not preloaded.
//
// THE INVARIANT.  While a claim can still commit, every other transaction
// that reads its key (read_latest) finds an entry or a row that says so.
// So nobody claims a key that is already claimed, and a key completed by a
// commit is never claimed again.
//
// The rules that keep it, and why each is needed:
//  A.  Arbitration of fresh claims.  A reader reads the generation of the
//      key's bucket (one of `buckets` counters, under the partition lock
//      that also covers the entry it looks up) before the row.  A claimer of
//      a key that read as absent publishes its entry under the same lock
//      only if that generation is unchanged, and bumps it.  Any claim
//      published since the read changed it (the claimer reads again); any
//      published before was seen: its entry while its owner is live, its
//      committed row after (rule C).  So two fresh claims of one key never
//      both succeed -- without the key lock, and with one read of the row.
//  K.  The key lock (store::lock_key) is held by whoever decides to change
//      an existing record -- take a claim over, change a committed record,
//      delete it, expire it -- and by every claimer when there is no shared
//      table: it reads the key under the lock, decides on what it read,
//      writes, and lets go.  Two such deciders never act on the same state;
//      once the lock is let go, the row keeps everyone else out.  Fresh
//      claims (rule A) and these changes never meet: one needs no record,
//      the other a committed one.
//  F.  A fresh claim with no free slot (or whose transaction holds
//      own_claims_max slots already) takes the key lock, reads the key under
//      it, writes its row in a subtransaction, and then -- under the
//      partition lock -- bumps the bucket's generation and looks for a live
//      entry of the key.  If a claimer published one meanwhile (having read
//      before the row was written), the subtransaction rolls back and the
//      answer is in_progress.  Of a publication and this check, whichever
//      comes second sees the other: a publication after the bump fails its
//      generation check and reads the row.  Rolled back, not deleted: a row
//      deleted by a transaction still open would make the publisher's insert
//      of its own row wait for that transaction, which may be waiting for
//      the publisher's (wait => ...): a deadlock.  (A claimer that published
//      meanwhile and wrote its own row at once makes this insert wait for its
//      transaction; if that commits, the insert's unique violation is
//      absorbed and the key read again.)
//  O.  An entry records its owner: the id of the (sub)transaction that made
//      the claim, and of its top-level transaction.  It is live exactly while
//      TransactionIdIsInProgress(owner): until the top-level transaction
//      ends, or the owner's subtransaction (or an ancestor) rolls back -- the
//      life of a row version the owner would have inserted.  Readers check
//      the procarray every time; liveness is never assumed from the entry
//      being there.  A live entry is never overwritten; a dead one may be
//      taken by the next publication.
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
//      checked by owner id.  A reader that finds an entry dead therefore
//      finds the committed row, or nothing after an abort.
//  X.  At backend exit the entries go first (before_shmem_exit); the
//      transaction, if any, is then aborted and cannot commit the claims.  A
//      crash resets shared memory along with every transaction.
//  1.  A transaction has at most one own record per key: the one of its first
//      fresh claim.  A later claim of the key in the same transaction (after
//      idempotency_forget) is written as a row, and the first claim's entry,
//      whose owner outlives it, keeps answering for the key.  So a savepoint
//      rollback never has two records of one key to reconcile.
//
// Transitions of a deferred claim (own record R, entry E):
//   claim       rule A: E published, R made in the current subtransaction,
//               unwritten.
//   write       complete, checkpoint, release, forget, a listing or the
//               commit: R's row inserted (forget then deletes it), R marked
//               written in the current subtransaction; E unchanged (L).
//   rollback    of the subtransaction that wrote R: R unwritten again (its
//   to savept.  row is gone), E unchanged; of the subtransaction that made R
//               (or an ancestor): R and E removed (E's owner is aborted).
//   end         R's rows written before commit/prepare (C); R and E removed
//               after it, or after abort.
// A fresh claim that is not deferred (idempotency.defer_claims off, claim
// data, an explicit lease outside a transaction block, or the key's second
// claim in the transaction) publishes E the same way and writes its row at
// once; R then only remembers E, to remove it.
//
// Entries are found by a 128-bit hash of the scope and key (with the
// database and the tenant): two keys whose hashes collide would keep each
// other out (in_progress), never both be claimed; the transaction's own
// records compare the whole key.
//
// Backend-local state: this transaction's own records.  Cleared at every
// transaction end, trimmed at every subtransaction rollback (the callbacks
// below), so that it never outlives what it describes.
#pragma once

#include "shared_claims.hpp"
