// Every difference between the PostgreSQL versions the extension supports
// (15 to 18) that its code meets, as one small wrapper each.  No other file
// tests PG_VERSION_NUM (the pure C++ files only check that no PostgreSQL
// header came in); a new major version is ported here.
#pragma once

#include "pg.hpp"

extern "C"
{
#include "access/genam.h"
#include "catalog/pg_database.h"
#include "common/jsonapi.h"
#include "miscadmin.h"
#include "executor/executor.h"
#include "nodes/parsenodes.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "utils/relcache.h"
#include "utils/regproc.h"
#if PG_VERSION_NUM >= 160000
#include "parser/parse_relation.h"
// The varlena macros (VARDATA_ANY, VARSIZE_ANY_EXHDR, ...), which postgres.h
// itself defined before 16.
#include "varatt.h"
#endif
}

namespace idempotency::compat
{

// The PostgreSQL major version the library is built for (15, 17, 18).
constexpr int major_version = PG_VERSION_NUM / 10000;

// From 16 on, PGXS builds extension libraries with hidden symbols: another
// library's routines are found only if it exports them itself.
constexpr bool libraries_hide_symbols = PG_VERSION_NUM >= 160000;

// The local transaction id of this backend's current transaction (moved
// into MyProc->vxid in 17).
inline LocalTransactionId current_lxid()
{
#if PG_VERSION_NUM >= 170000
    return MyProc->vxid.lxid;
#else
    return MyProc->lxid;
#endif
}

// Whether this backend holds `lockmode` itself on relation `relid` (17
// added the choice of accepting a stronger mode).
inline bool relation_lock_held(Oid relid, LOCKMODE lockmode)
{
    LOCKTAG tag;
    SET_LOCKTAG_RELATION(tag, MyDatabaseId, relid);
#if PG_VERSION_NUM >= 170000
    return LockHeldByMe(&tag, lockmode, false);
#else
    return LockHeldByMe(&tag, lockmode);
#endif
}

// The executor's range table for a single relation, as the logical
// replication apply worker builds it: permission info moved out of the range
// table entry in 16, and 18 wants the set of unpruned relations.
inline void init_range_table(EState *estate, RangeTblEntry *rte)
{
#if PG_VERSION_NUM >= 160000
    List *perminfos = NIL;
    addRTEPermissionInfo(&perminfos, rte);
#endif
#if PG_VERSION_NUM >= 180000
    ExecInitRangeTable(estate, list_make1(rte), perminfos, bms_make_singleton(1));
#elif PG_VERSION_NUM >= 160000
    ExecInitRangeTable(estate, list_make1(rte), perminfos);
#else
    ExecInitRangeTable(estate, list_make1(rte));
#endif
}

// An EvalPlanQual state without a plan, which the single-row executor
// routines take (16 added the result relations argument).
inline void init_epq(EPQState *epq, EState *estate)
{
#if PG_VERSION_NUM >= 160000
    EvalPlanQualInit(epq, estate, nullptr, NIL, -1, NIL);
#else
    EvalPlanQualInit(epq, estate, nullptr, NIL, -1);
#endif
}

// An index scan with nkeys scan keys and no ordering operators, without
// instrumentation (18 added the instrument argument).
inline IndexScanDesc begin_index_scan(Relation heap, Relation index, Snapshot snapshot, int nkeys)
{
#if PG_VERSION_NUM >= 180000
    return index_beginscan(heap, index, snapshot, nullptr, nkeys, 0);
#else
    return index_beginscan(heap, index, snapshot, nkeys, 0);
#endif
}

// The table's primary key index, InvalidOid if none (18 added the choice of
// accepting a deferrable one; ours is never deferrable).
inline Oid primary_key_index(Relation heap)
{
#if PG_VERSION_NUM >= 180000
    return RelationGetPrimaryKeyIndex(heap, false);
#else
    return RelationGetPrimaryKeyIndex(heap);
#endif
}

// A database that an interrupted DROP DATABASE left behind (datconnlimit
// -2, from 16 and the 15.4 minor release on).
inline bool database_is_invalid(Form_pg_database database)
{
#ifdef DATCONNLIMIT_INVALID_DB
    return database->datconnlimit == DATCONNLIMIT_INVALID_DB;
#else
    return false;
#endif
}

// Whether `len` bytes at `text` (verified in `encoding`) are one JSON document
// as json and jsonb input read it, escapes included (\u0000 and lone
// surrogates are refused), without raising an error for one that is not.  (17
// lets the caller own the lexer, and frees what it allocated.)
inline bool is_json_document(char *text, int len, int encoding)
{
#if PG_VERSION_NUM >= 170000
    JsonLexContext lexer;
    makeJsonLexContextCstringLen(&lexer, text, len, encoding, true);
    bool parsed = pg_parse_json(&lexer, &nullSemAction) == JSON_SUCCESS;
    freeJsonLexContext(&lexer);
    return parsed;
#else
    JsonLexContext *lexer = makeJsonLexContextCstringLen(text, len, encoding, true);
    return pg_parse_json(lexer, &nullSemAction) == JSON_SUCCESS;
#endif
}

// A qualified name's parts, as the parser splits it (16 added a soft error
// context; errors are raised here).
inline List *qualified_name_list(const char *name)
{
#if PG_VERSION_NUM >= 160000
    return stringToQualifiedNameList(name, nullptr);
#else
    return stringToQualifiedNameList(name);
#endif
}

// ExecutorRun's arguments, for a hook around it (18 dropped execute_once).
struct ExecutorRunArgs
{
    QueryDesc *query;
    ScanDirection direction;
    uint64 count;
    bool execute_once;
};

// The hook that was installed before wrap_executor_run's, and its wrapper.
inline ExecutorRun_hook_type previous_executor_run = nullptr;
inline void (*executor_run_wrapper)(ExecutorRunArgs *run) = nullptr;

// Runs the rest of the chain: the previous hook, or the executor itself.
inline void continue_executor_run(ExecutorRunArgs *run)
{
#if PG_VERSION_NUM >= 180000
    (previous_executor_run != nullptr ? previous_executor_run : standard_ExecutorRun)(
        run->query, run->direction, run->count);
#else
    (previous_executor_run != nullptr ? previous_executor_run : standard_ExecutorRun)(
        run->query, run->direction, run->count, run->execute_once);
#endif
}

#if PG_VERSION_NUM >= 180000
inline void run_executor_wrapper(QueryDesc *query, ScanDirection direction, uint64 count)
{
    ExecutorRunArgs run = {query, direction, count, true};
    executor_run_wrapper(&run);
}
#else
inline void run_executor_wrapper(QueryDesc *query, ScanDirection direction, uint64 count,
                                 bool execute_once)
{
    ExecutorRunArgs run = {query, direction, count, execute_once};
    executor_run_wrapper(&run);
}
#endif

// Installs `wrapper` around every ExecutorRun of this backend (from
// _PG_init); it calls continue_executor_run to run the plan.
inline void wrap_executor_run(void (*wrapper)(ExecutorRunArgs *run))
{
    previous_executor_run = ExecutorRun_hook;
    executor_run_wrapper = wrapper;
    ExecutorRun_hook = run_executor_wrapper;
}

} // namespace idempotency::compat
