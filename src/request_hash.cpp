// The request_hash type: text and binary I/O, the constructors that hash,
// the casts that wrap or expose a digest, and byte-wise comparison.
//
// PostgreSQL-facing code, written C-style (see boundary.hpp): only trivially
// destructible locals, palloc and ereport.  It calls into pure C++ for the
// byte formats (canonical.hpp) and for sha256(), which may throw; every SQL
// function is an IDEMPOTENCY_FUNCTION, so its guard turns such an exception
// into an ERROR.
#include "canonical.hpp"
#include "sha256.hpp"
#include "request_hash.hpp"
#include "boundary.hpp"
#include "compat.hpp"

extern "C"
{
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "lib/stringinfo.h"
#include "libpq/pqformat.h"
#include "mb/pg_wchar.h"
#include "utils/array.h"
#include "utils/fmgrprotos.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"
}

namespace idempotency
{

static_assert(sha256_digest_size == request_hash_size, "a request_hash is a SHA-256 digest");
static_assert(sizeof(RequestHash) == request_hash_size, "the type's INTERNALLENGTH is 32");
static_assert(canonical::digest_size == request_hash_size, "the text form is of a request_hash");

void request_hash_to_hex(const RequestHash *hash, char *out)
{
    char text[canonical::hex_length + 1];
    canonical::format_hex(hash->bytes, text);
    memcpy(out, text, sizeof text);
}

namespace
{

constexpr size_t hex_length = canonical::hex_length;

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

// The message quotes the bad value only when it is hexadecimal digits, a
// digest mistyped (and then at most 64 of them): anything else may be a
// request body, read as this type's text by a cast -- '{...}'::request_hash,
// or request_hash(x) of a string type with no overload of its own, which
// PostgreSQL reads as a function-style cast -- and no message shows request
// data.
[[noreturn]] void report_invalid_hex(const char *str)
{
    int length = static_cast<int>(strlen(str));
    bool hex_digits = strspn(str, "0123456789abcdefABCDEF") == size_t(length);
    if (hex_digits)
        ereport(ERROR, (errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
                        errmsg("invalid input syntax for type %s: \"%.*s%s\"", "request_hash",
                               Min(length, static_cast<int>(hex_length)), str,
                               length > static_cast<int>(hex_length) ? "..." : ""),
                        errdetail("A request_hash is written as %d hexadecimal digits, not %d.",
                                  static_cast<int>(hex_length), length)));
    ereport(ERROR,
            (errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
             errmsg("invalid input syntax for type %s", "request_hash"),
             errdetail("A request_hash is written as %d hexadecimal digits. The input, of %d "
                       "bytes, is not shown: it may be request data.",
                       static_cast<int>(hex_length), length),
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
                                  static_cast<int>(request_hash_size)),
                        errhidestmt(true)));
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

void append_to_string_info(void *context, const void *data, size_t size)
{
    appendBinaryStringInfo(static_cast<StringInfo>(context), static_cast<const char *>(data),
                           static_cast<int>(size));
}

// Encoded bytes collect in `out`, which grows in the current memory context.
canonical::ByteSink string_info_sink(StringInfo out)
{
    return canonical::ByteSink{out, append_to_string_info};
}

// Frames each part of a VARIADIC text[].  Only one dimension is accepted:
// flattening would hash '{{a,b}}' like '{a,b}', and a caller who passes a
// matrix has most likely made a mistake.  An empty array is zero parts.
void append_framed_parts(StringInfo out, ArrayType *parts)
{
    canonical::ByteSink sink = string_info_sink(out);
    if (ARR_NDIM(parts) > 1)
        ereport(ERROR,
                (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                 errmsg("cannot hash a %d-dimensional array of request parts", ARR_NDIM(parts)),
                 errdetail("Request parts are given as separate arguments or as a "
                           "one-dimensional text array."),
                 errhidestmt(true)));
    Datum *elements;
    bool *nulls;
    int count;
    deconstruct_array(parts, TEXTOID, -1, false, TYPALIGN_INT, &elements, &nulls, &count);
    for (int i = 0; i < count; i++)
    {
        if (nulls[i])
        {
            canonical::append_null_part(sink);
            continue;
        }
        const text *part = DatumGetTextPP(elements[i]);
        canonical::append_part(sink, VARDATA_ANY(part), VARSIZE_ANY_EXHDR(part));
    }
}

// The canonical encoding of a jsonb document (see canonical.hpp): jsonb's
// iterator yields the items in order, and numbers are normalised here.
void append_jsonb_scalar(canonical::ByteSink sink, const JsonbValue *value)
{
    switch (value->type)
    {
        case jbvNull:
            canonical::append_jsonb_item(sink, canonical::JsonbItem::null);
            return;
        case jbvBool:
            canonical::append_jsonb_item(sink, value->val.boolean
                                                   ? canonical::JsonbItem::true_value
                                                   : canonical::JsonbItem::false_value);
            return;
        case jbvString:
            canonical::append_jsonb_item(sink, canonical::JsonbItem::string, value->val.string.val,
                                         value->val.string.len);
            return;
        case jbvNumeric:
        {
            const char *digits = numeric_normalize(value->val.numeric);
            canonical::append_jsonb_item(sink, canonical::JsonbItem::number, digits,
                                         strlen(digits));
            return;
        }
        default:
            // The iterator descends into containers, so only scalars arrive.
            ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
                            errmsg("unexpected jsonb value type %d", static_cast<int>(value->type)),
                            errhidestmt(true)));
    }
}

void append_jsonb_token(canonical::ByteSink sink, JsonbIteratorToken token, const JsonbValue *value)
{
    switch (token)
    {
        case WJB_BEGIN_ARRAY:
            canonical::append_jsonb_item(sink, value->val.array.rawScalar
                                                   ? canonical::JsonbItem::begin_raw_scalar
                                                   : canonical::JsonbItem::begin_array);
            break;
        case WJB_BEGIN_OBJECT:
            canonical::append_jsonb_item(sink, canonical::JsonbItem::begin_object);
            break;
        case WJB_END_ARRAY:
        case WJB_END_OBJECT:
            canonical::append_jsonb_item(sink, canonical::JsonbItem::end);
            break;
        case WJB_KEY:
        case WJB_VALUE:
        case WJB_ELEM:
            append_jsonb_scalar(sink, value);
            break;
        case WJB_DONE:
            break; // the top-level container's end tag already closed the document
    }
}

void append_jsonb_encoding(StringInfo out, Jsonb *document)
{
    canonical::ByteSink sink = string_info_sink(out);
    canonical::append_jsonb_header(sink);
    JsonbIterator *iterator = JsonbIteratorInit(&document->root);
    JsonbValue value;
    JsonbIteratorToken token;
    do
    {
        token = JsonbIteratorNext(&iterator, &value, false);
        append_jsonb_token(sink, token, &value);
    } while (token != WJB_DONE);
}

Datum hash_jsonb(Jsonb *document)
{
    StringInfoData encoding;
    initStringInfo(&encoding);
    append_jsonb_encoding(&encoding, document);
    return hash_bytes(encoding.data, encoding.len);
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
    if (!canonical::parse_hex(str, hash->bytes))
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

// An argument of type unknown: a bare literal, or a parameter a driver sent
// without a type.  PostgreSQL would otherwise resolve it to
// request_hash(text), which hashes a JSON body by its spelling, so that a
// retry spelled differently answers mismatch.  64 hex digits are a digest,
// as the type's own literal form reads them; anything else is refused, and
// neither the message nor the logged statement shows it (it may be a body).
IDEMPOTENCY_FUNCTION(request_hash_from_unknown)
{
    const char *str = PG_GETARG_CSTRING(0);
    RequestHash *hash = palloc_request_hash();
    if (!canonical::parse_hex(str, hash->bytes))
        ereport(ERROR,
                (errcode(ERRCODE_INDETERMINATE_DATATYPE),
                 errmsg("request_hash() needs an argument of a known type"),
                 errdetail("An argument of unknown type is read as a digest of %d hexadecimal "
                           "digits, and this one is not.",
                           static_cast<int>(hex_length)),
                 errhint("Give the argument a type: request_hash($1::jsonb) or "
                         "request_hash_jsonb($1) for a JSON body, ::text or ::bytea to hash its "
                         "bytes."),
                 errhidestmt(true)));
    PG_RETURN_POINTER(hash);
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
    return hash_jsonb(PG_GETARG_JSONB_P(0));
}

// A JSON media type: application/json or application/<anything>+json, in any
// case, parameters (after ';') and the blanks around it aside.
static bool is_json_media_type(const text *content_type)
{
    const char *type = VARDATA_ANY(content_type);
    int end = VARSIZE_ANY_EXHDR(content_type);
    if (const void *semicolon = memchr(type, ';', end))
        end = int(static_cast<const char *>(semicolon) - type);
    int start = 0;
    while (start < end && (type[start] == ' ' || type[start] == '\t'))
        start++;
    while (end > start && (type[end - 1] == ' ' || type[end - 1] == '\t'))
        end--;
    const char prefix[] = "application/", suffix[] = "+json";
    const int prefix_len = sizeof(prefix) - 1, suffix_len = sizeof(suffix) - 1;
    int len = end - start;
    if (len < prefix_len + 4 || pg_strncasecmp(type + start, prefix, prefix_len) != 0)
        return false;
    const char *subtype = type + start + prefix_len;
    int subtype_len = len - prefix_len;
    return (subtype_len == 4 && pg_strncasecmp(subtype, "json", 4) == 0) ||
           (subtype_len > suffix_len &&
            pg_strncasecmp(subtype + subtype_len - suffix_len, suffix, suffix_len) == 0);
}

// request_hash_body(content_type, body): the one rule by which every package
// of the project (middleware/) fingerprints a request's body, so that one
// request has one fingerprint whichever package serves it.  A body of a JSON
// media type that jsonb reads (text of the database's encoding, no \u0000,
// no lone surrogate) is hashed by its value, as request_hash_jsonb does:
// key order and spacing do not matter.  Any other body, a JSON one jsonb
// would refuse included, by its bytes, as request_hash_bytea does: a request
// is not refused for its body.  (A number beyond numeric's range still
// raises numeric's error, 22003, as request_hash_jsonb does.)
IDEMPOTENCY_FUNCTION(request_hash_from_body)
{
    bytea *body = PG_GETARG_BYTEA_PP(1);
    char *data = VARDATA_ANY(body);
    int len = VARSIZE_ANY_EXHDR(body);
    if (!is_json_media_type(PG_GETARG_TEXT_PP(0)) || !pg_verifymbstr(data, len, true) ||
        !compat::is_json_document(data, len, GetDatabaseEncoding()))
        return hash_varlena(body);
    Datum document = DirectFunctionCall1(jsonb_in, CStringGetDatum(pnstrdup(data, len)));
    return hash_jsonb(DatumGetJsonbP(document));
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
