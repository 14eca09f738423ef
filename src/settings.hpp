// Settings (GUCs) of the extension; defined and registered in settings.cpp, at the
// bottom of the layers: every layer reads them, and they call nothing above.
#pragma once

namespace idempotency::settings
{

enum TenantIsolation
{
    tenant_isolation_off,
    tenant_isolation_role // every scope belongs to the calling role
};

// The longest ttl or lease, as a setting or an argument: 10 years of 365 days.
constexpr int max_duration_s = 3650 * 24 * 3600;
// Scope and key share one primary-key entry, which btree caps at about 2700
// bytes; two maximal values must fit.
constexpr int max_key_length_limit = 1024;

extern int default_ttl_s;        // idempotency.default_ttl
extern int default_lease_ms;     // idempotency.default_lease
extern int default_wait_ms;      // idempotency.default_wait
extern int max_key_length;       // idempotency.max_key_length (bytes)
extern int max_response_bytes;   // idempotency.max_response_bytes
extern bool store_server_errors; // idempotency.store_server_errors
extern int tenant_isolation;     // idempotency.tenant_isolation: tenant_isolation_*
extern bool worker_enabled;      // idempotency.worker_enabled
extern int expire_interval_ms;   // idempotency.expire_interval
extern int expire_batch_size;    // idempotency.expire_batch_size
extern int summary_interval_ms;  // idempotency.scope_stats_interval (0: not by the worker)
extern int max_deferred_claims;  // idempotency.max_deferred_claims (slots; 0: none)
extern bool defer_claims;        // idempotency.defer_claims

// Defines every setting and reserves the prefix "idempotency.": in _PG_init.
void define();

} // namespace idempotency::settings
