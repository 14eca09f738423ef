// The byte formats behind request_hash: the 64-digit text form of a digest,
// the framing of request parts, the canonical encoding of a jsonb document
// (its numbers' two forms included), the nesting bound of a JSON body and
// the encoding of a body hashed by its bytes.  A stored hash depends on these
// bytes, so they are defined here once; request_hash.cpp reduces PostgreSQL
// values to them, and doc/reference.md states them for a reimplementation.
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
//    text differs, so the caller gives each in a form of its value without
//    trailing fractional zeros (see "Numbers" below);
//  * strings and keys are equal only byte for byte, so their bytes are used;
//  * a top-level scalar ('1') is not equal to an array ('[1]'): jsonb stores
//    it as a "raw scalar" pseudo-array, which gets its own opening tag;
//  * every string and number is tagged and length-prefixed and every
//    container closed, so the encoding of one document is never that of
//    another.
// The encoder keeps nothing between items: the caller streams the bytes
// into the digest, so that hashing costs the document plus a constant.
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
    string,       // bytes: the string's bytes
    number,       // bytes: the number's short form, its text (see below)
    number_binary // bytes: any other number, in numeric's binary form
};

// Every encoding that request_hash_body can hash starts with this prefix; a
// body whose own bytes start with it is hashed under a tag of its own (see
// "Request bodies" below), so that no body's bytes are ever a document's
// encoding.
constexpr char reserved_prefix[] = "idempotency.request_hash.";
constexpr size_t reserved_prefix_length = sizeof reserved_prefix - 1;

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
constexpr char tag_number_binary = 'N';

void append_jsonb_header(ByteSink sink);
// Appends one item; bytes and size matter only for strings and numbers.
void append_jsonb_item(ByteSink sink, JsonbItem item, const void *bytes = nullptr, size_t size = 0);

// ---------------------------------------------------------------------------
// Numbers.  The caller takes t = trim_scale(n), the number's value with no
// trailing fractional zeros, so that equal numbers have one form, and gives
// it in one of two forms:
//  * short: abs(t) < 1e64 and scale(t) <= 64.  Item `number`, with t's text
//    as numeric's output function writes it (never an exponent): the text
//    request_hash(jsonb) used for every number before 0.5.0, which such
//    numbers keep, with the digests stored for them.  At most 64 digits
//    before the point and 64 after it, whatever the input's spelling.
//  * any other: item `number_binary`, with numeric_send(t), numeric's binary
//    wire form: int16 ndigits, weight, sign, dscale, then ndigits base-10000
//    digits, each big-endian.  Its size follows what the number stores, so
//    1e131000 (10 bytes) is never written out as 131,001 digits.
// Which form a number takes is decided by numeric's own routines
// (request_hash.cpp): comparisons with +-short_number_bound (numeric's input
// of that text), and the scale of the number or of its trim_scale.  (In the
// binary form's terms, the short form is weight <= 15 -- 10000^16 = 1e64 --
// and dscale <= 64.)
// ---------------------------------------------------------------------------

constexpr char short_number_bound[] = "1e64";
constexpr int max_short_number_scale = 64;

// ---------------------------------------------------------------------------
// JSON text nesting.  request_hash_body reads a JSON body by its value only
// when it is nested at most max_json_nesting_depth deep, so that no parser
// that recurses (PostgreSQL's does) ever runs on a body that would exhaust
// its stack.  The depth of a text is the largest number of '[' and '{' open
// at once, counting only those outside strings: a string starts at a '"'
// outside a string and ends at the next '"' not escaped by a '\' (a '\'
// inside a string escapes the byte after it); outside strings, ']' and '}'
// close one (none when none is open).  For valid JSON this is the document's
// container depth; for any other text it bounds the nesting a parser reaches
// before it finds the error.  The scan reads each byte once, keeps two
// counters, and never recurses.
// ---------------------------------------------------------------------------

constexpr size_t max_json_nesting_depth = 128;

size_t json_nesting_depth(const void *text, size_t size) noexcept;

// ---------------------------------------------------------------------------
// Request bodies hashed by their bytes (request_hash_body's bytes rule): a
// body is its own encoding, except one that starts with reserved_prefix,
// which is encoded as body_bytes_encoding (its NUL included) followed by the
// body.  So every body keeps the digest of its bytes unless it could be
// taken for another rule's encoding, and no body's encoding is a document's
// (those start with jsonb_encoding_v1, which differs from
// body_bytes_encoding right after the prefix).
// ---------------------------------------------------------------------------

constexpr char body_bytes_encoding[] = "idempotency.request_hash.bytes";

bool has_reserved_prefix(const void *data, size_t size) noexcept;
void append_body_bytes(ByteSink sink, const void *data, size_t size);

} // namespace idempotency::canonical
