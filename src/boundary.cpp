#include "boundary.hpp"

namespace idempotency
{

void capture_exception(CaughtException &caught, int sqlerrcode, const char *message) noexcept
{
    caught.sqlerrcode = sqlerrcode;
    size_t n = message ? strnlen(message, sizeof(caught.message) - 1) : 0;
    memcpy(caught.message, message ? message : "", n);
    caught.message[n] = '\0';
}

void report_exception(const CaughtException &caught)
{
    ereport(ERROR, (errcode(caught.sqlerrcode), errmsg("%s", caught.message),
                    errdetail("The error was raised as a C++ exception inside the idempotency "
                              "extension and converted at its error boundary.")));
    pg_unreachable();
}

} // namespace idempotency
