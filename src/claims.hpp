// The claims module: who may hold an idempotency key, how every other
// transaction learns of it, and everything that happens to a key's record
// from its first claim to its end.  Every rule about claims is stated here,
// and only this module keeps them:
//   claims.cpp         a record's life: what a begin finds and what it may
//                      do about it, takeover, the key-lock loop (rule K),
//                      waiting, fencing, the holder's writes, forget, what a
//                      lookup shows, and what is expired
//   shared_claims.cpp  the shared claims table that arbitrates fresh claims,
//                      and deferred claims (rules A, F, O, L, C, X and 1);
//                      the read of a key's newest state that every decision
//                      starts from (rule R); called by claims.cpp only
//                      (shared_claims.hpp)
// The SQL functions (api.cpp, inspect.cpp) reach one entry point below for
// each through the routed storage session (session.hpp), which opens the
// storage or forwards the call to the shard's node, and take no key lock and
// wait on no transaction themselves.  The storage layer below (store.hpp)
// knows rows and versions only, and never calls back.  One rule about
// commits lives beside this module, in unsettled.hpp: a claim made outside a
// transaction block must be settled before it commits (IK004); this module
// keeps its books (after_begin, after_write), for a call that ran here and
// for one forwarded to another node alike.
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
//  R.  Reading a version another transaction is changing.  A read of the
//      newest version (read_latest) that finds the committed version being
//      deleted or replaced by a transaction in progress goes on to that
//      transaction's new version; a replacement is always found while its
//      transaction is in progress (store.cpp, read_replacement).  A read that
//      ends without a version therefore saw a deletion -- or a transaction
//      that ended between the two checks: one that rolled back (the
//      committed version is the record again, and the new one is gone) or
//      committed a deletion.  So before it answers held without a version,
//      the reader checks that the holder is still in progress, and if not
//      reads the key again: the committed version, its replacement or no
//      record, what it would read a moment later.  A holder still in progress
//      after the read cannot have rolled back within it: the answer is a
//      deletion in progress, and a lookup or a begin never answers with the
//      NULL columns of a record that exists.
//
// The rules of a record's life after its claim:
//  T.  Takeover and fencing.  Every claim has an attempt: 1 when fresh.  An
//      unfinished claim whose lease ended -- committed, or this
//      transaction's own after idempotency_release() or a dropped server
//      error -- is taken over under the key lock (K) by a begin of the same
//      request, with attempt + 1 and the recovery point kept; by a begin of
//      another request only with take_over_mismatch, with attempt + 1 and no
//      recovery point.  An own claim whose lease ended is renewed that way
//      too: answering claimed without it would let another caller take it
//      over once this transaction commits.  A holder's write that names an
//      attempt other than the record's is refused with IK003 before
//      anything else, so that a holder whose lease ran out never stores its
//      result over its successor's, nor undoes it.
//  H.  The holder's writes.  complete, checkpoint and release change a live
//      unfinished claim (IK001 when there is none, IK002 when it is
//      completed) -- or, to replace a response, a completed record with the
//      attempt that completed it.  The caller's own uncommitted claim is
//      found by its address or its deferred record, without the key lock:
//      every other writer sees it held and keeps off until this transaction
//      ends.  Any other record is read under the key lock (K), after waiting
//      for another transaction's uncommitted change, as an UPDATE waits for
//      a concurrent one.  forget deletes any live record the same way;
//      another transaction's unfinished claim only with its attempt.
//  W.  Waiting.  A begin answered in_progress, given wait => ..., waits for
//      a holder whose transaction is open on that transaction (an ordinary
//      lock wait: cancellable, seen by the deadlock detector, cut short with
//      in_progress by a shorter lock_timeout) and polls the lease of a
//      committed one, then decides afresh.  These waits are made holding no
//      key lock.
//  E.  Expiry.  A committed record past its expiry -- completed, or
//      unfinished with its lease ended too -- is as good as absent: a begin
//      claims over it (under K), lookups and listings do not show it, the
//      holder's writes answer IK001 and forget false.  The sweep
//      (store::expire, from idempotency_expire() and the worker) deletes
//      what `expired` says under the key lock and the row's tuple lock,
//      both taken only when free: it never waits for a request.  A record
//      another transaction is still changing is never expired: its holder
//      decides.
//
// The states of a key, as a begin classifies what it reads (read_latest):
//   state         what the newest version or entry is           begin answers
//   absent        nothing, or nothing another transaction holds  claimed (A, F, K)
//   expired       committed, past its expiry (E)                 claimed over it (K, E)
//   held          another transaction's uncommitted claim, or a  in_progress, retry in 1 s;
//                 version it is deleting or replacing (while it  waits on it (W)
//                 is in progress: R)
//   leased        a committed unfinished claim, lease running    in_progress until the lease
//                                                                ends; polls it (W)
//   lease ended   an unfinished claim, lease over (committed,    claimed: taken over,
//                 or own after release or a dropped 5xx)         attempt + 1 (K, T)
//   own claim     this transaction's claim, lease running        claimed, the same attempt
//   completed     a stored response                              replay
//   (any of them) for another request                            mismatch; a dead claim is
//                                                                taken over on request (T)
//
// Every transition, the rules that govern it, and the tests that hold it
// (test/specs/*.spec isolation, sql/*.sql pg_regress, test/t/*.pl TAP):
//   transition                          rules     tests
//   fresh claim, deferred               A O L 1   claim_arbitration, deferred_claims, t/018,
//                                                 t/023, t/024
//   fresh claim, its row at once        A         claim_race, isolation_levels, t/024
//   fresh claim with no free slot       K F       claim_arbitration, t/018, t/023, t/024
//   fresh claim without the table       K         t/023, t/024 (servers without the table)
//   claim over an expired record        K E       expiry_races, api.sql
//   takeover, same request              K T       lease_takeover, api.sql
//   takeover of another request's       K T       store_api, store_api.sql
//   wait for a holder, then decide      W         wait_timeouts, claim_race, deferred_claims
//   read while a deletion or            R         replacement_rollback, replaced_version,
//     replacement rolls back or commits           t/023, t/024
//   complete                            H T       api.sql, lease_takeover, store_api
//   replace a stored response           H T       store_api.sql
//   complete a 5xx, not stored: the     H         api.sql
//     lease ends
//   checkpoint: lease renewed           H T       lease_takeover, api.sql
//   release: the lease ends             H T       api.sql, deferred_savepoints
//   forget                              K H T     store_api, store_api.sql
//   expire (the sweep)                  K E       expiry_races, store_api.sql, t/013, t/020
//   deferred claim's row written        L C       deferred_savepoints, t/018
//   rollback to a savepoint             O L       savepoint, deferred_savepoints, api.sql
//   commit or prepare                   C         deferred_claims, t/018
//   backend exit                        X         t/018
//   commit of an unsettled claim        IK004     api.sql (unsettled.hpp)
// The differential test (t/023) runs random sequences of all of them with
// and without deferral, the shared table and its slots: the answers agree.
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
//
// Backend-local state: this transaction's own records (shared_claims.cpp).
// Cleared at every transaction end, trimmed at every subtransaction rollback,
// so that it never outlives what it describes.  claims.cpp keeps nothing
// across calls.
#pragma once

#include "store.hpp"

namespace idempotency::claims
{

// Asks for the shared claims table (module.cpp's shmem_request_hook), then
// finds or creates it (its shmem_startup_hook).
void reserve_shared_memory();
void attach_shared_memory();

// The end of a ttl or lease that starts at `t`: calendar arithmetic, as
// timestamptz + interval.  Arguments are checked by it (arguments.hpp), so
// that a ttl or lease accepted is one this module can add.
TimestampTz plus_interval(TimestampTz t, const Interval *interval);

// ---------------------------------------------------------------------------
// idempotency_begin
// ---------------------------------------------------------------------------

enum class Outcome
{
    claimed,
    replay,
    in_progress,
    mismatch
};

// A begin's arguments, checked (arguments.hpp), with the stored key.
struct BeginRequest
{
    store::Key key;
    Datum request; // request_hash
    Interval *ttl;
    Interval *lease;  // as given, or the default
    bool lease_given; // the two-phase pattern's explicit lease
    int64 wait_us;
    bool has_claim_data;
    Datum claim_data;        // jsonb, when has_claim_data
    bool take_over_mismatch; // take over a dead claim of another request (T)
};

struct BeginAnswer
{
    Outcome outcome;
    store::Record record; // what the answer shows of the key
    int64 retry_after_us; // in_progress only
};

// Decides what `request` gets of its key and makes it so: a claim (A, F,
// K, T), a replay, a mismatch, or in_progress -- after waiting up to
// request.wait_us for the holder (W).  Counts the answer.
BeginAnswer begin(store::Storage &storage, const BeginRequest &request);
// The answer of a begin that a read alone can give, a replay or a
// mismatch, from `storage` opened to read; false when the key needs
// begin() (with Citus: the shard opened to write).  Counts the answer.
bool answer_from_read(const store::Storage &storage, const BeginRequest &request,
                      BeginAnswer *answer);
// The books of the commit (IK004, unsettled.hpp), kept after a begin has
// run: here, once its storage is closed, or on the shard's node (forwarded
// by Citus), whose claim this transaction commits all the same.  `claimed`:
// it answered claimed.
void after_begin(const BeginRequest &request, bool claimed);

// ---------------------------------------------------------------------------
// The holder's writes: complete, checkpoint, release, and forget (H, T)
// ---------------------------------------------------------------------------

// The attempt a write names, if any (T).
struct Fence
{
    bool given;
    int32 attempt;
};

// The holder's writes, by name.
enum class Write
{
    complete,
    checkpoint,
    release,
    forget
};

// Whether a response of `status` is stored: false for a server error while
// idempotency.store_server_errors is off -- complete() then ends the claim's
// lease instead, so that a retry runs again.
bool stores_response(int32 status);

// What idempotency_complete stores.
struct Response
{
    int32 status; // stored or not as stores_response() says
    bool replace; // may replace a completed record's response, with the fence
    NullableDatum body;
    NullableDatum body_bytes;
    NullableDatum headers;
    bool body_kept;    // within idempotency.max_response_bytes; else omitted
    bool headers_kept; // the same for the headers alone
    // The caller's checks of what this table can hold (one still at 0.1.0),
    // made once the claim is found to be the caller's and before anything
    // changes: a caller without the claim hears IK001-IK003 first.
    void (*check_table)(const store::Storage &storage, void *arg);
    void *check_arg;
};

// Completes the caller's claim of `key` with `response` (or, with
// response.replace, replaces a stored one); true when it replaced one.
bool complete(store::Storage &storage, const store::Key &key, Fence fence,
              const Response &response);
// Renews the claim's lease -- `lease`, or without it the claim's own lease
// length (`default_lease` for a claim that has none) -- and keeps
// `recovery_point` unless it is NULL.  Returns the lease's new end.
TimestampTz checkpoint(store::Storage &storage, const store::Key &key, Fence fence,
                       NullableDatum recovery_point, Interval *lease, Interval *default_lease);
// Ends the claim's lease now: the next begin takes it over (T).
void release(store::Storage &storage, const store::Key &key, Fence fence);
// Deletes the key's live record; false when there is none.
bool forget(store::Storage &storage, const store::Key &key, Fence fence);
// The books of the commit (IK004), kept after a holder's write has run, as
// after_begin's: complete, release and forget settle the claim.  After the
// storage is closed, whose AFTER triggers may still fail and undo the write.
void after_write(Write write, const store::Key &key);

// ---------------------------------------------------------------------------
// Reads and expiry
// ---------------------------------------------------------------------------

// The key's record for idempotency_lookup: as the statement's snapshot sees
// it, or (latest) the newest version as a begin sees it, a claim of a
// transaction still in progress included.  Neither waits.  False when it
// shows nothing: no record, or an expired one (E).  A key that another
// transaction is deleting shows as not found, held by that transaction; one
// it is replacing, as the replacement, held by it (store.cpp, read_replacement);
// one whose deletion or replacement ended during the read, as it is after (R).
bool lookup(const store::Storage &storage, const store::Key &key, bool latest,
            store::Record *record);
// Writes the rows of this transaction's deferred claims that have none yet,
// as the commit would (for readers of the table itself, such as a listing);
// true when it wrote any.
bool write_all();
// Whether `record`, read at `now`, is there for its readers: found and not
// expired (E).
bool live(const store::Record &record, TimestampTz now);
// Up to `max_records` live records of `scope` (a stored key whose key is
// unused), after `after_key` in the primary key's order (store::KeyScan),
// as `snapshot` sees them, each given to put(record, arg).
void list(const store::Storage &storage, const store::Key &scope, Datum after_key,
          Snapshot snapshot, int max_records, void (*put)(const store::Record &record, void *arg),
          void *arg);
// Whether `record` is past its expiry at `now` (E): a committed record of
// which the sweep may delete.
bool expired(const store::Record &record, TimestampTz now);
// Deletes expired records on this node (store::expire_here, which says
// how), up to `max_rows` (no limit when < 0).
bool expire_here(TimestampTz now, int64 max_rows, store::Pace pace, bool skip_if_busy,
                 int64 *deleted);

} // namespace idempotency::claims
