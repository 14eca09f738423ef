// Background expiry: one launcher per cluster, one short-lived sweeper per
// database and round.
#pragma once

namespace idempotency::worker
{

// Registers the launcher; called from _PG_init while preloading.
void register_launcher();

} // namespace idempotency::worker
