// Module magic, _PG_init and the shared-memory hooks: the top of the layers, the one
// file whose includes run up to every layer it starts (doc/developing.md).
#include "boundary.hpp"
#include "citus_routing.hpp"
#include "claims.hpp"
#include "log_gate.hpp"
#include "settings.hpp"
#include "stats.hpp"
#include "worker.hpp"

extern "C"
{
#include "miscadmin.h"
#include "storage/ipc.h"

PG_MODULE_MAGIC;

// PostgreSQL 15's fmgr.h does not declare it.
void _PG_init(void);
}

// Shared memory of the counters and of the deferred claims: asked for while
// the postmaster loads the preloaded library, set up once it exists.
static shmem_request_hook_type previous_request_hook = nullptr;
static shmem_startup_hook_type previous_startup_hook = nullptr;

static void request_shared_memory()
{
    if (previous_request_hook)
        previous_request_hook();
    idempotency::stats::reserve_shared_memory();
    idempotency::claims::reserve_shared_memory();
}

static void attach_shared_memory()
{
    if (previous_startup_hook)
        previous_startup_hook();
    idempotency::stats::attach_shared_memory();
    idempotency::claims::attach_shared_memory();
}

void _PG_init(void)
{
    idempotency::guarded([] {
        idempotency::settings::define();
        // In every backend that loads the library, preloaded or not: a
        // session's first statement may fail before any of our functions
        // is called (log_gate.cpp).
        idempotency::log_gate::install();
        // Shared memory and workers exist only when the library is preloaded;
        // loaded later, the functions work and count nothing.
        if (!process_shared_preload_libraries_in_progress)
            return;
        previous_request_hook = shmem_request_hook;
        shmem_request_hook = request_shared_memory;
        previous_startup_hook = shmem_startup_hook;
        shmem_startup_hook = attach_shared_memory;
        if (!IsBinaryUpgrade)
            idempotency::worker::register_launcher();
        idempotency::citus_routing::guard_delegation();
    });
}
