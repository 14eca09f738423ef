// The shared claims table, and the deferred claims it makes possible: rules
// A, F, O, L, C, X and 1 of claims.hpp, which states them and why each is
// needed; and the read of a key's newest state (read_latest, rule R).  Part
// of the claims module, for claims.cpp only: the SQL functions call
// claims.hpp's entry points, never these.
#pragma once

#include "claims.hpp"

namespace idempotency::claims
{

// What a reader saw of the key's bucket before it read the row (rule A).
struct Ticket
{
    uint64 generation;
    bool valid; // false: no shared table, fresh claims take the key lock
};

// The newest state of `key` as a claimer must see it: this transaction's own
// deferred claim, another transaction's live entry (held by it), or the
// newest version of the row through a dirty snapshot.  A key that another
// transaction holds reads the same from its entry or its row, whether its
// claim was deferred or not: in progress, with the claim's request, attempt,
// created_at and claim data, and NULL for all that transaction may still
// change or roll back (a response, the lease, the expiry).  A key whose
// deletion or replacement ended during the read is read again (rule R).
// With `ticket`, what a fresh claim of an absent key needs to publish.
store::Record read_latest(const store::Storage &storage, const store::Key &key,
                          Ticket *ticket = nullptr);
// The key as `snapshot` sees it, this transaction's deferred claim included.
store::Record read_visible(const store::Storage &storage, const store::Key &key, Snapshot snapshot);
// This transaction's own uncommitted claim of `key`, found without the key
// lock: its deferred claim, or the version this backend wrote last.  False
// when it is not found that way; read_latest under the key lock then knows.
bool find_own(const store::Storage &storage, const store::Key &key, store::Record *record);

enum class Claim
{
    claimed,    // `record` is this transaction's claim now
    held,       // another transaction holds the key: `record` is its claim
    read_again, // the key changed since it was read: read it again
    lock_key    // no free slot (or no shared table): read it again under the key lock
};
// Makes `record`, filled as a fresh claim of `key`, which read as absent
// with `ticket`, this transaction's claim: deferred when `deferrable` and the
// claim qualifies, else written as a row.  `key_locked`: the caller holds
// the key lock and read the key under it.
Claim claim_absent(store::Storage &storage, const store::Key &key, store::Record &record,
                   bool deferrable, const Ticket &ticket, bool key_locked);
// Writes the changed `record`, read through this module by its holder: a
// deferred claim's row is inserted, any other version replaced.
void write(store::Storage &storage, store::Record &record);
// Deletes `record`'s version; a deferred claim is written first, so that the
// deletion rolls back with its subtransaction like any other.
void remove(store::Storage &storage, const store::Record &record);

} // namespace idempotency::claims
