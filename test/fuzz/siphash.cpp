// src/siphash.cpp against OpenSSL's SIPHASH (c = 2, d = 4): the input's
// first 16 bytes are the key, the rest the message; both outputs must be
// OpenSSL's, byte for byte.
#include <cstring>

#include <openssl/evp.h>
#include <openssl/params.h>

#include "fuzz.hpp"
#include "siphash.hpp"

namespace
{

bool openssl_siphash(const uint8_t *key, const uint8_t *data, size_t size, size_t out_size,
                     uint8_t *out)
{
    static EVP_MAC *mac = EVP_MAC_fetch(nullptr, "SIPHASH", nullptr);
    EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : nullptr;
    size_t wanted = out_size, written = 0;
    OSSL_PARAM params[] = {OSSL_PARAM_construct_size_t("size", &wanted), OSSL_PARAM_END};
    bool ok = ctx && EVP_MAC_init(ctx, key, 16, params) && EVP_MAC_update(ctx, data, size) &&
              EVP_MAC_final(ctx, out, &written, out_size) && written == out_size;
    EVP_MAC_CTX_free(ctx);
    return ok;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 16)
        return 0;
    uint8_t key[16];
    memcpy(key, data, 16);
    const uint8_t *message = data + 16;
    size_t length = size - 16;
    uint8_t ours[16], theirs[16];
    idempotency::siphash::hash128(key, message, length, ours);
    fuzz::require(openssl_siphash(key, message, length, 16, theirs) && !memcmp(ours, theirs, 16),
                  "SipHash-2-4-128 differs from OpenSSL's");
    uint64_t h = idempotency::siphash::hash64(key, message, length);
    for (int i = 0; i < 8; i++)
        ours[i] = uint8_t(h >> (8 * i));
    fuzz::require(openssl_siphash(key, message, length, 8, theirs) && !memcmp(ours, theirs, 8),
                  "SipHash-2-4-64 differs from OpenSSL's");
    return 0;
}
