// The key digest: from 0.5.0 on the primary key of idempotency.keys is the
// digest alone, a 128-bit keyed hash of (tenant, scope, key) under a secret
// of the database: 16 bytes, which a descent compares as one column.  The
// record keeps its tenant, scope and key beside it, and every read compares
// them after the fetch (store.cpp): two keys whose digests are equal are
// never taken for one another; the second fails with IK008
// (errcode_key_digest_collision) instead.  The tenant enters the digest as
// its number in this database (tenants.hpp: 0 for no tenant), not as the
// role's OID, which a restore into another cluster changes.
//
// The construction, in memcmp (uuid) order of the 16 bytes:
//   bytes 0-3   the top 32 bits of SipHash-2-4-64(secret, 0x01 | tenant |
//               scope)
//   bytes 4-15  96 bits of SipHash-2-4-128(secret, 0x02 | tenant | length
//               of scope | scope | key)
// (the tenant's number and the length as 4 little-endian bytes each; the
// leading byte keeps the two inputs apart.)  The first four bytes gather a
// tenant's keys of a scope in one range of the primary key, so that
// idempotency_keys() pages through a scope as deep as it goes at the cost of
// one page (store::begin_key_scan); within a tenant's scope, two keys share
// a digest with a chance of 2^-96 per pair, and otherwise 2^-128.  Without
// the secret, nobody can choose keys whose digests collide (SipHash is a
// PRF; siphash.hpp), another tenant's included.
//
// The secret: 16 random bytes, the one row of idempotency.digest_secret,
// made by the install (the update to 0.5.0) and committed with it -- never
// by a request, whose transaction would hold the lock that makes it to its
// end (a prepared one indefinitely) -- registered with
// pg_extension_config_dump so that pg_dump keeps it with the keys (a
// restored row replaces the one the restore's CREATE EXTENSION made).  A
// database without one (a DBA deleted it) gets one from the first write
// only while it has no keys.  It never changes: the digests stored
// are only found with it.  With Citus, idempotency_distribute() makes the
// table a reference table, so that every node -- and every node a shard
// moves to -- has the same secret (citus_placement.hpp).
//
// Cache (backend-local): the secret, once read as committed, for the OID of
// the relation it was read from.  Safe: a committed secret never changes
// (the extension never updates or deletes it; doc/operations.md says a DBA
// must not either), and the relation it was read from goes away only through
// DROP EXTENSION, TRUNCATE or a Citus placement change, each of which sends
// a relcache invalidation of that relation, which forgets it.  A secret
// written by a transaction still open (this one or another) is never cached:
// a rollback, also of a subtransaction, takes it away.  With it, the last
// digest computed and its input -- the tenant's number, the scope and the
// key (a request's begin and complete digest the same key) -- made with the
// cached secret and forgotten with it: a function of that input and the
// secret alone, it stays right as long as the secret does, whichever role a
// number is then found for.  The tenants' numbers have a cache of their own
// (tenants.hpp).
#pragma once

#include "pg.hpp"

extern "C"
{
#include "utils/uuid.h"
}

namespace idempotency::store
{

struct Storage;

enum class DigestUse
{
    read, // no secret or no tenant number yet: no such key is stored, and the answer is false
    write // make the secret, number the tenant if need be (writes: needs a writable transaction)
};

// The digest of a key -- its tenant (the role's OID, InvalidOid for none),
// scope and key (text, as stored: store::stored_key) -- for this database.
// False only for DigestUse::read, when the database has no secret yet or
// the tenant no number (then no key of it is stored).  DigestUse::write
// assigns the tenant its number if it has none (tenants.hpp).  A write that
// has to make the secret refuses to when `keys` (the relation it writes to,
// when given) holds keys already: they were stored under a secret that is
// gone.
bool key_digest(Oid tenant, Datum scope, Datum key, DigestUse use, pg_uuid_t *digest,
                const Storage *keys = nullptr);

// Forgets the cached secret (and digests) when `relid`, the relation it was
// read from, is invalidated, or all are (InvalidOid): store.cpp's relcache
// callback calls it.
void forget_secret(Oid relid);

// The digest bounds of a tenant's keys of a scope: every such key has a
// digest in [*low, *high] (other tenants' and scopes' keys may share the
// range).  False when no such key can exist: the database has no secret
// yet, or the tenant no number.
bool scope_digest_range(Oid tenant, Datum scope, pg_uuid_t *low, pg_uuid_t *high);

} // namespace idempotency::store
