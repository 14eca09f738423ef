// The request_hash type: text and binary I/O, the constructors that hash,
// the casts that wrap or expose a digest, and byte-wise comparison.
//
// PostgreSQL-facing code, written C-style (see boundary.hpp): only trivially
// destructible locals, palloc and ereport.  The one call into pure C++ is
// sha256(), which may throw; every SQL function is an IDEMPOTENCY_FUNCTION, so
// its guard turns such an exception into an ERROR.
#include "sha256.hpp"
#include "request_hash.hpp"
#include "boundary.hpp"

extern "C"
{
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "lib/stringinfo.h"
#include "libpq/pqformat.h"
#include "mb/pg_wchar.h"
#include "port/pg_bswap.h"
#include "utils/array.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"
}

namespace idempotency
{

static_assert(sha256_digest_size == request_hash_size, "a request_hash is a SHA-256 digest");
static_assert(sizeof(RequestHash) == request_hash_size, "the type's INTERNALLENGTH is 32");

void request_hash_to_hex(const RequestHash *hash, char *out)
{
    static constexpr char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < request_hash_size; i++)
    {
        out[2 * i] = digits[hash->bytes[i] >> 4];
        out[2 * i + 1] = digits[hash->bytes[i] & 0x0F];
    }
    out[2 * request_hash_size] = '\0';
}

namespace
{

constexpr size_t hex_length = 2 * request_hash_size;

RequestHash *palloc_request_hash()
{
    return static_cast<RequestHash *>(palloc(sizeof(RequestHash)));
}

const RequestHash *request_hash_arg(FunctionCallInfo fcinfo, int n)
{
    return datum_get_request_hash(PG_GETARG_DATUM(n));
}

// ---------------------------------------------------------------------------
// Text form
// ---------------------------------------------------------------------------

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

// Parses exactly 64 hex digits of either case; false for anything else.
bool parse_hex(const char *str, RequestHash *hash)
{
    if (strnlen(str, hex_length + 1) != hex_length)
        return false;
    for (size_t i = 0; i < request_hash_size; i++)
    {
        int high = hex_digit_value(str[2 * i]);
        int low = hex_digit_value(str[2 * i + 1]);
        if (high < 0 || low < 0)
            return false;
        hash->bytes[i] = static_cast<uint8_t>(high << 4 | low);
    }
    return true;
}

// The message quotes the bad value, but at most its first 64 bytes: a request
// body written as request_hash('{...}') is read as hex input (a bare literal
// makes a function-style cast), and a body must not reach the log whole.
[[noreturn]] void report_invalid_hex(const char *str)
{
    int length = static_cast<int>(strlen(str));
    int quoted = pg_mbcliplen(str, length, static_cast<int>(hex_length));
    ereport(
        ERROR,
        (errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
         errmsg("invalid input syntax for type %s: \"%.*s%s\"", "request_hash", quoted, str,
                quoted < length ? "..." : ""),
         errdetail("A request_hash is written as %d hexadecimal digits.",
                   static_cast<int>(hex_length)),
         errhint("To hash a string instead, give it a type, as in request_hash('...'::text).")));
    pg_unreachable();
}

// ---------------------------------------------------------------------------
// Digest bytes: binary I/O and the bytea casts
// ---------------------------------------------------------------------------

// A digest computed elsewhere becomes a request_hash only if it has the size
// of one; the caller picks the SQLSTATE that fits where the bytes came from.
RequestHash *wrap_digest(const char *data, int size, int sqlerrcode)
{
    if (size != static_cast<int>(request_hash_size))
        ereport(ERROR, (errcode(sqlerrcode), errmsg("invalid request_hash length: %d bytes", size),
                        errdetail("A request_hash is a SHA-256 digest of exactly %d bytes.",
                                  static_cast<int>(request_hash_size))));
    RequestHash *hash = palloc_request_hash();
    memcpy(hash->bytes, data, request_hash_size);
    return hash;
}

bytea *digest_as_bytea(const RequestHash *hash)
{
    bytea *result = static_cast<bytea *>(palloc(VARHDRSZ + request_hash_size));
    SET_VARSIZE(result, VARHDRSZ + request_hash_size);
    memcpy(VARDATA(result), hash->bytes, request_hash_size);
    return result;
}

// ---------------------------------------------------------------------------
// Constructors: everything is reduced to bytes, then hashed here
// ---------------------------------------------------------------------------

Datum hash_bytes(const void *data, size_t size)
{
    RequestHash *hash = palloc_request_hash();
    sha256(data, size, hash->bytes);
    return PointerGetDatum(hash);
}

Datum hash_varlena(const struct varlena *value)
{
    return hash_bytes(VARDATA_ANY(value), VARSIZE_ANY_EXHDR(value));
}

// Lengths are 8 bytes, most significant first, so that concatenated fields
// cannot be re-split: ('ab','c') and ('a','bc') frame differently.
void append_uint64_be(StringInfo out, uint64 value)
{
    uint64 big_endian = pg_hton64(value);
    appendBinaryStringInfo(out, reinterpret_cast<const char *>(&big_endian), sizeof big_endian);
}

void append_length_prefixed(StringInfo out, const char *data, size_t size)
{
    append_uint64_be(out, size);
    appendBinaryStringInfo(out, data, static_cast<int>(size));
}

// No part can be this long, so a NULL part differs from every text, '' included.
constexpr uint64 null_part_marker = UINT64_MAX;

// Frames each part of a VARIADIC text[].  Only one dimension is accepted:
// flattening would hash '{{a,b}}' like '{a,b}', and a caller who passes a
// matrix has most likely made a mistake.  An empty array is zero parts.
void append_framed_parts(StringInfo out, ArrayType *parts)
{
    if (ARR_NDIM(parts) > 1)
        ereport(ERROR,
                (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                 errmsg("cannot hash a %d-dimensional array of request parts", ARR_NDIM(parts)),
                 errdetail("Request parts are given as separate arguments or as a "
                           "one-dimensional text array.")));
    Datum *elements;
    bool *nulls;
    int count;
    deconstruct_array(parts, TEXTOID, -1, false, TYPALIGN_INT, &elements, &nulls, &count);
    for (int i = 0; i < count; i++)
    {
        if (nulls[i])
        {
            append_uint64_be(out, null_part_marker);
            continue;
        }
        const text *part = DatumGetTextPP(elements[i]);
        append_length_prefixed(out, VARDATA_ANY(part), VARSIZE_ANY_EXHDR(part));
    }
}

// Canonical encoding of a jsonb document.  Documents that jsonb's = finds
// equal must encode alike, and unequal ones differently:
//  * jsonb already sorts object keys, keeps the last of duplicate keys and
//    stores no whitespace; its iterator yields keys in that sorted order;
//  * numbers are equal when numerically equal (1 = 1.0 = 1e0) although their
//    text differs, so they are encoded by numeric_normalize(), which drops
//    insignificant zeros;
//  * strings and keys are equal only byte for byte, so their bytes are used;
//  * a top-level scalar ('1') is not equal to an array ('[1]'): jsonb stores
//    it as a "raw scalar" pseudo-array, which gets its own opening tag;
//  * every string and number is length-prefixed and every container closed,
//    so the encoding of one document is never that of another.
// The prefix names the format, so that a later one can be told apart from
// hashes already stored; it includes its terminating NUL.
constexpr char jsonb_encoding_v1[] = "idempotency.request_hash.jsonb.v1";
constexpr char tag_raw_scalar = 'R';
constexpr char tag_array = '[';
constexpr char tag_object = '{';
constexpr char tag_end = ')';
constexpr char tag_null = 'n';
constexpr char tag_true = 't';
constexpr char tag_false = 'f';
constexpr char tag_string = 's';
constexpr char tag_number = 'd';

void append_jsonb_scalar(StringInfo out, const JsonbValue *value)
{
    switch (value->type)
    {
        case jbvNull:
            appendStringInfoChar(out, tag_null);
            return;
        case jbvBool:
            appendStringInfoChar(out, value->val.boolean ? tag_true : tag_false);
            return;
        case jbvString:
            appendStringInfoChar(out, tag_string);
            append_length_prefixed(out, value->val.string.val, value->val.string.len);
            return;
        case jbvNumeric:
        {
            const char *digits = numeric_normalize(value->val.numeric);
            appendStringInfoChar(out, tag_number);
            append_length_prefixed(out, digits, strlen(digits));
            return;
        }
        default:
            // The iterator descends into containers, so only scalars arrive.
            ereport(ERROR,
                    (errcode(ERRCODE_INTERNAL_ERROR),
                     errmsg("unexpected jsonb value type %d", static_cast<int>(value->type))));
    }
}

void append_jsonb_token(StringInfo out, JsonbIteratorToken token, const JsonbValue *value)
{
    switch (token)
    {
        case WJB_BEGIN_ARRAY:
            appendStringInfoChar(out, value->val.array.rawScalar ? tag_raw_scalar : tag_array);
            break;
        case WJB_BEGIN_OBJECT:
            appendStringInfoChar(out, tag_object);
            break;
        case WJB_END_ARRAY:
        case WJB_END_OBJECT:
            appendStringInfoChar(out, tag_end);
            break;
        case WJB_KEY:
        case WJB_VALUE:
        case WJB_ELEM:
            append_jsonb_scalar(out, value);
            break;
        case WJB_DONE:
            break; // the top-level container's end tag already closed the document
    }
}

void append_jsonb_encoding(StringInfo out, Jsonb *document)
{
    appendBinaryStringInfo(out, jsonb_encoding_v1, sizeof jsonb_encoding_v1);
    JsonbIterator *iterator = JsonbIteratorInit(&document->root);
    JsonbValue value;
    JsonbIteratorToken token;
    do
    {
        token = JsonbIteratorNext(&iterator, &value, false);
        append_jsonb_token(out, token, &value);
    } while (token != WJB_DONE);
}

// ---------------------------------------------------------------------------
// Comparison
// ---------------------------------------------------------------------------

// Byte-wise, so that the btree order is the order of the hex text.
int compare_args(FunctionCallInfo fcinfo)
{
    return memcmp(request_hash_arg(fcinfo, 0)->bytes, request_hash_arg(fcinfo, 1)->bytes,
                  request_hash_size);
}

} // namespace

} // namespace idempotency

using namespace idempotency;

IDEMPOTENCY_FUNCTION(request_hash_in)
{
    const char *str = PG_GETARG_CSTRING(0);
    RequestHash *hash = palloc_request_hash();
    if (!parse_hex(str, hash))
        report_invalid_hex(str);
    PG_RETURN_POINTER(hash);
}

IDEMPOTENCY_FUNCTION(request_hash_out)
{
    char *hex = static_cast<char *>(palloc(hex_length + 1));
    request_hash_to_hex(request_hash_arg(fcinfo, 0), hex);
    PG_RETURN_CSTRING(hex);
}

IDEMPOTENCY_FUNCTION(request_hash_recv)
{
    StringInfo message = reinterpret_cast<StringInfo>(PG_GETARG_POINTER(0));
    int size = message->len - message->cursor;
    PG_RETURN_POINTER(
        wrap_digest(pq_getmsgbytes(message, size), size, ERRCODE_INVALID_BINARY_REPRESENTATION));
}

// The binary form is the digest itself, as the request_hash to bytea cast gives it.
IDEMPOTENCY_FUNCTION(request_hash_send)
{
    PG_RETURN_BYTEA_P(digest_as_bytea(request_hash_arg(fcinfo, 0)));
}

IDEMPOTENCY_FUNCTION(request_hash_from_bytea)
{
    return hash_varlena(PG_GETARG_BYTEA_PP(0));
}

IDEMPOTENCY_FUNCTION(request_hash_from_text)
{
    return hash_varlena(PG_GETARG_TEXT_PP(0));
}

IDEMPOTENCY_FUNCTION(request_hash_from_jsonb)
{
    StringInfoData encoding;
    initStringInfo(&encoding);
    append_jsonb_encoding(&encoding, PG_GETARG_JSONB_P(0));
    return hash_bytes(encoding.data, encoding.len);
}

IDEMPOTENCY_FUNCTION(request_hash_from_parts)
{
    StringInfoData framed;
    initStringInfo(&framed);
    append_framed_parts(&framed, PG_GETARG_ARRAYTYPE_P(0));
    return hash_bytes(framed.data, framed.len);
}

IDEMPOTENCY_FUNCTION(request_hash_from_digest)
{
    const bytea *digest = PG_GETARG_BYTEA_PP(0);
    PG_RETURN_POINTER(wrap_digest(VARDATA_ANY(digest), VARSIZE_ANY_EXHDR(digest),
                                  ERRCODE_INVALID_TEXT_REPRESENTATION));
}

IDEMPOTENCY_FUNCTION(request_hash_digest)
{
    PG_RETURN_BYTEA_P(digest_as_bytea(request_hash_arg(fcinfo, 0)));
}

IDEMPOTENCY_FUNCTION(request_hash_eq)
{
    PG_RETURN_BOOL(compare_args(fcinfo) == 0);
}

IDEMPOTENCY_FUNCTION(request_hash_ne)
{
    PG_RETURN_BOOL(compare_args(fcinfo) != 0);
}

IDEMPOTENCY_FUNCTION(request_hash_lt)
{
    PG_RETURN_BOOL(compare_args(fcinfo) < 0);
}

IDEMPOTENCY_FUNCTION(request_hash_le)
{
    PG_RETURN_BOOL(compare_args(fcinfo) <= 0);
}

IDEMPOTENCY_FUNCTION(request_hash_gt)
{
    PG_RETURN_BOOL(compare_args(fcinfo) > 0);
}

IDEMPOTENCY_FUNCTION(request_hash_ge)
{
    PG_RETURN_BOOL(compare_args(fcinfo) >= 0);
}

IDEMPOTENCY_FUNCTION(request_hash_cmp)
{
    int order = compare_args(fcinfo);
    PG_RETURN_INT32((order > 0) - (order < 0));
}

IDEMPOTENCY_FUNCTION(request_hash_hash)
{
    return hash_any(request_hash_arg(fcinfo, 0)->bytes, static_cast<int>(request_hash_size));
}

IDEMPOTENCY_FUNCTION(request_hash_hash_extended)
{
    return hash_any_extended(request_hash_arg(fcinfo, 0)->bytes,
                             static_cast<int>(request_hash_size), PG_GETARG_INT64(1));
}
