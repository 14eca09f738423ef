// Citus routing: a call that reached a node other than its shard's runs
// there, and a call Citus may delegate is checked before Citus plans it --
// see citus_routing.hpp.  Above the SQL functions; where keys are placed,
// and under which lock, it asks citus_placement.hpp.
#include "citus_routing.hpp"
#include "arguments.hpp"
#include "boundary.hpp"
#include "citus_placement.hpp"
#include "errcodes.hpp"
#include "compat.hpp"
#include "settings.hpp"
#include "store.hpp"

extern "C"
{
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_namespace_d.h"
#include "catalog/pg_type_d.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "catalog/pg_language_d.h"
#include "catalog/pg_proc.h"
#include "nodes/makefuncs.h"
#include "nodes/parsenodes.h"
#include "parser/parse_func.h"
#include "nodes/pathnodes.h"
#include "nodes/primnodes.h"
#include "optimizer/optimizer.h"
#include "optimizer/planner.h"
#include "funcapi.h"
#include "nodes/nodeFuncs.h"
#include "tcop/utility.h"
#include "utils/regproc.h"
#include "parser/parsetree.h"
#include "utils/syscache.h"
#include "catalog/pg_class.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "storage/sinval.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/typcache.h"
}

namespace idempotency::citus_routing
{

// Routing stands on placement (where a scope's shard is, its lock, 2PC) and
// on nothing else of Citus's; placement never calls back up here.
using namespace idempotency::citus_placement;

// ---------------------------------------------------------------------------
// A call whose shard is placed on another node, run there through Citus
// ---------------------------------------------------------------------------

// Citus's exported routines and flags that forward_call relies on, looked up
// once in the loaded library (NULL when a version does not export one: then
// calls are not forwarded), behind the version guard (exported).  Safe to
// keep for the backend's life: a loaded library is never unloaded, so the
// addresses stay valid.
struct CitusExecution
{
    bool looked_up;
    void (*use_coordinated_transaction)();
    bool (*internal_backend)();
    const bool *in_delegated_function; // InTopLevelDelegatedFunctionCall
    const bool *in_delegated_procedure;
};

static const CitusExecution &citus_execution()
{
    static CitusExecution execution = {};
    if (!execution.looked_up)
    {
        execution.use_coordinated_transaction =
            reinterpret_cast<void (*)()>(exported("UseCoordinatedTransaction"));
        execution.internal_backend =
            reinterpret_cast<bool (*)()>(exported("IsCitusInternalBackend"));
        execution.in_delegated_function =
            static_cast<const bool *>(exported("InTopLevelDelegatedFunctionCall"));
        execution.in_delegated_procedure =
            static_cast<const bool *>(exported("InDelegatedProcedureCall"));
        execution.looked_up = true;
    }
    return execution;
}

// Whether Citus lets this backend run a query on another node: its own rule
// against nested distributed execution.  A client's backend may; a backend
// Citus opened (a query on a shard, or a call it delegated) only inside a
// delegated call that Citus lets run remote queries (a function's call that
// is not force-delegated, or is outside a transaction block, or a
// procedure's).  Where Citus would refuse, the call answers IK005 instead.
// Only once routed_call found Citus's execution state exported.
static bool remote_execution_allowed()
{
    const CitusExecution &execution = citus_execution();
    return !execution.internal_backend() || *execution.in_delegated_function ||
           *execution.in_delegated_procedure;
}

// A call to run on the node of its scope's shard: the query's parts and its
// parameters, $1 the routing value (the distribution column's), $2.. the
// call's arguments.
struct RoutedCall
{
    bool write;        // a call that may write (else a read)
    const char *route; // idempotency.route, qualified
    char *call;        // the function, qualified, with its arguments
    int nparams;
    Oid *types;
    Datum *values;
    char *nulls;
};

// For tests (idempotency.inject_fault = pause_in_lock_free_routing): the
// key of the pause while this backend runs a query that Citus routes to a
// scope's shard without the shard's metadata lock, 0 otherwise.  The
// executor's run of that query pauses first (run_request_plan): after Citus
// planned it, before Citus runs it -- where a split that commits removes
// the shard that Citus planned the query for.
static uint64 lock_free_pause = 0;

// Set while this backend runs a routing query: were Citus ever to run the
// call here rather than on the shard's node, the call would forward itself
// again; it answers IK005 instead.  Reset when the query ends, by error too.
static bool forwarding = false;

// Whether `role` may `mode` (one privilege) the column `column` of
// `relation`: by the table's privileges or the column's, as the executor
// checks it.
static bool may_access_column(Oid relation, AttrNumber column, Oid role, AclMode mode)
{
    return pg_class_aclcheck(relation, role, mode) == ACLCHECK_OK ||
           pg_attribute_aclcheck(relation, column, role, mode) == ACLCHECK_OK;
}

// idempotency.route, the always-empty table that idempotency_distribute()
// distributes with the keys, by a column of the same type: its shard for a
// value is co-located with the keys' shard for it, so a query on it is
// routed to that node, and its writes share a connection with the business
// writes on the tenant's other shards (below).  The caller needs SELECT
// (and, for a write, UPDATE) on it, which the DBA grants (see the script).  IK005 when it is not
// distributed with the keys (they were distributed by 0.2.0: idempotency_distribute() distributes
// it) or the caller lacks those privileges, saying what to run.  Looked up for each forwarded call:
// forwarding is rare, and nothing is kept that an invalidation could make stale.
static Oid route_table(Oid keys, const Placement &placement, bool write)
{
    Oid schema = get_rel_namespace(keys);
    Oid route = get_relname_relid("route", schema);
    bool colocated = OidIsValid(route) && colocation_of(route) == placement.colocation;
    if (!colocated)
        not_routed(placement.shard,
                   "Calls are forwarded to the shard's node through the table idempotency.route, "
                   "which is not distributed with the keys: run SELECT idempotency_distribute(...) "
                   "again (once after an update from 0.2.0).");
    Oid role = GetUserId();
    if (!may_access_column(route, 1, role, ACL_SELECT) ||
        (write && !may_access_column(route, 1, role, ACL_UPDATE)))
    {
        const char *name = quote_identifier(GetUserNameFromId(role, false));
        not_routed(placement.shard,
                   psprintf("Calls are forwarded to the shard's node through the table "
                            "idempotency.route (it holds no row), as the calling role, which may "
                            "not use it: GRANT SELECT, UPDATE ON idempotency.route TO %s.",
                            name));
    }
    return route;
}

// The call `fcinfo` to `scope`'s shard: this function, by its name and its
// arguments' types, with every argument as given (defaults already filled
// in).  IK005 where it cannot be forwarded: Citus would refuse to run a
// query on another node, or the routing table cannot be used.  The routing
// queries run as the caller because Citus connects as the current role and
// ties the writes of a transaction on a tenant's co-located shards to one
// connection: run as another role (the keys' owner), a forwarded call and
// the caller's business writes on the same tenant would refuse each other.
static RoutedCall routed_call(FunctionCallInfo fcinfo, Oid keys, Datum scope,
                              const Placement &placement, bool write)
{
    if (placement.local)
        elog(ERROR, "forwarding a call whose shard " INT64_FORMAT " is placed here",
             placement.shard);
    const CitusExecution &execution = citus_execution();
    if (execution.use_coordinated_transaction == nullptr || execution.internal_backend == nullptr ||
        execution.in_delegated_function == nullptr || execution.in_delegated_procedure == nullptr)
        not_routed(placement.shard,
                   "Forwarding a call needs Citus's execution state, which the loaded Citus "
                   "library does not export (from PostgreSQL 16 on, extension libraries export "
                   "only their SQL functions).");
    if (!remote_execution_allowed() || forwarding)
        not_routed(placement.shard);
    Oid route = route_table(keys, placement, write);
    const Layout &current = layout_of(keys);
    RoutedCall routed;
    routed.write = write;
    routed.route = quote_qualified_identifier(get_namespace_name(get_rel_namespace(route)),
                                              get_rel_name(route));

    Oid function = fcinfo->flinfo != nullptr ? fcinfo->flinfo->fn_oid : InvalidOid;
    HeapTuple procedure = SearchSysCache1(PROCOID, ObjectIdGetDatum(function));
    if (!HeapTupleIsValid(procedure))
        elog(ERROR, "cache lookup failed for function %u", function);
    auto form = reinterpret_cast<Form_pg_proc>(GETSTRUCT(procedure));
    int nargs = fcinfo->nargs;
    if (nargs != form->pronargs)
        elog(ERROR, "forwarding a call with %d arguments of a function that takes %d", nargs,
             int(form->pronargs));
    StringInfoData call;
    initStringInfo(&call);
    appendStringInfo(
        &call, "%s(",
        quote_qualified_identifier(get_namespace_name(form->pronamespace), NameStr(form->proname)));
    routed.nparams = nargs + 1;
    routed.types = static_cast<Oid *>(palloc(sizeof(Oid) * routed.nparams));
    routed.values = static_cast<Datum *>(palloc(sizeof(Datum) * routed.nparams));
    routed.nulls = static_cast<char *>(palloc(routed.nparams));
    routed.types[0] = current.by_shard_key ? current.key_type : TEXTOID;
    routed.values[0] = current.by_shard_key
                           ? scope_value(const_cast<FmgrInfo *>(&current.input),
                                         current.input_param, current.key_type, scope)
                           : scope;
    routed.nulls[0] = ' ';
    for (int i = 0; i < nargs; i++)
    {
        appendStringInfo(&call, "%s$%d", i > 0 ? ", " : "", i + 2);
        routed.types[i + 1] = form->proargtypes.values[i];
        routed.values[i + 1] = fcinfo->args[i].value;
        routed.nulls[i + 1] = fcinfo->args[i].isnull ? 'n' : ' ';
    }
    appendStringInfoChar(&call, ')');
    ReleaseSysCache(procedure);
    routed.call = call.data;
    return routed;
}

// Citus routes a query to the node of a shard by its distribution column;
// these two name the routing table's shard for the scope (by $1), which
// holds no row.  The first is a write, so that Citus runs it, and all that
// follows on that node's co-located shards, in a transaction block it
// prepares with two-phase commit; the second runs the call on that node,
// once, giving one row (a set-returning call: its rows).
static const char route_write[] =
    "UPDATE %s SET tenant = tenant WHERE tenant OPERATOR(pg_catalog.=) $1";
static const char route_call[] = "SELECT %s FROM (SELECT pg_catalog.count(*) FROM %s"
                                 " WHERE tenant OPERATOR(pg_catalog.=) $1) AS route";

// Runs one of the queries above (as the caller: see routed_call).  Returns
// the number of rows, and for route_call their first column in *values and
// *nulls, copied into the caller's memory context.
static uint64 run_routed(const RoutedCall &routed, const char *format, Datum **values = nullptr,
                         bool **nulls = nullptr)
{
    bool call = format == route_call;
    char *query =
        call ? psprintf(format, routed.call, routed.route) : psprintf(format, routed.route);
    MemoryContext caller = CurrentMemoryContext;
    SPI_connect();
    int result;
    forwarding = true;
    PG_TRY();
    {
        result = SPI_execute_with_args(query, call ? routed.nparams : 1, routed.types,
                                       routed.values, routed.nulls, !routed.write, 0);
    }
    PG_FINALLY();
    {
        forwarding = false;
    }
    PG_END_TRY();
    if (result != (call ? SPI_OK_SELECT : SPI_OK_UPDATE))
        elog(ERROR, "forwarding a call to the node of its shard failed (SPI %d)", result);
    uint64 rows = SPI_processed;
    if (call)
    {
        Form_pg_attribute column = TupleDescAttr(SPI_tuptable->tupdesc, 0);
        *values = static_cast<Datum *>(MemoryContextAlloc(caller, sizeof(Datum) * (rows + 1)));
        *nulls = static_cast<bool *>(MemoryContextAlloc(caller, sizeof(bool) * (rows + 1)));
        for (uint64 i = 0; i < rows; i++)
        {
            Datum value =
                SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &(*nulls)[i]);
            (*values)[i] =
                (*nulls)[i] ? (Datum)0 : SPI_datumTransfer(value, column->attbyval, column->attlen);
        }
    }
    SPI_finish();
    return rows;
}

// Runs the call on the shard's node (route_call) and returns its one row,
// fcinfo->isnull set.
static Datum call_on_shard_node(FunctionCallInfo fcinfo, const RoutedCall &routed)
{
    Datum *values;
    bool *nulls;
    if (run_routed(routed, route_call, &values, &nulls) != 1)
        elog(ERROR, "a forwarded call did not give one row");
    fcinfo->isnull = nulls[0];
    return values[0];
}

Datum forward_call(FunctionCallInfo fcinfo, Datum scope)
{
    Oid keys = store::keys_table();
    // Held to the end of the transaction: the shard stays where the call goes.
    RoutedCall routed = routed_call(fcinfo, keys, scope, lock_placement(keys, scope), true);
    // The whole transaction commits with two-phase commit, the shard's node
    // prepared with the rest (see route_write).
    citus_execution().use_coordinated_transaction();
    force_two_phase(keys);
    run_routed(routed, route_write);
    return call_on_shard_node(fcinfo, routed);
}

// Runs `query`, which Citus routes to the scope's shard `placement` without
// that shard's metadata lock (a read, and a begin's replay during a move,
// must not wait for a move), and returns true; false, with nothing of it
// left, when a split removed that shard while Citus planned or began to run
// the query.  Citus picks the shard from its cached metadata and looks it
// up again later in planning and at the start of the run, taking in the
// invalidations of what committed meanwhile first: a split that committed
// in between has deleted the shard's metadata (keeping its table until a
// deferred drop), and Citus fails the query with an internal error, "could
// not find valid entry for shard ..." (XX000), which says nothing about the
// key.  A client must not get it.  So the query runs in a subtransaction
// (boundary.hpp's absorbing): an XX000 after which the scope's shard is no
// longer `placement`'s is rolled back, and the caller places the scope again
// -- a begin goes on as one that does not know its key completed (it waits
// for the lock, then is routed afresh), a read is placed afresh by the
// routed session (session.cpp), which opens it here or forwards it again;
// any other error propagates as before.  `pause`: the key of the test pause
// (lock_free_pause).
template <typename Query>
static bool unless_split(Oid keys, Datum scope, const Placement &placement, uint64 pause,
                         Query query)
{
    return absorbing(
        [&](const ErrorData &error) {
            if (error.sqlerrcode != ERRCODE_INTERNAL_ERROR)
                return false;
            AcceptInvalidationMessages();
            return !place(keys, scope).same_shard(placement);
        },
        [&] {
            lock_free_pause = pause;
            query();
            return true;
        },
        [] { lock_free_pause = 0; });
}

// Whether the keys hold a completed, unexpired record of (scope, key), which
// a begin only reads (replay or mismatch).  Asked through Citus -- a router
// query to the scope's placement, which takes no shard metadata lock -- as
// the table's owner, since the caller need not be allowed to read it.  Not
// known (false) when a split removed the shard meanwhile (unless_split).
static bool completed_record(Oid keys, const Placement &placement, Datum scope, Datum key)
{
    const Layout &current = layout_of(keys);
    StringInfoData query;
    initStringInfo(&query);
    appendStringInfoString(
        &query, "SELECT FROM idempotency.keys AS k"
                " WHERE k.tenant OPERATOR(pg_catalog.=) '0'::pg_catalog.oid"
                " AND k.scope OPERATOR(pg_catalog.=) $1 AND k.key OPERATOR(pg_catalog.=) $2"
                " AND k.status OPERATOR(pg_catalog.=) 'c'"
                " AND k.expires_at OPERATOR(pg_catalog.>) pg_catalog.statement_timestamp()");
    if (current.by_shard_key) // the distribution column, for Citus to route by
        appendStringInfo(&query, " AND k.shard_key OPERATOR(pg_catalog.=) $1::%s",
                         format_type_be_qualified(current.key_type));
    Oid types[] = {TEXTOID, TEXTOID};
    Datum values[] = {scope, key};
    bool found = false; // nor known, if a split removes the shard meanwhile
    (void)unless_split(keys, scope, placement, 18763, [&] {
        found = DatumGetBool(as_owner(current.owner, [&] {
            SPI_connect();
            bool seen = SPI_execute_with_args(query.data, 2, types, values, nullptr, true, 1) ==
                            SPI_OK_SELECT &&
                        SPI_processed > 0;
            SPI_finish();
            return BoolGetDatum(seen);
        }));
    });
    pfree(query.data);
    return found;
}

// Whether a begin of (scope, key), whose shard is `placement`, may run on
// the shard's node without that shard's metadata lock: only when a move
// holds or awaits the lock and the key is completed (a replay or a mismatch
// only reads, and must not wait for a move).  Otherwise false, with the lock
// held if it was free at once; the caller then locks the scope's shard,
// placing it again, as for any write.
static bool replays_without_lock(Oid keys, const Placement &placement, Datum scope, Datum key)
{
    return !lock_metadata(keys, placement, false) && completed_record(keys, placement, scope, key);
}

bool forward_replay(FunctionCallInfo fcinfo, Datum scope, Datum key, Datum *answer,
                    bool (*claimed)(FunctionCallInfo fcinfo, Datum answer))
{
    Oid keys = store::keys_table();
    Placement placement = place(keys, scope);
    // (A lock taken here is kept: the begin goes on with it, as a write.)
    if (!placement.distributed || placement.local ||
        !replays_without_lock(keys, placement, scope, key))
        return false;
    pause_for_test(fault_pause_before_forwarded_replay, 18760);
    RoutedCall routed = routed_call(fcinfo, keys, scope, placement, false);
    // In a coordinated transaction Citus runs even a read in a transaction
    // block on the shard's node, which this transaction's abort rolls back.
    citus_execution().use_coordinated_transaction();
    // A split that removes the shard meanwhile: the begin goes on as a write.
    if (!unless_split(keys, scope, placement, 18764,
                      [&] { *answer = call_on_shard_node(fcinfo, routed); }))
        return false;
    // The key expired or was forgotten since it was seen completed, and the
    // begin claimed it there, in a transaction block that Citus would commit
    // without two-phase commit (Citus saw no write on it): the error rolls
    // it back.
    if (!fcinfo->isnull && claimed(fcinfo, *answer))
        ereport(
            ERROR,
            (errcode(errcode_not_routed),
             errmsg("the idempotency key changed while its shard was being moved"),
             errdetail("The key was completed when the call was forwarded to shard " INT64_FORMAT
                       " without waiting for the move, and was claimed there; the claim is "
                       "rolled back.",
                       placement.shard),
             errhint("Retry the call: it waits for the move and claims the key."),
             errhidestmt(true)));
    return true;
}

bool forward_read(FunctionCallInfo fcinfo, Datum scope, Datum **rows, uint64 *count)
{
    // A read takes no lock here, as on the shard's node (read_placement).
    Oid keys = store::keys_table();
    Placement placement = place(keys, scope);
    if (placement.local)
        return false; // moved here since the caller looked
    RoutedCall routed = routed_call(fcinfo, keys, scope, placement, false);
    bool *nulls = nullptr;
    if (!unless_split(keys, scope, placement, 18764,
                      [&] { *count = run_routed(routed, route_call, rows, &nulls); }))
        return false;
    for (uint64 i = 0; i < *count; i++)
        if (nulls[i])
            elog(ERROR, "a forwarded read gave a NULL row");
    return true;
}
// ---------------------------------------------------------------------------
// Before Citus plans a call's delegation: NULL and typed scopes checked,
// the shard of a write locked
// ---------------------------------------------------------------------------

static planner_hook_type previous_planner = nullptr;

// The function call Citus would delegate, if the query is one: SELECT f(...)
// or SELECT ... FROM f(...), and nothing else.
static FuncExpr *single_call(const Query *query)
{
    if (query->commandType != CMD_SELECT || query->jointree == nullptr)
        return nullptr;
    const List *from = query->jointree->fromlist;
    if (list_length(from) == 1 && IsA(linitial(from), RangeTblRef))
    {
        const RangeTblEntry *rte =
            rt_fetch(castNode(RangeTblRef, linitial(from))->rtindex, query->rtable);
        if (rte->rtekind == RTE_FUNCTION && list_length(rte->functions) == 1)
        {
            Node *call = castNode(RangeTblFunction, linitial(rte->functions))->funcexpr;
            return IsA(call, FuncExpr) ? castNode(FuncExpr, call) : nullptr;
        }
    }
    if (from == NIL && list_length(query->targetList) == 1)
    {
        Node *expr =
            reinterpret_cast<Node *>(castNode(TargetEntry, linitial(query->targetList))->expr);
        return IsA(expr, FuncExpr) ? castNode(FuncExpr, expr) : nullptr;
    }
    return nullptr;
}

// What a function that idempotency_distribute() delegates by its first
// argument, the scope, does with the scope's keys.
enum class Access
{
    none,   // not such a function
    reads,  // lookup, keys
    writes, // complete, checkpoint, release, forget
    begins, // begin: a write, or a read when the key is completed
};

// What `function` does, if it is a C function of this library taking a scope.
static Access delegated_access(Oid function)
{
    static const struct
    {
        const char *name;
        Access access;
    } functions[] = {
        {"idempotency_begin", Access::begins},      {"idempotency_complete", Access::writes},
        {"idempotency_checkpoint", Access::writes}, {"idempotency_release", Access::writes},
        {"idempotency_forget", Access::writes},     {"idempotency_lookup", Access::reads},
        {"idempotency_keys", Access::reads}};
    HeapTuple tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(function));
    if (!HeapTupleIsValid(tuple))
        return Access::none;
    Access access = Access::none;
    if (reinterpret_cast<Form_pg_proc>(GETSTRUCT(tuple))->prolang == ClanguageId)
    {
        bool isnull;
        Datum prosrc = SysCacheGetAttr(PROCOID, tuple, Anum_pg_proc_prosrc, &isnull);
        Datum probin = SysCacheGetAttr(PROCOID, tuple, Anum_pg_proc_probin, &isnull);
        if (!isnull && strcmp(TextDatumGetCString(probin), "$libdir/idempotency") == 0)
        {
            char *source = TextDatumGetCString(prosrc);
            for (const auto &candidate : functions)
                if (strcmp(source, candidate.name) == 0)
                    access = candidate.access;
        }
    }
    ReleaseSysCache(tuple);
    return access;
}

// Set when this transaction lets Citus delegate a call that may write to
// another node (prepare_delegation); reset when the transaction ends.  A
// rollback to a savepoint leaves it set: at worst one two-phase commit more.
static bool delegated_write = false;

// At the commit of a transaction that wrote on this node (it has a
// transaction id) and let Citus delegate a call that may write to another:
// Citus would commit that node's part -- the claim, or its completion --
// with a one-phase COMMIT before this node's commit record, since it does
// not count writes to tables it does not manage, and a crash between the
// two would keep the completed claim without this node's writes: a retry
// would replay a response whose work is lost.  So Citus is asked for
// two-phase commit, as for keys kept here (by its routine, else through
// idempotency.two_phase).  Runs before Citus's pre-commit work: the library
// is loaded after Citus's, and transaction callbacks run newest first.  (A
// sequence's nextval assigns a transaction id too, at every 32nd value it
// logs: then two-phase commit is not needed, but this cannot tell.)  Where
// Citus cannot be asked (PostgreSQL 16 and later, idempotency.two_phase not
// a reference table), the commit goes on as Citus makes it -- refusing it
// would fail requests whenever a sequence logs -- and doc/citus.md says to
// keep a request's writes in distributed tables.
static void on_transaction_event(XactEvent event, void *)
{
    if (!delegated_write)
        return;
    switch (event)
    {
        case XACT_EVENT_PRE_COMMIT:
            if (TransactionIdIsValid(GetTopTransactionIdIfAny()))
                (void)errors_without_request_data(
                    [](FunctionCallInfo) {
                        return BoolGetDatum(request_two_phase() ||
                                            two_phase_by_reference_table(store::keys_table()));
                    },
                    nullptr);
            break;
        case XACT_EVENT_COMMIT:
        case XACT_EVENT_ABORT:
        case XACT_EVENT_PREPARE:
            delegated_write = false;
            break;
        default:
            break;
    }
}

// What the hook does with a delegated call's constant scope, through the
// error boundary: the statement may hold request data.  Arguments: the
// scope, its type (text, bigint or uuid), the key (NULL unless a begin's
// constant key) and the Access.
//
// With a typed tenant, Citus converts the scope to the tenant's type (a
// bigint scope to an integer tenant) in planning, and a scope that is not a
// value of it would fail there, with the statement in the log: place()
// reads it as the functions do, first.  A text scope is never converted by
// Citus: with a typed tenant the text functions are not delegated.
//
// Citus delegates a call to the node of its scope's shard without a lock,
// and leaves the locking to that node; a shard move or split that switches
// the shard over meanwhile leaves the call on a node that no longer has it
// (IK005).  Citus's own router writes lock the shard's metadata where they
// are planned, before they pick the placement, and so wait out a move and
// then go to the new node.  A call that may write does the same on the node
// that delegates it (not the shard's): ShareLock on the shard's metadata,
// held to the end of the transaction as Citus holds its own, taken before
// Citus's planner picks the placement -- which it then reads after the
// invalidations of any switch the lock waited for (lock_placement).  The
// wait is a lock wait: cancellable, bounded by lock_timeout, as for a plain
// write.  A begin of a completed key only reads, and a read never waits for
// a move: when the lock is not free at once, a begin first asks whether
// its key is completed, and if so goes without the lock.
static Datum prepare_delegation(FunctionCallInfo fcinfo)
{
    Oid keys = store::keys_table();
    if (!OidIsValid(keys))
        return (Datum)0;
    const Layout &current = layout_of(keys);
    Oid type = DatumGetObjectId(fcinfo->args[1].value);
    if (!current.distributed || (current.by_shard_key && type == TEXTOID))
        return (Datum)0; // not delegated: runs here
    auto access = static_cast<Access>(DatumGetInt32(fcinfo->args[3].value));
    // (A read needs the scope read only when Citus converts it.)
    if (access == Access::reads && (!current.by_shard_key || current.key_type == type))
        return (Datum)0;
    Datum scope = arguments::scope_text(fcinfo->args[0].value, type);
    Placement placement = place(keys, scope);
    if (access == Access::reads || placement.local)
        return (Datum)0; // a read, or runs here and locks for itself
    delegated_write = true;
    if (access == Access::begins && !fcinfo->args[2].isnull &&
        replays_without_lock(keys, placement, scope, fcinfo->args[2].value))
        return (Datum)0;
    lock_placement(keys, scope);
    return (Datum)0;
}

// A call that Citus may delegate with request data in it: of one of the
// seven functions (delegated by the scope), or of a function that Citus
// distributes with the keys (a handler, delegated by its tenant argument).
struct RequestCall
{
    FuncExpr *call;
    Access access;           // the API function's; none for a handler
    DistributedFunction how; // a handler's distribution
};

// Whether `call`, the single call of `query`, is such a call.  A handler
// counts only with the keys distributed, in their co-location group (the
// keys' shards are where Citus sends it), and in a statement Citus
// delegates: one without a WHERE clause.
static bool request_call(const Query *query, FuncExpr *call, RequestCall *found)
{
    *found = RequestCall{call, Access::none, {}};
    if (call->args == NIL)
        return false;
    found->access = delegated_access(call->funcid);
    if (found->access != Access::none)
        return true;
    found->how = citus_distributed_function(call->funcid);
    if (!found->how.distributed || !store::keys_in_shards())
        return false;
    // (In a transaction block Citus delegates it with force_delegation: it
    // may claim on another node.)
    if (IsTransactionBlock())
        delegated_write = true;
    return query->jointree->quals == nullptr &&
           layout_of(store::keys_table()).colocation == found->how.colocation;
}

// The arguments of `call` in the order of the function's declaration, named
// ones in their places and defaults filled in, as the planner passes them
// to Citus's (expand_function_arguments): the index Citus keeps counts them
// so.
static List *declared_arguments(const FuncExpr *call)
{
    HeapTuple procedure = SearchSysCache1(PROCOID, ObjectIdGetDatum(call->funcid));
    if (!HeapTupleIsValid(procedure))
        elog(ERROR, "cache lookup failed for function %u", call->funcid);
    List *arguments = expand_function_arguments(call->args, false, call->funcresulttype, procedure);
    ReleaseSysCache(procedure);
    return arguments;
}

// An argument as Citus's planner sees it: folded by the planner (bound
// parameters included, as in a custom plan), implicit coercions stripped.
static Node *folded_argument(Query *query, ParamListInfo params, List *arguments, int n)
{
    if (n < 0 || n >= list_length(arguments))
        return nullptr;
    PlannerGlobal glob = {};
    glob.type = T_PlannerGlobal;
    glob.boundParams = params;
    PlannerInfo root = {};
    root.type = T_PlannerInfo;
    root.glob = &glob;
    root.parse = query;
    return strip_implicit_coercions(
        eval_const_expressions(&root, static_cast<Node *>(list_nth(arguments, n))));
}

static bool null_constant(const Node *node)
{
    // Not castNode: with assertions on it takes a pointer to non-const.
    return node != nullptr && IsA(node, Const) &&
           reinterpret_cast<const Const *>(node)->constisnull;
}

// Citus delegates a distributed function's call by its distribution
// argument, and hashes that value without a NULL check: a NULL would crash
// the backend, and with it every session.  22004 instead, before Citus
// plans the call; for a handler, naming its argument.
[[noreturn]] static void refuse_null_distribution_argument(Oid function, int argument)
{
    char **names = nullptr;
    HeapTuple procedure = SearchSysCache1(PROCOID, ObjectIdGetDatum(function));
    if (HeapTupleIsValid(procedure))
    {
        Oid *types;
        char *modes;
        if (argument >= get_func_arg_info(procedure, &types, &names, &modes))
            names = nullptr;
        ReleaseSysCache(procedure);
    }
    const char *name = names != nullptr && names[argument] != nullptr && names[argument][0] != '\0'
                           ? names[argument]
                           : psprintf("$%d", argument + 1);
    ereport(ERROR,
            (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("%s must not be null", name),
             errdetail("Citus distributes function %s with idempotency.keys by this argument, "
                       "and delegates its calls by the argument's value.",
                       format_procedure(function)),
             errhidestmt(true)));
}

// A single-call statement to plan, and its plan.
struct PlanRequest
{
    Query *query;
    const char *text;
    int options;
    ParamListInfo params;
    RequestCall found;
    PlannedStmt *plan;
};

static PlannedStmt *next_planner(Query *query, const char *text, int options, ParamListInfo params)
{
    return previous_planner != nullptr ? previous_planner(query, text, options, params)
                                       : standard_planner(query, text, options, params);
}

// Plans a request call (through the error boundary: the statement may hold
// request data, and so may any error raised planning it, Citus's included).
static void plan_request_call(void *argument)
{
    PlanRequest &request = *static_cast<PlanRequest *>(argument);
    const RequestCall &found = request.found;
    List *arguments = declared_arguments(found.call);
    if (found.access == Access::none)
    {
        if (null_constant(
                folded_argument(request.query, request.params, arguments, found.how.argument)))
            refuse_null_distribution_argument(found.call->funcid, found.how.argument);
    }
    else
    {
        Node *scope = folded_argument(request.query, request.params, arguments, 0);
        if (null_constant(scope))
            ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                            errmsg("scope must not be null"), errhidestmt(true)));
        // Citus delegates only by a constant scope; a read by a text scope
        // needs nothing (see prepare_delegation).
        if (scope != nullptr && IsA(scope, Const) &&
            !(found.access == Access::reads && castNode(Const, scope)->consttype == TEXTOID))
        {
            Node *key = found.access == Access::begins
                            ? folded_argument(request.query, request.params, arguments, 1)
                            : nullptr;
            bool key_known = key != nullptr && IsA(key, Const) &&
                             !castNode(Const, key)->constisnull &&
                             castNode(Const, key)->consttype == TEXTOID;
            LOCAL_FCINFO(prepare, 4);
            InitFunctionCallInfoData(*prepare, nullptr, 4, InvalidOid, nullptr, nullptr);
            prepare->args[0].value = castNode(Const, scope)->constvalue;
            prepare->args[0].isnull = false;
            prepare->args[1].value = ObjectIdGetDatum(castNode(Const, scope)->consttype);
            prepare->args[1].isnull = false;
            prepare->args[2].value = key_known ? castNode(Const, key)->constvalue : (Datum)0;
            prepare->args[2].isnull = !key_known;
            prepare->args[3].value = Int32GetDatum(static_cast<int32>(found.access));
            prepare->args[3].isnull = false;
            prepare_delegation(prepare);
        }
    }
    request.plan = next_planner(request.query, request.text, request.options, request.params);
}

// The plan of the last request call planned here, whose execution hides its
// statement from the log too (run_request_plan): Citus raises the errors
// of a delegated call's remote execution -- a worker that dies mid-call --
// and logs them with the statement, which may hold the request's body.
// Kept beyond the statement for a cached plan executed again without
// planning (one without parameters; Citus plans a call with parameters
// afresh at each execution); another request call's plan replaces it.  A
// freed plan's address taken by another plan only hides that statement's
// line too, never shows one.
static const PlannedStmt *request_plan = nullptr;

// Citus delegates a distributed function's call to the node of its
// distribution argument after the planner has folded the arguments.  This
// hook runs before Citus's planner (the library is loaded after Citus) and,
// for a request call (request_call), refuses a NULL distribution argument
// (Citus would crash on it), reads a scope for a typed tenant and locks the
// shard of a call that may write (prepare_delegation), folding the
// arguments the way the planner will (named arguments, defaults and bound
// parameters included).  Citus delegates only a constant distribution
// argument, and plans a call with parameters afresh at each execution, so
// the hook sees every call Citus delegates but a cached call without
// parameters, which it saw when planned.
static PlannedStmt *plan_delegated_call(Query *query, const char *text, int options,
                                        ParamListInfo params)
{
    FuncExpr *call = single_call(query);
    PlanRequest request = {query, text, options, params, {}, nullptr};
    if (call == nullptr || !request_call(query, call, &request.found))
        return next_planner(query, text, options, params);
    errors_without_request_data(plan_request_call, &request);
    request_plan = request.plan;
    return request.plan;
}

// The executor's run of a request call's plan, through the error boundary
// (see request_plan); every other plan runs as it comes.
static void continue_run(void *run)
{
    compat::continue_executor_run(static_cast<compat::ExecutorRunArgs *>(run));
}

static void run_request_plan(compat::ExecutorRunArgs *run)
{
    if (unlikely(lock_free_pause != 0))
    {
        uint64 key = lock_free_pause;
        lock_free_pause = 0;
        pause_for_test(fault_pause_in_lock_free_routing, key);
    }
    if (run->query->plannedstmt == request_plan)
        errors_without_request_data(continue_run, run);
    else
        compat::continue_executor_run(run);
}

static ProcessUtility_hook_type previous_utility = nullptr;

// A CALL's arguments in the order of the procedure's declaration, as Citus
// reads them to delegate it: its input arguments, with output ones (passed
// as NULL) in their places.
static List *declared_call_arguments(const CallStmt *call)
{
    HeapTuple procedure = SearchSysCache1(PROCOID, ObjectIdGetDatum(call->funcexpr->funcid));
    if (!HeapTupleIsValid(procedure))
        elog(ERROR, "cache lookup failed for procedure %u", call->funcexpr->funcid);
    Oid *types;
    char **names;
    char *modes;
    int count = get_func_arg_info(procedure, &types, &names, &modes);
    ReleaseSysCache(procedure);
    if (modes == nullptr)
        return call->funcexpr->args;
    List *arguments = NIL;
    int in = 0, out = 0;
    for (int i = 0; i < count; i++)
    {
        bool output = modes[i] == PROARGMODE_OUT;
        const List *from = output ? call->outargs : call->funcexpr->args;
        int &next = output ? out : in;
        if (next >= list_length(from))
            break;
        arguments = lappend(arguments, list_nth(from, next++));
        if (modes[i] == PROARGMODE_INOUT)
            out++;
    }
    return arguments;
}

// A statement to run (ProcessUtility's arguments), and the procedure a CALL
// of it calls, if Citus distributes it with the keys.
struct UtilityRequest
{
    PlannedStmt *statement;
    const char *text;
    bool read_only_tree;
    ProcessUtilityContext context;
    ParamListInfo params;
    QueryEnvironment *environment;
    DestReceiver *destination;
    QueryCompletion *completion;
    DistributedFunction how;
};

static void next_utility(UtilityRequest &request)
{
    (previous_utility != nullptr ? previous_utility : standard_ProcessUtility)(
        request.statement, request.text, request.read_only_tree, request.context, request.params,
        request.environment, request.destination, request.completion);
}

// A CALL of a procedure Citus distributes with the keys (a handler written
// as a procedure), through the error boundary: Citus delegates it by a
// constant argument, unfolded, which must not be NULL either.
static void call_request_procedure(void *argument)
{
    UtilityRequest &request = *static_cast<UtilityRequest *>(argument);
    const CallStmt *call = castNode(CallStmt, request.statement->utilityStmt);
    List *arguments = declared_call_arguments(call);
    if (request.how.argument >= 0 && request.how.argument < list_length(arguments) &&
        null_constant(strip_implicit_coercions(
            static_cast<Node *>(list_nth(arguments, request.how.argument)))))
        refuse_null_distribution_argument(call->funcexpr->funcid, request.how.argument);
    next_utility(request);
}

// Before Citus's CALL delegation (its utility hook runs after this one):
// a request procedure's CALL (call_request_procedure); everything else as
// it comes.
static void run_utility(PlannedStmt *statement, const char *text, bool read_only_tree,
                        ProcessUtilityContext context, ParamListInfo params,
                        QueryEnvironment *environment, DestReceiver *destination,
                        QueryCompletion *completion)
{
    UtilityRequest request = {statement,   text,        read_only_tree, context, params,
                              environment, destination, completion,     {}};
    Node *parsed = statement->utilityStmt;
    if (parsed != nullptr && IsA(parsed, CallStmt))
    {
        const FuncExpr *call = castNode(CallStmt, parsed)->funcexpr;
        request.how = citus_distributed_function(call->funcid);
        if (request.how.distributed && store::keys_in_shards() &&
            layout_of(store::keys_table()).colocation == request.how.colocation)
        {
            errors_without_request_data(call_request_procedure, &request);
            return;
        }
    }
    next_utility(request);
}

void guard_delegation()
{
    if (GetConfigOption("citus.version", true, false) == nullptr)
        return; // Citus is not loaded before us: nothing delegates our calls
    previous_planner = planner_hook;
    planner_hook = plan_delegated_call;
    previous_utility = ProcessUtility_hook;
    ProcessUtility_hook = run_utility;
    compat::wrap_executor_run(run_request_plan);
    RegisterXactCallback(on_transaction_event, nullptr);
}

} // namespace idempotency::citus_routing

// ---------------------------------------------------------------------------
// Before the API is distributed
// ---------------------------------------------------------------------------

// idempotency.require_tested_citus(), which idempotency_distribute() calls
// before its first change: the version guard of every call
// (citus_placement::require_tested_citus, the one list of tested releases), so that on
// an untested Citus release or PostgreSQL major the distribution is refused
// (0A000) with nothing changed, rather than done for calls that would then
// all be refused.
IDEMPOTENCY_FUNCTION(idempotency_require_tested_citus)
{
    (void)fcinfo;
    idempotency::citus_placement::require_tested_citus();
    PG_RETURN_VOID();
}
