// The request_hash type: a 32-byte SHA-256 digest, passed by reference.
#pragma once

#include "pg.hpp"

namespace idempotency
{

constexpr size_t request_hash_size = 32;

struct RequestHash
{
    uint8_t bytes[request_hash_size];
};
// A request_hash Datum points at the type's 32 bytes on disk or in palloc'd
// memory and is read through this struct (datum_get_request_hash), which the
// shared claims table also holds (claims.cpp's Entry): the struct must be
// exactly those bytes.
static_assert(fits_postgres_memory<RequestHash> && sizeof(RequestHash) == request_hash_size &&
                  std::has_unique_object_representations_v<RequestHash>,
              "a RequestHash is the type's 32 bytes, nothing more");

inline const RequestHash *datum_get_request_hash(Datum d)
{
    return reinterpret_cast<const RequestHash *>(DatumGetPointer(d));
}

inline bool request_hash_equal(const RequestHash *a, const RequestHash *b)
{
    return memcmp(a->bytes, b->bytes, request_hash_size) == 0;
}

// Writes the 64-digit lowercase hex form plus a NUL into out[65].
void request_hash_to_hex(const RequestHash *hash, char *out);

} // namespace idempotency
