// The settings (GUCs): their variables, and their definitions with PostgreSQL.
#include "boundary.hpp"
#include "settings.hpp"

extern "C"
{
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/memutils.h"
}

namespace idempotency::settings
{

int default_ttl_s = 24 * 3600;
int default_lease_ms = 60 * 1000;
int default_wait_ms = 0;
int max_key_length = 1024;
int max_response_bytes = 1024 * 1024;
bool store_server_errors = false;
int tenant_isolation = tenant_isolation_off;
bool worker_enabled = true;
int expire_interval_ms = 10 * 1000;
int expire_batch_size = 10000;
int summary_interval_ms = 60 * 1000;
int max_deferred_claims = 4096;
bool defer_claims = true;

// Values of idempotency.inject_fault, in the order of idempotency::injected_fault.
static const struct config_enum_entry fault_options[] = {
    {"none", fault_none, false},
    {"exception", fault_exception, false},
    {"out_of_memory", fault_out_of_memory, false},
    {"pause_at_subtransaction_abort", fault_pause_at_subtransaction_abort, false},
    {"pause_before_publish", fault_pause_before_publish, false},
    {"pause_in_fallback", fault_pause_in_fallback, false},
    {"pause_in_read", fault_pause_in_read, false},
    {"pause_before_forwarded_replay", fault_pause_before_forwarded_replay, false},
    {"pause_before_sweep_delete", fault_pause_before_sweep_delete, false},
    {"pause_in_lock_free_routing", fault_pause_in_lock_free_routing, false},
    {"weak_digest", fault_weak_digest, false},
    {"no_caches", fault_no_caches, false},
    {"pause_before_numbering", fault_pause_before_numbering, false},
    {nullptr, 0, false}};

static const struct config_enum_entry tenant_isolation_options[] = {
    {"off", tenant_isolation_off, false},
    {"role", tenant_isolation_role, false},
    {nullptr, 0, false}};

void define()
{
    DefineCustomIntVariable(
        "idempotency.default_ttl", "How long a key is kept when idempotency_begin gets no ttl.",
        "A completed key expires this long after its completion, an unfinished claim this long "
        "after it was made.",
        &default_ttl_s, default_ttl_s, 1, max_duration_s, PGC_USERSET, GUC_UNIT_S, nullptr, nullptr,
        nullptr);
    DefineCustomIntVariable(
        "idempotency.default_lease",
        "How long a committed claim is protected when no lease is given.",
        "After the lease ends, the next idempotency_begin takes the claim over with attempt + 1.",
        &default_lease_ms, default_lease_ms, 1, INT_MAX, PGC_USERSET, GUC_UNIT_MS, nullptr, nullptr,
        nullptr);
    DefineCustomIntVariable(
        "idempotency.default_wait",
        "How long idempotency_begin waits for a busy key when no wait is given.",
        "0 answers in_progress at once.", &default_wait_ms, default_wait_ms, 0, 3600 * 1000,
        PGC_USERSET, GUC_UNIT_MS, nullptr, nullptr, nullptr);
    DefineCustomIntVariable("idempotency.max_key_length", "Longest accepted key, in bytes.",
                            nullptr, &max_key_length, max_key_length, 1, max_key_length_limit,
                            PGC_SUSET, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "idempotency.max_response_bytes",
        "Largest accepted response: the jsonb sizes of body and headers added up.", nullptr,
        &max_response_bytes, max_response_bytes, 0, MaxAllocSize / 2, PGC_SUSET, GUC_UNIT_BYTE,
        nullptr, nullptr, nullptr);
    DefineCustomBoolVariable(
        "idempotency.store_server_errors", "Store responses with status 500 to 599.",
        "When off, completing with a server error drops the claim so that a retry runs again.",
        &store_server_errors, store_server_errors, PGC_USERSET, 0, nullptr, nullptr, nullptr);
    DefineCustomEnumVariable(
        "idempotency.tenant_isolation", "Binds every scope to the role that calls the functions.",
        "role: keys claimed by one role are invisible to every other role; set it per role with "
        "ALTER ROLE ... SET, or for the whole server.",
        &tenant_isolation, tenant_isolation, tenant_isolation_options, PGC_SUSET, 0, nullptr,
        nullptr, nullptr);
    DefineCustomBoolVariable("idempotency.worker_enabled",
                             "Runs the background expiry of keys (needs shared_preload_libraries).",
                             nullptr, &worker_enabled, worker_enabled, PGC_SIGHUP, 0, nullptr,
                             nullptr, nullptr);
    DefineCustomIntVariable("idempotency.expire_interval",
                            "Pause between two expiry rounds over all databases.", nullptr,
                            &expire_interval_ms, expire_interval_ms, 10, 24 * 3600 * 1000,
                            PGC_SIGHUP, GUC_UNIT_MS, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "idempotency.expire_batch_size", "Keys deleted per expiry transaction.",
        "Short transactions keep the worker out of the way of requests and of vacuum.",
        &expire_batch_size, expire_batch_size, 1, 1000000, PGC_SIGHUP, 0, nullptr, nullptr,
        nullptr);
    DefineCustomIntVariable(
        "idempotency.scope_stats_interval",
        "How old the per-scope summary may get before the worker refreshes it.",
        "The summary that idempotency_scope_stats() reads is refreshed after an expiry round "
        "once it is this old; 0: only by idempotency_scope_stats_refresh().",
        &summary_interval_ms, summary_interval_ms, 0, 24 * 3600 * 1000, PGC_SIGHUP, GUC_UNIT_MS,
        nullptr, nullptr, nullptr);
    // A PGC_POSTMASTER setting can only be defined while the postmaster
    // starts: defined later (CREATE EXTENSION without preloading), it is fatal.
    if (process_shared_preload_libraries_in_progress)
        DefineCustomIntVariable(
            "idempotency.max_deferred_claims",
            "Fresh claims that may wait in shared memory for their transaction's completion.",
            "A claim completed in its own transaction is then written once, completed; 0 writes "
            "every claim at once.  Needs shared_preload_libraries.",
            &max_deferred_claims, max_deferred_claims, 0, 1000000, PGC_POSTMASTER, 0, nullptr,
            nullptr, nullptr);
    DefineCustomBoolVariable(
        "idempotency.defer_claims",
        "Writes a fresh claim's row only when its transaction completes, changes or commits it.",
        "Off: every claim is written at once, so that triggers and readers of the table see it "
        "from idempotency_begin on.",
        &defer_claims, defer_claims, PGC_USERSET, 0, nullptr, nullptr, nullptr);
    DefineCustomEnumVariable(
        "idempotency.inject_fault", "Injects a fault, for testing.",
        "exception makes every function throw a C++ exception, out_of_memory a std::bad_alloc; "
        "both must come out as ordinary errors.  The pauses hold this session while another "
        "holds an advisory lock: pause_at_subtransaction_abort the rollback of a "
        "subtransaction (pg_advisory_lock(18756)), pause_before_publish a fresh claim "
        "between its read and its publication (18757), pause_in_fallback a fresh claim "
        "made as if the claims table were full, after its row is written (18758), "
        "pause_in_read a read between a key's index entry and its version (18759), "
        "pause_before_forwarded_replay a begin forwarded without the shard lock, between its "
        "check that the key is completed and the call on the shard's node (18760), "
        "pause_before_sweep_delete the expiry sweep between taking an expired version and "
        "deleting it (18761), pause_in_lock_free_routing a query Citus routes without the "
        "shard's metadata lock, between Citus's planning and its run of it (18763 a begin's "
        "check that its key is completed, 18764 a forwarded replay's or read's call), "
        "pause_before_numbering a role's first key between its read of the tenants' numbers "
        "and its INSERT of one (18765).  weak_digest "
        "keeps 4 bits of each key's digest within its scope, so that keys collide (never on a "
        "server whose keys matter: a key written so is not found without it).  no_caches turns off "
        "the backend-local caches of the table's layout, the digests' secret, the tenants' "
        "numbers and begin's result row, for comparing answers with and without them.",
        &injected_fault, 0, fault_options, PGC_SUSET, GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE, nullptr,
        nullptr, nullptr);
    MarkGUCPrefixReserved("idempotency");
}

} // namespace idempotency::settings
