// The one place that includes PostgreSQL's headers into C++.
//
// Standard headers first, then PostgreSQL's inside extern "C".  PostgreSQL
// redefines some names as macros (printf and friends become pg_printf, Min, Max,
// foreach, gettext), so no standard header may be included after this one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <climits>
#include <cstring>
#include <new>
#include <exception>

extern "C"
{
#include "postgres.h"
#include "fmgr.h"
}
