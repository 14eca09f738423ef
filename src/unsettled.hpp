// The claims the calling transaction holds that need something done before
// it commits.
//
// A claim made outside a transaction block (autocommit) commits as soon as
// its statement ends.  Unless the caller meant that -- the two-phase
// pattern, which passes an explicit lease -- it is a forgotten BEGIN: the
// work that follows runs outside the claim's transaction, and a crash after
// it leaves a claim that is taken over once its lease ends, so the work runs
// twice.  Such a claim must be completed or released in the same
// transaction; otherwise the commit fails with IK004 and the claim rolls
// back.  A claim inside BEGIN ... COMMIT, or with a lease, is the caller's
// deliberate choice and is left alone.
#pragma once

#include "store.hpp"

namespace idempotency::unsettled
{

// After idempotency_begin answered claimed: remembers the claim when it was
// made outside a transaction block without an explicit lease.
void note_claim(const store::Key &key, bool lease_given);
// After idempotency_complete or idempotency_release: the claim is settled.
void note_settled(const store::Key &key);
// Raises IK004 when a claim noted would commit unsettled; the commit does
// it too, and anything else that runs at commit time may do it first.
void refuse();

} // namespace idempotency::unsettled
