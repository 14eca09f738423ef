// libFuzzer harness for the canonical encoding of jsonb documents, as
// request_hash(jsonb) encodes them before hashing.
//
// Property: the encoding is injective.  The input is read as a document --
// a tree of arrays, objects and scalars, or a top-level scalar -- which is
// encoded item by item in the order jsonb's iterator yields them; the bytes
// must decode back to exactly that document, so no two different documents
// ever encode (and hash) alike.  Strings and numbers (in either of their two
// forms, text and binary) are arbitrary bytes: the encoding must not depend
// on what PostgreSQL would put in them.  And every encoding starts with the
// reserved prefix, which request_hash_body's bytes rule keeps for itself.
#include <string>
#include <vector>

#include <fuzzer/FuzzedDataProvider.h>

#include "fuzz.hpp"

namespace canonical = idempotency::canonical;
using canonical::JsonbItem;

namespace
{

// Deep enough to exercise nesting, shallow enough for the harness's own
// recursion.
constexpr int max_depth = 32;

struct Value
{
    JsonbItem kind;                // begin_array, begin_object or a scalar item
    std::string text;              // string and number
    std::vector<Value> elements;   // array
    std::vector<std::string> keys; // object, in order
    std::vector<Value> values;     // object, one per key

    bool operator==(const Value &other) const
    {
        return kind == other.kind && text == other.text && elements == other.elements &&
               keys == other.keys && values == other.values;
    }
};

struct Document
{
    bool raw_scalar; // a top-level scalar, which jsonb wraps in a pseudo-array
    Value root;

    bool operator==(const Document &other) const
    {
        return raw_scalar == other.raw_scalar && root == other.root;
    }
};

// ---------------------------------------------------------------------------
// Fuzz input -> document.  As in jsonb, the top level is an array, an object
// or a raw scalar.
// ---------------------------------------------------------------------------

Value scalar_from(FuzzedDataProvider &input)
{
    static constexpr JsonbItem scalars[] = {JsonbItem::null,        JsonbItem::true_value,
                                            JsonbItem::false_value, JsonbItem::string,
                                            JsonbItem::number,      JsonbItem::number_binary};
    Value value{input.PickValueInArray(scalars), {}, {}, {}, {}};
    if (value.kind == JsonbItem::string || value.kind == JsonbItem::number ||
        value.kind == JsonbItem::number_binary)
        value.text = input.ConsumeRandomLengthString(64);
    return value;
}

Value value_from(FuzzedDataProvider &input, int depth);

Value container_from(FuzzedDataProvider &input, int depth)
{
    Value container{
        input.ConsumeBool() ? JsonbItem::begin_array : JsonbItem::begin_object, {}, {}, {}, {}};
    size_t count = input.ConsumeIntegralInRange<size_t>(0, 8);
    for (size_t i = 0; i < count && input.remaining_bytes() > 0; i++)
    {
        if (container.kind == JsonbItem::begin_array)
            container.elements.push_back(value_from(input, depth + 1));
        else
        {
            container.keys.push_back(input.ConsumeRandomLengthString(16));
            container.values.push_back(value_from(input, depth + 1));
        }
    }
    return container;
}

Value value_from(FuzzedDataProvider &input, int depth)
{
    if (depth < max_depth && input.ConsumeBool())
        return container_from(input, depth);
    return scalar_from(input);
}

Document document_from(FuzzedDataProvider &input)
{
    bool raw_scalar = input.ConsumeBool();
    return {raw_scalar, raw_scalar ? scalar_from(input) : container_from(input, 0)};
}

// ---------------------------------------------------------------------------
// Document -> canonical bytes, through the encoder under test
// ---------------------------------------------------------------------------

void encode_value(canonical::ByteSink sink, const Value &value)
{
    switch (value.kind)
    {
        case JsonbItem::begin_array:
            canonical::append_jsonb_item(sink, JsonbItem::begin_array);
            for (const Value &element : value.elements)
                encode_value(sink, element);
            canonical::append_jsonb_item(sink, JsonbItem::end);
            return;
        case JsonbItem::begin_object:
            canonical::append_jsonb_item(sink, JsonbItem::begin_object);
            for (size_t i = 0; i < value.keys.size(); i++)
            {
                canonical::append_jsonb_item(sink, JsonbItem::string, value.keys[i].data(),
                                             value.keys[i].size());
                encode_value(sink, value.values[i]);
            }
            canonical::append_jsonb_item(sink, JsonbItem::end);
            return;
        default:
            canonical::append_jsonb_item(sink, value.kind, value.text.data(), value.text.size());
    }
}

std::string encode(const Document &document)
{
    std::string encoded;
    canonical::ByteSink sink = fuzz::string_sink(encoded);
    canonical::append_jsonb_header(sink);
    if (document.raw_scalar)
    {
        canonical::append_jsonb_item(sink, JsonbItem::begin_raw_scalar);
        encode_value(sink, document.root);
        canonical::append_jsonb_item(sink, JsonbItem::end);
    }
    else
        encode_value(sink, document.root);
    return encoded;
}

// ---------------------------------------------------------------------------
// Canonical bytes -> document, independently of the encoder: one-byte tags,
// 8-byte big-endian lengths
// ---------------------------------------------------------------------------

class Decoder
{
  public:
    explicit Decoder(const std::string &bytes) : bytes_(bytes) {}

    Document document()
    {
        const std::string header(canonical::jsonb_encoding_v1, sizeof canonical::jsonb_encoding_v1);
        fuzz::require(bytes_.compare(0, header.size(), header) == 0, "the format name comes first");
        at_ = header.size();
        Document document{false, {}};
        if (peek() == canonical::tag_raw_scalar)
        {
            take();
            document.raw_scalar = true;
            document.root = value();
            fuzz::require(take() == canonical::tag_end, "a raw scalar is closed after one value");
        }
        else
            document.root = value();
        fuzz::require(at_ == bytes_.size(), "nothing follows the document");
        return document;
    }

  private:
    const std::string &bytes_;
    size_t at_ = 0;

    char peek()
    {
        fuzz::require(at_ < bytes_.size(), "the encoding is not cut short");
        return bytes_[at_];
    }

    char take()
    {
        char tag = peek();
        at_++;
        return tag;
    }

    std::string counted_bytes()
    {
        fuzz::require(bytes_.size() - at_ >= canonical::length_size, "a length is complete");
        uint64_t length = 0;
        for (size_t i = 0; i < canonical::length_size; i++)
            length = length << 8 | static_cast<uint8_t>(bytes_[at_ + i]);
        at_ += canonical::length_size;
        fuzz::require(length <= bytes_.size() - at_, "a string is as long as its length says");
        std::string text = bytes_.substr(at_, length);
        at_ += length;
        return text;
    }

    Value value()
    {
        switch (take())
        {
            case canonical::tag_null:
                return {JsonbItem::null, {}, {}, {}, {}};
            case canonical::tag_true:
                return {JsonbItem::true_value, {}, {}, {}, {}};
            case canonical::tag_false:
                return {JsonbItem::false_value, {}, {}, {}, {}};
            case canonical::tag_string:
                return {JsonbItem::string, counted_bytes(), {}, {}, {}};
            case canonical::tag_number:
                return {JsonbItem::number, counted_bytes(), {}, {}, {}};
            case canonical::tag_number_binary:
                return {JsonbItem::number_binary, counted_bytes(), {}, {}, {}};
            case canonical::tag_array:
                return array();
            case canonical::tag_object:
                return object();
        }
        fuzz::require(false, "every value starts with a known tag");
        return {};
    }

    Value array()
    {
        Value array{JsonbItem::begin_array, {}, {}, {}, {}};
        while (peek() != canonical::tag_end)
            array.elements.push_back(value());
        take();
        return array;
    }

    Value object()
    {
        Value object{JsonbItem::begin_object, {}, {}, {}, {}};
        while (peek() != canonical::tag_end)
        {
            fuzz::require(take() == canonical::tag_string, "an object key is a string");
            object.keys.push_back(counted_bytes());
            object.values.push_back(value());
        }
        take();
        return object;
    }
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FuzzedDataProvider input(data, size);
    Document document = document_from(input);
    std::string encoded = encode(document);
    fuzz::require(Decoder(encoded).document() == document, "an encoded document decodes to itself");
    fuzz::require(canonical::has_reserved_prefix(encoded.data(), encoded.size()),
                  "a document's encoding starts with the reserved prefix");
    return 0;
}
