// Tenant numbers: from 0.5.0 on a key's digest (key_digest.hpp), the whole
// primary key of idempotency.keys, is made of its tenant, scope and key.  The
// tenant enters it as a number of this database's own, not as the role's
// OID: pg_dump writes a regrole as the role's name, and a restore into
// another cluster reads it back as that role's OID there, which a digest
// made with the old OID would no longer match.  The numbers are kept in
// idempotency.tenants (number, role), registered with
// pg_extension_config_dump: a dump carries them with the keys, its role
// column written as the role's name and read back by name, so that a
// restored key's digest is found again for the same role under its new OID.
//
// Number 0 is no tenant (idempotency.tenant_isolation = off, the common
// case): no table is read for it.  Any other is assigned on a role's first
// call that may store a key (idempotency_begin, idempotency.key_digest), by
// an INSERT in the caller's transaction, the number drawn from the sequence
// idempotency.tenant_numbers, so that no number is ever handed out twice.
// The table's unique index on the role arbitrates two first calls at once:
// the second INSERT waits for the first one's transaction and, if that
// commits, fails with a unique violation (absorbed: the second reads the
// first's number); if it rolls back, the second's row stands.  A call that
// may store a key never uses a number another transaction still in progress
// assigned: it waits for that transaction's end first (an ordinary lock
// wait), since a rollback would take the number away while keys written
// under it stayed -- one role's keys split under two numbers, and a retry
// run twice.  A read uses it (it must find that transaction's keys, held).
//
// The rows of roles that no longer exist are deleted by the expiry sweep
// (store::expire_here), and left out of dumps (the table's dump condition):
// a dump restores its rows by role name, and a row of a dropped role would
// carry a bare OID, which the restore would read as whichever role has that
// OID there.  Their keys, which nobody can reach, are deleted by the sweep
// as before (store.cpp, orphaned).
//
// Cache (backend-local): the numbers of the last few roles looked up.
//  * A number read as committed, with nobody deleting its row, is kept until
//    a catalog invalidation of any role (pg_authid: DROP ROLE, ALTER ROLE;
//    the only way a row is deleted is the sweep's, after its role was
//    dropped, and a dropped role's OID may be given to a new role once the
//    OID counter wraps around) or a relcache invalidation of the table
//    (TRUNCATE, DROP EXTENSION).  Nothing else changes a committed row: the
//    extension never updates one, and doc/operations.md tells DBAs not to.
//  * A number this transaction assigned (its own INSERT, not committed) is
//    kept only for that transaction, and forgotten at its end -- commit,
//    rollback or prepare -- and at the rollback of any subtransaction, which
//    may be the one whose INSERT it was (an error, a cancel, ROLLBACK TO, a
//    PL/pgSQL exception block).  So a number that a rollback takes away is
//    never used after it: the next call reads the table, finds no row, and
//    assigns another.
//  * A number another transaction in progress assigned is never kept.
//  * An entry is stored only if no invalidation arrived while it was read,
//    and the table is read only under its lock, which processes the
//    invalidations before it.  idempotency.inject_fault = no_caches turns the
//    cache off (the differential test, test/t/023).
#pragma once

#include "key_digest.hpp"
#include "pg.hpp"

namespace idempotency::store
{

// The number of `role` (the keys' tenant column) in this database's
// digests: 0 for no tenant (InvalidOid).  DigestUse::read: the committed
// number, or one that a transaction still in progress (this one or another)
// assigned; false when there is none (the role has no keys).
// DigestUse::write: the committed number or this transaction's own; when the
// role has none, assigns one (an INSERT: needs a writable transaction, and
// may wait for another transaction assigning one).  Call it for writing
// before taking any key lock: the wait is for another transaction's end.
bool tenant_number(Oid role, DigestUse use, int32 *number);

// Forgets cached numbers when `relid` is idempotency.tenants, or when all
// relations are invalidated (InvalidOid): store.cpp's relcache callback.
void forget_tenant_numbers(Oid relid);

// The sweep's: deletes the rows of roles that no longer exist, each only if
// nobody is changing it (the sweep never waits).  Nothing when the table is
// missing (a database still at 0.4.0 or older) or, with skip_if_busy, when
// its lock is not free at once.
void forget_dropped_tenants(bool skip_if_busy);

} // namespace idempotency::store
