#include "sha256.hpp"

#include <stdexcept>

#include <openssl/evp.h>

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
