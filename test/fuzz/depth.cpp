// libFuzzer harness for the nesting scan of a JSON body
// (canonical::json_nesting_depth), which decides, before any parser that
// recurses runs, whether request_hash_body may read a body as JSON.
//
// Properties:
//  * on any bytes, a recursive-descent JSON parser (below, written after
//    RFC 8259 as PostgreSQL's parser reads it) never has more containers
//    open than the scan counted, up to the point where it succeeds or finds
//    an error: a body the scan admits cannot take the parser deeper;
//  * on bytes that are one valid JSON document, the two agree exactly;
//  * on a document generated from the input -- nested arrays and objects
//    with strings full of brackets, quotes and escapes, and whitespace --
//    the scan gives the generated depth.
#include <cctype>
#include <cstring>
#include <string>

#include <fuzzer/FuzzedDataProvider.h>

#include "fuzz.hpp"

namespace canonical = idempotency::canonical;

namespace
{

// A parser of one JSON document that records the most containers it had
// open at once.  Its recursion is bounded by the input's size, which
// libFuzzer keeps small.
class Parser
{
  public:
    explicit Parser(const std::string &text) : text_(text) {}

    // Whether the whole text is one document.
    bool document()
    {
        blanks();
        if (!value())
            return false;
        blanks();
        return at_ == text_.size();
    }

    size_t deepest() const { return deepest_; }

  private:
    const std::string &text_;
    size_t at_ = 0;
    size_t depth_ = 0;
    size_t deepest_ = 0;

    bool more() const { return at_ < text_.size(); }
    char peek() const { return text_[at_]; }

    void blanks()
    {
        while (more() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r'))
            at_++;
    }

    bool literal(const char *word)
    {
        size_t length = strlen(word);
        if (text_.compare(at_, length, word) != 0)
            return false;
        at_ += length;
        return true;
    }

    bool digits()
    {
        size_t start = at_;
        while (more() && peek() >= '0' && peek() <= '9')
            at_++;
        return at_ > start;
    }

    bool number()
    {
        if (more() && peek() == '-')
            at_++;
        if (more() && peek() == '0')
            at_++;
        else if (!digits())
            return false;
        if (more() && peek() == '.')
        {
            at_++;
            if (!digits())
                return false;
        }
        if (more() && (peek() == 'e' || peek() == 'E'))
        {
            at_++;
            if (more() && (peek() == '+' || peek() == '-'))
                at_++;
            if (!digits())
                return false;
        }
        return true;
    }

    bool string()
    {
        at_++; // the opening quote
        while (more())
        {
            unsigned char c = static_cast<unsigned char>(text_[at_++]);
            if (c == '"')
                return true;
            if (c < 0x20)
                return false;
            if (c != '\\')
                continue;
            if (!more())
                return false;
            char escaped = text_[at_++];
            if (escaped == 'u')
            {
                for (int i = 0; i < 4; i++)
                    if (!more() || !isxdigit(static_cast<unsigned char>(text_[at_++])))
                        return false;
            }
            else if (!strchr("\"\\/bfnrt", escaped) || escaped == '\0')
                return false;
        }
        return false;
    }

    bool open()
    {
        at_++;
        if (++depth_ > deepest_)
            deepest_ = depth_;
        blanks();
        return true;
    }

    bool close(char bracket)
    {
        if (!more() || peek() != bracket)
            return false;
        at_++;
        depth_--;
        return true;
    }

    bool array()
    {
        open();
        if (more() && peek() == ']')
            return close(']');
        for (;;)
        {
            if (!value())
                return false;
            blanks();
            if (!more() || peek() != ',')
                return close(']');
            at_++;
            blanks();
        }
    }

    bool object()
    {
        open();
        if (more() && peek() == '}')
            return close('}');
        for (;;)
        {
            if (!more() || peek() != '"' || !string())
                return false;
            blanks();
            if (!more() || peek() != ':')
                return false;
            at_++;
            blanks();
            if (!value())
                return false;
            blanks();
            if (!more() || peek() != ',')
                return close('}');
            at_++;
            blanks();
        }
    }

    bool value()
    {
        if (!more())
            return false;
        switch (peek())
        {
            case '[':
                return array();
            case '{':
                return object();
            case '"':
                return string();
            case 't':
                return literal("true");
            case 'f':
                return literal("false");
            case 'n':
                return literal("null");
            default:
                return number();
        }
    }
};

void check_parser(const std::string &text)
{
    size_t scanned = canonical::json_nesting_depth(text.data(), text.size());
    Parser parser(text);
    bool valid = parser.document();
    fuzz::require(parser.deepest() <= scanned, "no parser goes deeper than the scan counted");
    if (valid)
        fuzz::require(parser.deepest() == scanned, "a valid document's depth is the scan's");
}

// ---------------------------------------------------------------------------
// Generated documents
// ---------------------------------------------------------------------------

constexpr int max_generated_depth = 200;

std::string blank(FuzzedDataProvider &input)
{
    static constexpr const char *blanks[] = {"", "", " ", "\n", "\t ", "\r\n"};
    return input.PickValueInArray(blanks);
}

// A string whose content is made of JSON's troublemakers: brackets, braces,
// quotes and backslashes (escaped), and \u escapes.
std::string json_string(FuzzedDataProvider &input)
{
    static constexpr const char *pieces[] = {"[",        "]", "{", "}", "\\\"", "\\\\", "\\u005b",
                                             "\\\\\\\"", "a", ",", ":", "\\n",  "\\/"};
    std::string text = "\"";
    size_t count = input.ConsumeIntegralInRange<size_t>(0, 6);
    for (size_t i = 0; i < count; i++)
        text += input.PickValueInArray(pieces);
    return text + "\"";
}

std::string json_value(FuzzedDataProvider &input, int depth, size_t &deepest)
{
    if (depth >= max_generated_depth || input.remaining_bytes() == 0 || input.ConsumeBool())
    {
        static constexpr const char *scalars[] = {"null", "true", "false", "0", "-1.5e3"};
        if (input.ConsumeBool())
            return json_string(input);
        return input.PickValueInArray(scalars);
    }
    if (size_t(depth + 1) > deepest)
        deepest = depth + 1;
    bool array = input.ConsumeBool();
    std::string text = array ? "[" : "{";
    size_t count = input.ConsumeIntegralInRange<size_t>(0, 4);
    for (size_t i = 0; i < count; i++)
    {
        if (i > 0)
            text += ",";
        text += blank(input);
        if (!array)
            text += json_string(input) + blank(input) + ":" + blank(input);
        text += json_value(input, depth + 1, deepest) + blank(input);
    }
    return text + (array ? "]" : "}");
}

void check_generated(const uint8_t *data, size_t size)
{
    FuzzedDataProvider input(data, size);
    size_t deepest = 0;
    std::string text = blank(input) + json_value(input, 0, deepest) + blank(input);
    fuzz::require(canonical::json_nesting_depth(text.data(), text.size()) == deepest,
                  "a generated document's depth is the scan's");
    check_parser(text);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_parser(std::string(reinterpret_cast<const char *>(data), size));
    check_generated(data, size);
    return 0;
}
