// libFuzzer harness for the framing of request parts, as
// request_hash(VARIADIC text[]) frames them before hashing.
//
// Property: framing is injective.  The input is read as a list of parts, each
// NULL or a byte string; its framing must decode back to exactly that list,
// so no two different lists ever frame (and hash) alike.
#include <optional>
#include <string>
#include <vector>

#include <fuzzer/FuzzedDataProvider.h>

#include "fuzz.hpp"

namespace canonical = idempotency::canonical;

namespace
{

using Part = std::optional<std::string>; // nullopt: a NULL part
using Parts = std::vector<Part>;

Parts parts_from(FuzzedDataProvider &input)
{
    Parts parts;
    size_t count = input.ConsumeIntegralInRange<size_t>(0, 16);
    while (parts.size() < count && input.remaining_bytes() > 0)
    {
        if (input.ConsumeBool())
            parts.emplace_back(std::nullopt);
        else
            parts.emplace_back(input.ConsumeRandomLengthString());
    }
    return parts;
}

std::string frame(const Parts &parts)
{
    std::string framed;
    for (const Part &part : parts)
    {
        if (part)
            canonical::append_part(fuzz::string_sink(framed), part->data(), part->size());
        else
            canonical::append_null_part(fuzz::string_sink(framed));
    }
    return framed;
}

// Reads the framing back, independently of the encoder: 8-byte big-endian
// lengths, the NULL marker, then that many bytes.
Parts unframe(const std::string &framed)
{
    Parts parts;
    size_t at = 0;
    while (at < framed.size())
    {
        fuzz::require(framed.size() - at >= canonical::length_size, "a length is complete");
        uint64_t length = 0;
        for (size_t i = 0; i < canonical::length_size; i++)
            length = length << 8 | static_cast<uint8_t>(framed[at + i]);
        at += canonical::length_size;
        if (length == canonical::null_part_marker)
        {
            parts.emplace_back(std::nullopt);
            continue;
        }
        fuzz::require(length <= framed.size() - at, "a part is as long as its length says");
        parts.emplace_back(framed.substr(at, length));
        at += length;
    }
    return parts;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FuzzedDataProvider input(data, size);
    Parts parts = parts_from(input);
    fuzz::require(unframe(frame(parts)) == parts, "framed parts decode to the same list");
    return 0;
}
