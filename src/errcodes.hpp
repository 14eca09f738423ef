// Generated from src/errcodes.txt by src/errcodes.pl (make errcodes): do not edit.
#pragma once

#include "pg.hpp"

namespace idempotency
{

// The extension's own SQLSTATEs (class IK), documented in doc/reference.md, "Errors".
constexpr int errcode_invalid_key = MAKE_SQLSTATE('I', 'K', '0', '0', '6');
constexpr int errcode_key_not_claimed = MAKE_SQLSTATE('I', 'K', '0', '0', '1');
constexpr int errcode_key_completed = MAKE_SQLSTATE('I', 'K', '0', '0', '2');
constexpr int errcode_stale_attempt = MAKE_SQLSTATE('I', 'K', '0', '0', '3');
constexpr int errcode_unfinished_autocommit_claim = MAKE_SQLSTATE('I', 'K', '0', '0', '4');
constexpr int errcode_not_routed = MAKE_SQLSTATE('I', 'K', '0', '0', '5');
constexpr int errcode_invalid_record = MAKE_SQLSTATE('I', 'K', '0', '0', '7');
constexpr int errcode_key_digest_collision = MAKE_SQLSTATE('I', 'K', '0', '0', '8');
constexpr int errcode_cxx_exception = MAKE_SQLSTATE('I', 'K', '0', '0', '0');

} // namespace idempotency
