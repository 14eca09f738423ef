#include "sha256.hpp"

#include <new>
#include <stdexcept>

#include <openssl/evp.h>

// Pure C++ (boundary.hpp's first zone): these functions throw, so this file
// must not see PostgreSQL's headers, whose ereport would longjmp across its
// frames.  Every PostgreSQL header starts from c.h or pg_config.h: their
// guards tell if one came in, here or through sha256.hpp.
#if defined(C_H) || defined(PG_VERSION_NUM)
#error "sha256.cpp is pure C++: a PostgreSQL header is included (see boundary.hpp)"
#endif

namespace idempotency
{

namespace
{

[[noreturn]] void libcrypto_failed()
{
    throw std::runtime_error("SHA-256 computation in libcrypto failed");
}

// libcrypto's SHA-256, fetched from its provider once per process and kept
// until the process exits: OpenSSL 3 fetches it anew whenever EVP_sha256()
// starts a digest, which costs more instructions than hashing a small body.
const EVP_MD *sha256_algorithm()
{
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
    static EVP_MD *fetched = nullptr;
    if (fetched == nullptr)
    {
        fetched = EVP_MD_fetch(nullptr, "SHA256", nullptr);
        if (fetched == nullptr)
            libcrypto_failed();
    }
    return fetched;
#else
    return EVP_sha256();
#endif
}

} // namespace

void sha256(const void *data, size_t size, uint8_t (&digest)[sha256_digest_size])
{
    // One-shot EVP_Digest keeps no context alive, so nothing needs freeing if
    // the caller's transaction is later aborted by a longjmp.
    unsigned int written = 0;
    if (EVP_Digest(data, size, digest, &written, sha256_algorithm(), nullptr) != 1 ||
        written != sha256_digest_size)
        libcrypto_failed();
}

} // namespace idempotency
