// libFuzzer harness for the text form of a request_hash.
//
// Properties, for any input:
//  * parse_hex accepts exactly the strings of 64 hexadecimal digits (the
//    input is read as a C string, up to its first NUL, as request_hash_in
//    gets it), and what it accepts formats back to the lowercased input;
//  * any 32 bytes format to 64 lowercase digits that parse back to them.
#include <cctype>
#include <cstring>
#include <string>

#include "fuzz.hpp"

namespace canonical = idempotency::canonical;

namespace
{

bool is_hex_digest_text(const std::string &text)
{
    if (text.size() != canonical::hex_length)
        return false;
    for (unsigned char c : text)
        if (!isxdigit(c))
            return false;
    return true;
}

std::string lowercase(std::string text)
{
    for (char &c : text)
        c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
    return text;
}

void check_parse(const uint8_t *data, size_t size)
{
    std::string input(reinterpret_cast<const char *>(data), size);
    std::string text(input.c_str()); // up to the first NUL
    uint8_t digest[canonical::digest_size];
    bool parsed = canonical::parse_hex(input.c_str(), digest);
    fuzz::require(parsed == is_hex_digest_text(text),
                  "parse_hex accepts exactly 64 hexadecimal digits");
    if (!parsed)
        return;
    char formatted[canonical::hex_length + 1];
    canonical::format_hex(digest, formatted);
    fuzz::require(formatted == lowercase(text), "a parsed digest formats to the lowercased input");
}

void check_format(const uint8_t *data, size_t size)
{
    if (size < canonical::digest_size)
        return;
    uint8_t digest[canonical::digest_size];
    memcpy(digest, data, sizeof digest);
    char formatted[canonical::hex_length + 1];
    canonical::format_hex(digest, formatted);
    fuzz::require(strlen(formatted) == canonical::hex_length && formatted == lowercase(formatted),
                  "a digest formats to 64 lowercase digits");
    uint8_t parsed[canonical::digest_size];
    fuzz::require(canonical::parse_hex(formatted, parsed) &&
                      memcmp(parsed, digest, sizeof digest) == 0,
                  "a formatted digest parses back to its bytes");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_parse(data, size);
    check_format(data, size);
    return 0;
}
