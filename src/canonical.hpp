// The byte formats behind request_hash: the 64-digit text form of a digest,
// the framing of request parts, and the canonical encoding of a jsonb
// document.  A stored hash depends on these bytes, so they are defined here
// once; request_hash.cpp reduces PostgreSQL values to them.
//
// Pure C++: this header and its source never include PostgreSQL's headers,
// so the fuzz harnesses in test/fuzz link them without a server.  Nothing here
// throws.  The encoders write through a ByteSink; request_hash.cpp's sink
// appends to a StringInfo and may raise a PostgreSQL error, which longjmps
// through these functions -- so they keep no object that has a destructor.
#pragma once

#include <cstddef>
#include <cstdint>

namespace idempotency::canonical
{

constexpr size_t digest_size = 32;
constexpr size_t hex_length = 2 * digest_size;

// Parses a NUL-terminated string of exactly hex_length hexadecimal digits of
// either case; false, leaving digest unspecified, for anything else.
bool parse_hex(const char *text, uint8_t (&digest)[digest_size]) noexcept;

// Writes the lowercase hex form of digest and a terminating NUL.
void format_hex(const uint8_t (&digest)[digest_size], char (&text)[hex_length + 1]) noexcept;

// Where encoded bytes go: append(context, data, size) adds them at the end.
struct ByteSink
{
    void *context;
    void (*append)(void *context, const void *data, size_t size);
};

// ---------------------------------------------------------------------------
// Request parts: each part is its length (8 bytes, most significant first)
// followed by its bytes, so that concatenated parts cannot be re-split:
// ('ab','c') and ('a','bc') frame differently.  A NULL part is the length
// null_part_marker and no bytes; no part can be that long, so NULL differs
// from every text, '' included.
// ---------------------------------------------------------------------------

constexpr size_t length_size = 8;
constexpr uint64_t null_part_marker = UINT64_MAX;

void append_part(ByteSink sink, const void *data, size_t size);
void append_null_part(ByteSink sink);

// ---------------------------------------------------------------------------
// jsonb documents: the tokens of jsonb's iterator, one after another.
// Documents that jsonb's = finds equal must encode alike, and unequal ones
// differently:
//  * jsonb already sorts object keys, keeps the last of duplicate keys and
//    stores no whitespace; its iterator yields keys in that sorted order;
//  * numbers are equal when numerically equal (1 = 1.0 = 1e0) although their
//    text differs, so the caller gives them in a normalised text (PostgreSQL's
//    numeric_normalize, which drops insignificant zeros);
//  * strings and keys are equal only byte for byte, so their bytes are used;
//  * a top-level scalar ('1') is not equal to an array ('[1]'): jsonb stores
//    it as a "raw scalar" pseudo-array, which gets its own opening tag;
//  * every string and number is tagged and length-prefixed and every
//    container closed, so the encoding of one document is never that of
//    another.
// ---------------------------------------------------------------------------

// What the iterator yields.  Keys, values and array elements are encoded
// alike: their position in the document tells them apart.
enum class JsonbItem
{
    begin_raw_scalar,
    begin_array,
    begin_object,
    end, // of an array or object
    null,
    true_value,
    false_value,
    string, // bytes: the string's bytes
    number  // bytes: the normalised text of the number
};

// The format's name, written first so that a later format can be told apart
// from hashes already stored; its terminating NUL is part of it.
constexpr char jsonb_encoding_v1[] = "idempotency.request_hash.jsonb.v1";

// The one-byte tag of each item.
constexpr char tag_raw_scalar = 'R';
constexpr char tag_array = '[';
constexpr char tag_object = '{';
constexpr char tag_end = ')';
constexpr char tag_null = 'n';
constexpr char tag_true = 't';
constexpr char tag_false = 'f';
constexpr char tag_string = 's';
constexpr char tag_number = 'd';

void append_jsonb_header(ByteSink sink);
// Appends one item; bytes and size matter only for strings and numbers.
void append_jsonb_item(ByteSink sink, JsonbItem item, const void *bytes = nullptr, size_t size = 0);

} // namespace idempotency::canonical
