// placeholder: the request_hash type lands here
#include "boundary.hpp"
#define STUB(name) IDEMPOTENCY_FUNCTION(name) { (void)fcinfo; ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED), errmsg(#name " is a stub"))); return (Datum)0; }
STUB(request_hash_in) STUB(request_hash_out) STUB(request_hash_recv) STUB(request_hash_send)
STUB(request_hash_from_bytea) STUB(request_hash_from_text) STUB(request_hash_from_jsonb) STUB(request_hash_from_parts)
STUB(request_hash_from_digest) STUB(request_hash_digest)
STUB(request_hash_eq) STUB(request_hash_ne) STUB(request_hash_lt) STUB(request_hash_le) STUB(request_hash_gt) STUB(request_hash_ge)
STUB(request_hash_cmp) STUB(request_hash_hash) STUB(request_hash_hash_extended)
