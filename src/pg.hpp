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
#include <type_traits>

extern "C"
{
#include "postgres.h"
#include "fmgr.h"
}

// Every message the extension raises carries this message domain (errstart
// records it in ErrorData.domain), which tells its own messages from those
// PostgreSQL or another module raises, also inside a call of ours: the log
// gate (log_gate.cpp) keeps the details of the others out of the log.  No
// catalog is bound to it, so the messages stay as written, untranslated.
// elog.h (from postgres.h) defines it as NULL, PostgreSQL's own domain;
// modules replace it after, as PL/pgSQL's header does.
#undef TEXTDOMAIN
#define TEXTDOMAIN PG_TEXTDOMAIN("idempotency")

namespace idempotency
{

// Whether a T may live in memory that PostgreSQL hands out and takes back as
// raw bytes: shared memory (ShmemInitStruct, dynahash entries) and palloc.
// No constructor runs when such memory is handed out, no destructor when a
// context is reset, a backend exits or the postmaster reinitialises shared
// memory after a crash, and dynahash copies keys and entries with memcpy.
// A type that needed any of them would silently go wrong there, so each one
// placed there is checked with this, next to its definition.
template <typename T>
constexpr bool fits_postgres_memory = (std::is_trivially_default_constructible_v<T> &&
                                       std::is_trivially_copyable_v<T> &&
                                       std::is_trivially_destructible_v<T>);

} // namespace idempotency
