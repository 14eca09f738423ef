// The request_hash type: text and binary I/O, the constructors that hash,
// the casts that wrap or expose a digest, and byte-wise comparison.
//
// PostgreSQL-facing code, written C-style (see boundary.hpp): only trivially
// destructible locals, palloc and ereport.  It calls into pure C++ for the
// byte formats (canonical.hpp) and for SHA-256 (sha256.hpp), which may throw;
// every SQL function is an IDEMPOTENCY_FUNCTION, so its guard turns such an
// exception into an ERROR.  The encodings are streamed into the digest (see
// "Streaming digests"), so that no input is ever copied whole to be hashed.
#include "canonical.hpp"
#include "sha256.hpp"
#include "request_hash.hpp"
#include "boundary.hpp"
#include "compat.hpp"

extern "C"
{
#include "catalog/pg_type.h"
#include "common/cryptohash.h"
#include "common/hashfn.h"
#include "lib/stringinfo.h"
#include "libpq/pqformat.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/fmgrprotos.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
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
    ereport(
        ERROR,
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

// ---------------------------------------------------------------------------
// Streaming digests: an encoding is hashed as it is produced, never collected
// whole, so that hashing costs the input plus a constant.  Its bytes gather in
// a buffer on the stack; an encoding that fits is hashed in one call, as a
// string is.  One that outgrows the buffer is fed, a buffer at a time, to
// PostgreSQL's own SHA-256 context (common/cryptohash.h), which the current
// resource owner holds: a PostgreSQL error that longjmps out of the hashing
// (a cancel, a failed palloc, the error an exception becomes) frees it with
// the (sub)transaction's abort.
// ---------------------------------------------------------------------------

constexpr size_t digest_buffer_size = 4096;

struct DigestStream
{
    pg_cryptohash_ctx *context; // nullptr until the encoding outgrows the buffer
    size_t used;
    uint8_t buffer[digest_buffer_size];
};

// The IK000 a C++ SHA-256 failure gives (sha256.cpp), for the same failure.
[[noreturn]] void cryptohash_failed(pg_cryptohash_ctx *context)
{
    ereport(ERROR, (errcode(errcode_cxx_exception),
                    errmsg("SHA-256 computation failed: %s", pg_cryptohash_error(context))));
}

void feed(pg_cryptohash_ctx *context, const void *data, size_t size)
{
    if (pg_cryptohash_update(context, static_cast<const uint8 *>(data), size) < 0)
        cryptohash_failed(context);
}

void append_to_digest(void *context, const void *data, size_t size)
{
    DigestStream *stream = static_cast<DigestStream *>(context);
    if (size <= digest_buffer_size - stream->used)
    {
        if (size > 0)
            memcpy(stream->buffer + stream->used, data, size);
        stream->used += size;
        return;
    }
    if (stream->context == nullptr)
    {
        stream->context = pg_cryptohash_create(PG_SHA256);
        if (pg_cryptohash_init(stream->context) < 0)
            cryptohash_failed(stream->context);
    }
    feed(stream->context, stream->buffer, stream->used);
    stream->used = 0;
    if (size < digest_buffer_size)
    {
        memcpy(stream->buffer, data, size);
        stream->used = size;
    }
    else
        feed(stream->context, data, size);
    // A long encoding can be cancelled, after each buffer's worth.
    CHECK_FOR_INTERRUPTS();
}

canonical::ByteSink digest_sink(DigestStream *stream)
{
    stream->context = nullptr;
    stream->used = 0;
    return canonical::ByteSink{stream, append_to_digest};
}

Datum finish_digest(DigestStream *stream)
{
    RequestHash *hash = palloc_request_hash();
    if (stream->context == nullptr)
    {
        sha256(stream->buffer, stream->used, hash->bytes);
        return PointerGetDatum(hash);
    }
    feed(stream->context, stream->buffer, stream->used);
    if (pg_cryptohash_final(stream->context, hash->bytes, sizeof(hash->bytes)) < 0)
        cryptohash_failed(stream->context);
    pg_cryptohash_free(stream->context);
    return PointerGetDatum(hash);
}

// ---------------------------------------------------------------------------
// The encodings.  Each function that holds a DigestStream (4 kB on the stack)
// is kept out of its callers, so that the buffer is not on the stack while
// a caller runs a parser that recurses.
// ---------------------------------------------------------------------------

// Frames each part of a VARIADIC text[].  Only one dimension is accepted:
// flattening would hash '{{a,b}}' like '{a,b}', and a caller who passes a
// matrix has most likely made a mistake.  An empty array is zero parts.
pg_noinline Datum hash_parts(ArrayType *parts)
{
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
    DigestStream stream;
    canonical::ByteSink sink = digest_sink(&stream);
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
    return finish_digest(&stream);
}

// The short form's bound on magnitude, 1e64 and -1e64 as numerics: made
// once per backend, in TopMemoryContext, by numeric's input function.
Datum short_number_above = 0;
Datum short_number_below = 0;

Datum numeric_from_text(const char *text)
{
    return DirectFunctionCall3(numeric_in, CStringGetDatum(text), ObjectIdGetDatum(InvalidOid),
                               Int32GetDatum(-1));
}

bool has_short_magnitude(Datum number)
{
    if (unlikely(short_number_above == 0))
    {
        MemoryContext caller = MemoryContextSwitchTo(TopMemoryContext);
        Datum above = numeric_from_text(canonical::short_number_bound);
        short_number_below = DirectFunctionCall1(numeric_uminus, above);
        short_number_above = above;
        MemoryContextSwitchTo(caller);
    }
    if (DatumGetInt32(DirectFunctionCall2(numeric_cmp, number, short_number_above)) >= 0)
        return false;
    return DatumGetInt32(DirectFunctionCall2(numeric_cmp, number, short_number_below)) > 0;
}

// A number in its short or binary form (canonical.hpp), from numeric's own
// routines.  The common number is decided by routines that allocate
// nothing: comparisons with +-1e64, then the number's scale.  When it is
// short with a scale of at most 64 -- so is trim_scale(n)'s, which is never
// larger -- it is written as 0.4.0 wrote every number, by numeric_normalize
// (numeric's output without trailing fractional zeros, the text of
// trim_scale(n)): one allocation, as before.  Any other pays trim_scale
// first and reads the scale of the result (no min_scale, which would make a
// second pass over the digits), so that no text is longer than the form's:
// numeric's output for a short one whose scale only its trailing zeros made
// long (round(1, 16000)), numeric_send for a long one.  What each allocates
// is freed at once, so that a document's numbers cost no more memory
// together than one does.
void append_jsonb_number(canonical::ByteSink sink, Numeric number)
{
    Datum value = NumericGetDatum(number);
    bool short_form = has_short_magnitude(value);
    if (short_form && DatumGetInt32(DirectFunctionCall1(numeric_scale, value)) <=
                          canonical::max_short_number_scale)
    {
        char *text = numeric_normalize(number);
        canonical::append_jsonb_item(sink, canonical::JsonbItem::number, text, strlen(text));
        pfree(text);
        return;
    }
    Datum trimmed = DirectFunctionCall1(numeric_trim_scale, value);
    short_form = short_form && DatumGetInt32(DirectFunctionCall1(numeric_scale, trimmed)) <=
                                   canonical::max_short_number_scale;
    if (short_form)
    {
        char *text = DatumGetCString(DirectFunctionCall1(numeric_out, trimmed));
        canonical::append_jsonb_item(sink, canonical::JsonbItem::number, text, strlen(text));
        pfree(text);
    }
    else
    {
        bytea *binary = DatumGetByteaPP(DirectFunctionCall1(numeric_send, trimmed));
        canonical::append_jsonb_item(sink, canonical::JsonbItem::number_binary, VARDATA_ANY(binary),
                                     VARSIZE_ANY_EXHDR(binary));
        pfree(binary);
    }
    if (DatumGetPointer(trimmed) != DatumGetPointer(value))
        pfree(DatumGetPointer(trimmed));
}

// The canonical encoding of a jsonb document (see canonical.hpp): jsonb's
// iterator, which keeps its place in a list rather than by recursion, yields
// the items in order.
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
            append_jsonb_number(sink, value->val.numeric);
            return;
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

pg_noinline Datum hash_jsonb(Jsonb *document)
{
    DigestStream stream;
    canonical::ByteSink sink = digest_sink(&stream);
    canonical::append_jsonb_header(sink);
    JsonbIterator *iterator = JsonbIteratorInit(&document->root);
    JsonbValue value;
    JsonbIteratorToken token;
    do
    {
        token = JsonbIteratorNext(&iterator, &value, false);
        append_jsonb_token(sink, token, &value);
    } while (token != WJB_DONE);
    return finish_digest(&stream);
}

// request_hash_body's bytes rule (canonical.hpp): the body's bytes, under a
// tag only when they start with the reserved prefix.  Nearly every body does
// not, and is hashed in one call, as request_hash(bytea) hashes it.
pg_noinline Datum hash_body_bytes(const char *data, size_t size)
{
    if (!canonical::has_reserved_prefix(data, size))
        return hash_bytes(data, size);
    DigestStream stream;
    canonical::append_body_bytes(digest_sink(&stream), data, size);
    return finish_digest(&stream);
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

// request_hash_body's JSON rule, its conditions cheapest first: a UTF8
// database, a JSON media type, valid UTF-8, nested at most 128 deep --
// decided by a scan that does not recurse, before any parser that does
// runs, so that no body fails for its depth -- and one document that jsonb
// reads (no \u0000, no lone surrogate), asked of PostgreSQL's parser without
// an error.  A JSON body is UTF-8 text (RFC 8259), and jsonb holds text in
// the database's encoding: in any other encoding, its bytes read as that
// encoding made distinct bodies one document (LATIN1's reading of UTF-8's
// "é" is the document with "\u00c3\u00a9"), and the parser refused the
// \u escapes the encoding cannot hold.  So there every body takes the bytes
// rule.
static bool is_json_body(const text *content_type, char *data, int len)
{
    return GetDatabaseEncoding() == PG_UTF8 && is_json_media_type(content_type) &&
           pg_verifymbstr(data, len, true) &&
           canonical::json_nesting_depth(data, size_t(len)) <= canonical::max_json_nesting_depth &&
           compat::is_json_document(data, len, PG_UTF8);
}

// request_hash_body(content_type, body): the one rule by which every package
// of the project (middleware/) fingerprints a request's body, so that one
// request has one fingerprint whichever package serves it.  A body that
// meets the JSON rule is hashed by its value, as request_hash_jsonb does: key
// order and spacing do not matter.  Any other body, a JSON one jsonb would
// refuse or one nested deeper included, by its bytes (the bytes rule,
// canonical.hpp): a request is not refused for its body.  (A number beyond
// numeric's range still raises numeric's error, 22003, as request_hash_jsonb
// does.)  Both rules cost memory and stack in proportion to the body.
IDEMPOTENCY_FUNCTION(request_hash_from_body)
{
    bytea *body = PG_GETARG_BYTEA_PP(1);
    char *data = VARDATA_ANY(body);
    int len = VARSIZE_ANY_EXHDR(body);
    if (!is_json_body(PG_GETARG_TEXT_PP(0), data, len))
        return hash_body_bytes(data, size_t(len));
    Datum document = DirectFunctionCall1(jsonb_in, CStringGetDatum(pnstrdup(data, len)));
    return hash_jsonb(DatumGetJsonbP(document));
}

IDEMPOTENCY_FUNCTION(request_hash_from_parts)
{
    return hash_parts(PG_GETARG_ARRAYTYPE_P(0));
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
