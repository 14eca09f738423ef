// Shared by the libFuzzer harnesses: a sink that collects bytes in a string,
// and the check that turns a broken property into a crash libFuzzer reports.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "canonical.hpp"

namespace fuzz
{

// A ByteSink appending to a std::string.
inline idempotency::canonical::ByteSink string_sink(std::string &out)
{
    return {&out, [](void *context, const void *data, size_t size) {
                static_cast<std::string *>(context)->append(static_cast<const char *>(data), size);
            }};
}

// Aborts with `what` unless `property` holds: libFuzzer saves the input.
inline void require(bool property, const char *what)
{
    if (property)
        return;
    fprintf(stderr, "property violated: %s\n", what);
    abort();
}

} // namespace fuzz
