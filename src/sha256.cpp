#include "sha256.hpp"

#include <stdexcept>

#include <openssl/evp.h>

// Pure C++ (boundary.hpp's first zone): sha256() throws, so this file must not
// see PostgreSQL's headers, whose ereport would longjmp across its frames.
// Every PostgreSQL header starts from c.h or pg_config.h: their guards tell if
// one came in, here or through sha256.hpp.
#if defined(C_H) || defined(PG_VERSION_NUM)
#error "sha256.cpp is pure C++: a PostgreSQL header is included (see boundary.hpp)"
#endif

namespace idempotency
{

void sha256(const void *data, size_t size, uint8_t (&digest)[sha256_digest_size])
{
    // One-shot EVP_Digest keeps no context alive, so nothing needs freeing if
    // the caller's transaction is later aborted by a longjmp.
    unsigned int written = 0;
    if (EVP_Digest(data, size, digest, &written, EVP_sha256(), nullptr) != 1 ||
        written != sha256_digest_size)
        throw std::runtime_error("SHA-256 computation in libcrypto failed");
}

} // namespace idempotency
