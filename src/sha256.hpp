// SHA-256 through OpenSSL's libcrypto, in one call (an input too large to
// hold is streamed through PostgreSQL's own context: request_hash.cpp).
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

} // namespace idempotency
