// The log gate: an emit_log_hook that keeps a statement calling the
// extension, and the CONTEXT lines that may quote it, out of the server log
// for every message logged while that statement runs, wherever the message
// is raised.  log_gate.cpp says how it tells such a statement and what it
// hides.
#pragma once

#include "pg.hpp"

extern "C"
{
#include "access/xact.h"
}

namespace idempotency::log_gate
{

// Installs the hook (from _PG_init), in front of any emit_log_hook already
// installed, which it then calls.
void install();

// The start time of the last top-level statement in which a function of the
// extension was called (0: none yet); note_call() sets it.
extern TimestampTz statement_with_call;

// Marks the running statement as one that calls the extension, for the
// messages logged after the call returned (an application's function that
// fails after calling us, whose statement names only itself) and those of a
// statement whose text is elsewhere.  Every SQL function and every hook's
// work on a call runs it, through the error boundary (boundary.cpp): a
// function call and a store, the gate's only cost to a request that logs
// nothing.
inline void note_call()
{
    statement_with_call = GetCurrentStatementStartTimestamp();
}

} // namespace idempotency::log_gate
