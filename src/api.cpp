// SQL entry points (stubs until the storage layer lands).
#include "boundary.hpp"

#define IDEMPOTENCY_STUB(name)                                                                     \
    IDEMPOTENCY_FUNCTION(name)                                                                     \
    {                                                                                              \
        (void)fcinfo;                                                                              \
        ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED), errmsg(#name " is a stub")));      \
        return (Datum)0;                                                                           \
    }
IDEMPOTENCY_STUB(idempotency_begin)
IDEMPOTENCY_STUB(idempotency_complete)
IDEMPOTENCY_STUB(idempotency_checkpoint)
IDEMPOTENCY_STUB(idempotency_release)
IDEMPOTENCY_STUB(idempotency_lookup)
