// libFuzzer harness for request_hash_body's bytes rule (canonical.cpp).
//
// Properties, for any input:
//  * the bytes rule's encoding of a body decodes back to exactly that body
//    (so no two bodies encode, and hash, alike); it is the body itself unless
//    the body starts with the reserved prefix; and it never starts with the
//    name of the jsonb format, so that no body is ever hashed like a
//    document (every document's encoding starts with that name).
#include <cstring>
#include <string>

#include "fuzz.hpp"

namespace canonical = idempotency::canonical;

namespace
{

// The rule's bytes, spelled out here rather than taken from canonical.hpp:
// a change to them changes stored digests, and must show here.
const std::string reserved_prefix = "idempotency.request_hash.";
const std::string bytes_tag("idempotency.request_hash.bytes\0", 31);
const std::string jsonb_name("idempotency.request_hash.jsonb.v1\0", 34);

bool starts_with(const std::string &bytes, const char *prefix, size_t length)
{
    return bytes.size() >= length && bytes.compare(0, length, prefix, length) == 0;
}

void check_bytes_rule(const std::string &body)
{
    std::string encoded;
    canonical::append_body_bytes(fuzz::string_sink(encoded), body.data(), body.size());
    const bool prefixed = starts_with(body, reserved_prefix.data(), reserved_prefix.size());
    fuzz::require(prefixed == canonical::has_reserved_prefix(body.data(), body.size()),
                  "has_reserved_prefix is a test of the first 25 bytes");
    // Decoded independently of the encoder: the tag, then a prefixed body;
    // or an unprefixed body as it is.
    std::string decoded;
    if (starts_with(encoded, bytes_tag.data(), bytes_tag.size()))
    {
        decoded = encoded.substr(bytes_tag.size());
        fuzz::require(starts_with(decoded, reserved_prefix.data(), reserved_prefix.size()),
                      "only a body with the reserved prefix is tagged");
    }
    else
    {
        decoded = encoded;
        fuzz::require(!prefixed, "a body with the reserved prefix is tagged");
    }
    fuzz::require(decoded == body, "the bytes rule's encoding decodes to the body");
    fuzz::require(!starts_with(encoded, jsonb_name.data(), jsonb_name.size()),
                  "no body encodes like a document");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    std::string input(reinterpret_cast<const char *>(data), size);
    check_bytes_rule(input);
    return 0;
}
