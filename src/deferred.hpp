// Deferred claims: a fresh claim published in shared memory instead of
// written as a row, so that a request whose begin and complete share a
// transaction writes its record once, completed.
//
// Why it is safe (the reason for every rule here):
//  * Every caller that could act on a key consults the table of deferred
//    claims before the heap (store::read_latest), under the same key lock
//    that makes claims exclusive.  Another transaction's deferred claim reads
//    as its uncommitted claim row would: held by that transaction (its
//    subtransaction's id, the one a row would carry), with the same request,
//    attempt, times and lease.  So in_progress, mismatch, waits and takeovers
//    answer as they do for a row.  The table serves every database, so an
//    entry's tag carries its database: no key answers from another's claim.
//  * The claim's row is written by its transaction before anyone could see
//    it committed: by idempotency_complete (the one write of the request), or
//    by any other change of the claim, or at PRE_COMMIT/PRE_PREPARE for a
//    claim committed unfinished (the two-phase pattern).  Once written, the
//    row speaks for the claim, and the entry only says so until the
//    transaction ends.
//  * The entry goes with its transaction: at commit, abort or PREPARE, with
//    the subtransaction that made it when that rolls back (a row written in
//    a subtransaction that rolls back leaves the claim deferred again), and
//    at backend exit.  A crash resets shared memory and aborts every owner.
//    An entry whose transaction has ended but is not removed yet is ignored
//    by readers, who then find the committed row, or nothing after an abort.
//  * A claim is deferred only when it fits: the library preloaded,
//    idempotency.max_deferred_claims > 0, a free slot, at most
//    own_claims_max per transaction, scope and key of at most key_bytes_max
//    bytes together, no claim data, a table at 0.2.0, and no row of the key
//    at all.  Otherwise it is written at once, as before (counted in stats
//    as deferred_fallbacks when only space was missing).
//
// Backend-local state: this transaction's deferred claims, with everything
// needed to write them.  Reset at every transaction end, trimmed at every
// subtransaction rollback, so it never outlives what it describes.
#pragma once

#include "store.hpp"

namespace idempotency::deferred
{

// Scope and key bytes that fit in a shared entry; longer keys are written.
constexpr int key_bytes_max = 240;
// Deferred claims one transaction may hold; later ones are written.
constexpr int own_claims_max = 64;

// Asks for the shared table (module.cpp's shmem_request_hook), then finds
// or creates it (its shmem_startup_hook).
void reserve_shared_memory();
void attach_shared_memory();

// Publishes `record`, a fresh claim of `key` (as begin filled it), instead of
// writing it.  False when it cannot be deferred: the caller writes it.
bool publish(const store::Storage &storage, const store::Key &key, const store::Record &record);

// The deferred, not yet written claim of `key`: this transaction's own
// (writer self, deferred), or, with `others`, one of another transaction
// still in progress (writer other).  False when there is none.
bool find(const store::Key &key, bool others, store::Record *record);

// After this transaction wrote the row of its own deferred claim of `key`:
// the row speaks for the claim from now on.
void note_written(const store::Key &key);

// Writes the rows of this transaction's deferred claims that have none yet,
// as at commit (for readers of the table itself, such as a listing); true
// when it wrote any.
bool write_all();

} // namespace idempotency::deferred
