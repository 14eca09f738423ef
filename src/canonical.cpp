#include "canonical.hpp"

#include <cstring>

// Pure C++ (boundary.hpp's first zone), which test/fuzz links without a
// server: a PostgreSQL header here or in canonical.hpp (each starts from c.h
// or pg_config.h, whose guards these are) would tie it to one.
#if defined(C_H) || defined(PG_VERSION_NUM)
#error "canonical.cpp is pure C++: a PostgreSQL header is included (see boundary.hpp)"
#endif

namespace idempotency::canonical
{

// The prefix is what keeps the rules of request_hash_body apart: every
// encoding of a document starts with it, and the bytes rule's tag differs
// from the document format's name right after it.
constexpr bool starts_with_reserved_prefix(const char *name)
{
    for (size_t i = 0; i < reserved_prefix_length; i++)
        if (name[i] != reserved_prefix[i])
            return false;
    return true;
}
static_assert(reserved_prefix_length == 25, "the reserved prefix is 25 bytes");
static_assert(starts_with_reserved_prefix(jsonb_encoding_v1) &&
                  starts_with_reserved_prefix(body_bytes_encoding) &&
                  jsonb_encoding_v1[reserved_prefix_length] !=
                      body_bytes_encoding[reserved_prefix_length],
              "documents and prefixed bodies encode apart, both under the reserved prefix");

namespace
{

int hex_digit_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

void append_byte(ByteSink sink, char byte)
{
    sink.append(sink.context, &byte, 1);
}

void append_length(ByteSink sink, uint64_t length)
{
    uint8_t big_endian[length_size];
    for (size_t i = 0; i < length_size; i++)
        big_endian[i] = static_cast<uint8_t>(length >> (8 * (length_size - 1 - i)));
    sink.append(sink.context, big_endian, length_size);
}

char tag_of(JsonbItem item)
{
    switch (item)
    {
        case JsonbItem::begin_raw_scalar:
            return tag_raw_scalar;
        case JsonbItem::begin_array:
            return tag_array;
        case JsonbItem::begin_object:
            return tag_object;
        case JsonbItem::end:
            return tag_end;
        case JsonbItem::null:
            return tag_null;
        case JsonbItem::true_value:
            return tag_true;
        case JsonbItem::false_value:
            return tag_false;
        case JsonbItem::string:
            return tag_string;
        case JsonbItem::number:
            return tag_number;
        case JsonbItem::number_binary:
            return tag_number_binary;
    }
    return tag_null; // not reached: the switch names every item
}

} // namespace

bool parse_hex(const char *text, uint8_t (&digest)[digest_size]) noexcept
{
    if (strnlen(text, hex_length + 1) != hex_length)
        return false;
    for (size_t i = 0; i < digest_size; i++)
    {
        int high = hex_digit_value(text[2 * i]);
        int low = hex_digit_value(text[2 * i + 1]);
        if (high < 0 || low < 0)
            return false;
        digest[i] = static_cast<uint8_t>(high << 4 | low);
    }
    return true;
}

void format_hex(const uint8_t (&digest)[digest_size], char (&text)[hex_length + 1]) noexcept
{
    static constexpr char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < digest_size; i++)
    {
        text[2 * i] = digits[digest[i] >> 4];
        text[2 * i + 1] = digits[digest[i] & 0x0F];
    }
    text[hex_length] = '\0';
}

void append_part(ByteSink sink, const void *data, size_t size)
{
    append_length(sink, size);
    sink.append(sink.context, data, size);
}

void append_null_part(ByteSink sink)
{
    append_length(sink, null_part_marker);
}

void append_jsonb_header(ByteSink sink)
{
    sink.append(sink.context, jsonb_encoding_v1, sizeof jsonb_encoding_v1);
}

void append_jsonb_item(ByteSink sink, JsonbItem item, const void *bytes, size_t size)
{
    append_byte(sink, tag_of(item));
    if (item == JsonbItem::string || item == JsonbItem::number || item == JsonbItem::number_binary)
        append_part(sink, bytes, size);
}

size_t json_nesting_depth(const void *text, size_t size) noexcept
{
    const unsigned char *at = static_cast<const unsigned char *>(text);
    const unsigned char *const end = at + size;
    size_t depth = 0, deepest = 0;
    while (at < end)
    {
        unsigned char c = *at++;
        if (c == '"')
        {
            // To the string's end: the next quote that no backslash escapes.
            while (at < end)
            {
                unsigned char in_string = *at++;
                if (in_string == '"')
                    break;
                if (in_string == '\\' && at < end)
                    at++; // the escaped byte, whatever it is
            }
        }
        else if (c == '[' || c == '{')
        {
            if (++depth > deepest)
                deepest = depth;
        }
        else if ((c == ']' || c == '}') && depth > 0)
            depth--;
    }
    return deepest;
}

bool has_reserved_prefix(const void *data, size_t size) noexcept
{
    return size >= reserved_prefix_length &&
           memcmp(data, reserved_prefix, reserved_prefix_length) == 0;
}

void append_body_bytes(ByteSink sink, const void *data, size_t size)
{
    if (has_reserved_prefix(data, size))
        sink.append(sink.context, body_bytes_encoding, sizeof body_bytes_encoding);
    sink.append(sink.context, data, size);
}

} // namespace idempotency::canonical
