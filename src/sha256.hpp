// SHA-256 through OpenSSL's libcrypto: in one call, or fed in pieces.
//
// Pure C++: this header and its source never include PostgreSQL's headers, so
// they may throw; callers reach them only from inside idempotency::guarded().
#pragma once

#include <cstddef>
#include <cstdint>

namespace idempotency
{

constexpr size_t sha256_digest_size = 32;

// Writes the SHA-256 digest of data[0, size) into digest.  Throws
// std::runtime_error if libcrypto fails (for example, when a FIPS provider
// refuses the algorithm).
void sha256(const void *data, size_t size, uint8_t (&digest)[sha256_digest_size]);

// A SHA-256 computation fed in pieces, so that an input never needs to be
// whole in memory: sha256_begin, sha256_update for each piece in order, then
// sha256_final.  The context is libcrypto's, in memory that only sha256_free
// releases; a caller whose frames a PostgreSQL error may longjmp through must
// make sure that sha256_free still runs (request_hash.cpp frees it from a
// memory context reset callback).  begin, update and final throw
// std::runtime_error (std::bad_alloc for memory) if libcrypto fails; a
// context whose update or final threw is only to be freed.
struct Sha256Context;

Sha256Context *sha256_begin();
void sha256_update(Sha256Context *context, const void *data, size_t size);
void sha256_final(Sha256Context *context, uint8_t (&digest)[sha256_digest_size]);
// Frees the context; nothing for nullptr.
void sha256_free(Sha256Context *context) noexcept;

} // namespace idempotency
