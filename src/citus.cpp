// Citus support: see citus.hpp for the protocol and the cache.
#include "citus.hpp"
#include "arguments.hpp"
#include "boundary.hpp"
#include "errcodes.hpp"
#include "compat.hpp"
#include "module.hpp"
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

namespace idempotency::citus
{

// locktag_field4 of Citus's lock on the metadata of co-located shards.
constexpr uint16 colocated_shards_metadata_lock = 8;

// ---------------------------------------------------------------------------
// The layout of the table, from Citus's catalogs
// ---------------------------------------------------------------------------

struct Shard
{
    int64 id;
    int32 min;  // start of its hash range: the shards' order, whose index the
                // metadata lock's tag holds (metadata_locktag)
    bool local; // placed on this node
};

// See "Cache" in citus.hpp.  Everything but the fields below lives in
// layout_context, which a rebuild replaces.
struct Layout
{
    Oid keys;          // the table described; InvalidOid: nothing yet
    uint64 generation; // of `invalidations` when it was read
    bool distributed;  // hash-distributed by Citus
    uint32 colocation; // its co-location group
    bool by_shard_key; // by shard_key, a typed tenant (else by scope, text)
    Oid key_type;      // the distribution column's type
    Oid owner;         // the table's owner
    FmgrInfo shard_id; // Citus's get_shard_id_for_distribution_column(), for key_type
    FmgrInfo input;    // by_shard_key: the type's input function, and its
    Oid input_param;   //   type parameter, which read the scope as that type,
    FmgrInfo output;   //   and its output function, which spells the value
    int32 group;       // this node's group: 0 on the coordinator, -1 without Citus
    int shard_count;   // shards, sorted by the start of their range
    Shard *shards;
    Oid catalogs[4]; // the pg_dist_* catalogs read, whose invalidation counts
};

// Where shard `id` is in `layout.shards`; -1 when it is not there.
static int shard_position(const Layout &layout, int64 id)
{
    for (int i = 0; i < layout.shard_count; i++)
        if (layout.shards[i].id == id)
            return i;
    return -1;
}

static Layout layout = {};
static uint64 invalidations = 1;
static MemoryContext layout_context = nullptr;

// Citus's catalog of distributed objects, once citus_distributed_function()
// read it: its invalidations count too.
static Oid watched_dist_object = InvalidOid;

static void invalidate_layout(Datum, Oid relid)
{
    bool concerned = relid == InvalidOid || relid == layout.keys ||
                     (OidIsValid(watched_dist_object) && relid == watched_dist_object);
    for (Oid watched : layout.catalogs)
        concerned = concerned || (OidIsValid(watched) && relid == watched);
    if (concerned)
        invalidations++;
}

static Oid catalog(const char *name)
{
    return get_relname_relid(name, PG_CATALOG_NAMESPACE);
}

// Citus's catalogs are its private layout.  A version that renamed or retyped
// a column this file reads must fail here, clearly, rather than be misread.
[[noreturn]] static void unexpected_catalog(Relation rel, const char *name, Oid type)
{
    ereport(ERROR,
            (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
             errmsg("Citus catalog %s has no column %s of type %s", RelationGetRelationName(rel),
                    name, format_type_be(type)),
             errdetail("The extension reads Citus's catalogs as the tested Citus versions lay them "
                       "out (see doc/citus.md)."),
             errhint("Use a tested Citus version.")));
}

// The number of `rel`'s column `name`, checked to be of type `type`.
static AttrNumber typed_attnum(Relation rel, const char *name, Oid type)
{
    AttrNumber attnum = get_attnum(RelationGetRelid(rel), name);
    if (attnum == InvalidAttrNumber ||
        TupleDescAttr(RelationGetDescr(rel), attnum - 1)->atttypid != type)
        unexpected_catalog(rel, name, type);
    return attnum;
}

// Scans `relid` (a small Citus catalog, no syscache) for rows whose column
// `column` (of type `column_type`) equals `value`, calling `row` on each:
// through the index `index` when the catalog has it, since every backend
// reads the catalogs again after each invalidation.  A NULL snapshot takes a
// fresh catalog snapshot for each scan of a catalog without a syscache, so
// what committed before the scan is seen whatever the isolation level.
template <typename Row>
static void scan_catalog(Oid relid, const char *index, const char *column, Oid column_type,
                         Oid equal_proc, Datum value, Row row)
{
    Relation rel = table_open(relid, AccessShareLock);
    ScanKeyData key;
    int keys = 0;
    if (column != nullptr)
    {
        ScanKeyInit(&key, typed_attnum(rel, column, column_type), BTEqualStrategyNumber, equal_proc,
                    value);
        keys = 1;
    }
    Oid index_oid = index != nullptr ? get_relname_relid(index, PG_CATALOG_NAMESPACE) : InvalidOid;
    SysScanDesc scan =
        systable_beginscan(rel, index_oid, OidIsValid(index_oid), nullptr, keys, &key);
    HeapTuple tuple;
    while (HeapTupleIsValid(tuple = systable_getnext(scan)))
        row(rel, tuple);
    systable_endscan(scan);
    table_close(rel, AccessShareLock);
}

static Datum column(Relation rel, HeapTuple tuple, const char *name, Oid type, bool *isnull)
{
    return heap_getattr(tuple, typed_attnum(rel, name, type), RelationGetDescr(rel), isnull);
}

[[noreturn]] static void unsupported_layout(const char *detail)
{
    ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                    errmsg("idempotency.keys is distributed in a way this extension does not "
                           "support"),
                    errdetail("%s", detail),
                    errhint("Undistribute it and run idempotency_distribute().")));
}

// Citus's SQL-level function pg_catalog.`name`(`types`), which the extension
// calls directly (fmgr): its stable interface, exported on every
// PostgreSQL version, unlike the C routines behind it.  Looked up at each
// use, so that an update of Citus that recreates it is followed.  0A000 when
// Citus has no such function, or with missing_ok InvalidOid.
static Oid citus_function(const char *name, int nargs, const Oid *types, bool missing_ok = false)
{
    Oid function =
        LookupFuncName(list_make2(makeString(pstrdup("pg_catalog")), makeString(pstrdup(name))),
                       nargs, types, true);
    if (!OidIsValid(function) && !missing_ok)
        ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                        errmsg("Citus has no function pg_catalog.%s with the arguments the "
                               "extension passes",
                               name),
                        errhint("Use a tested Citus version (see doc/citus.md).")));
    return function;
}

static Oid relation_owner(Oid relid)
{
    HeapTuple relation = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
    if (!HeapTupleIsValid(relation))
        elog(ERROR, "cache lookup failed for relation %u", relid);
    Oid owner = reinterpret_cast<Form_pg_class>(GETSTRUCT(relation))->relowner;
    ReleaseSysCache(relation);
    return owner;
}

// Reads the partition row of `keys`: whether it is distributed, and how.
static void read_partition(Layout &next, Oid pg_dist_partition)
{
    bool seen = false;
    char method = 0;
    char *partkey = nullptr;
    scan_catalog(
        pg_dist_partition, "pg_dist_partition_logical_relid_index", "logicalrelid", REGCLASSOID,
        F_OIDEQ, ObjectIdGetDatum(next.keys), [&](Relation rel, HeapTuple tuple) {
            bool isnull;
            seen = true;
            method = DatumGetChar(column(rel, tuple, "partmethod", CHAROID, &isnull));
            Datum key = column(rel, tuple, "partkey", TEXTOID, &isnull);
            partkey = isnull ? nullptr : TextDatumGetCString(key);
            next.colocation = DatumGetUInt32(column(rel, tuple, "colocationid", INT4OID, &isnull));
        });
    if (!seen)
        return; // a plain table, or a Citus-unaware node
    if (method != 'h' || partkey == nullptr || next.colocation == 0)
        unsupported_layout("It is not hash-distributed by scope (a reference, single-shard or "
                           "Citus local table).");
    // By scope (text), or by shard_key (made the type of a tenant column of
    // another type by idempotency_distribute()).
    const Var *var = static_cast<const Var *>(stringToNode(partkey));
    bool by_scope =
        IsA(var, Var) && var->varattno == store::col_scope + 1 && var->vartype == TEXTOID;
    next.by_shard_key =
        IsA(var, Var) && var->varattno == store::col_shard_key + 1 &&
        (var->vartype == INT8OID || var->vartype == INT4OID || var->vartype == UUIDOID);
    if (!by_scope && !next.by_shard_key)
        unsupported_layout("Its distribution column is neither the text column scope nor "
                           "shard_key of type bigint, integer or uuid.");
    // Citus's own SQL-level get_shard_id_for_distribution_column(regclass,
    // "any"), called directly: it learns the type of its second argument
    // from the call's expression, here one of the column's type.
    Oid argument_types[] = {REGCLASSOID, ANYOID};
    Oid shard_id = citus_function("get_shard_id_for_distribution_column", 2, argument_types);
    fmgr_info_cxt(shard_id, &next.shard_id, layout_context);
    next.shard_id.fn_expr = reinterpret_cast<Node *>(
        makeFuncExpr(shard_id, INT8OID,
                     list_make2(makeNullConst(REGCLASSOID, -1, InvalidOid),
                                makeNullConst(var->vartype, -1, var->varcollid)),
                     InvalidOid, InvalidOid, COERCE_EXPLICIT_CALL));
    next.owner = relation_owner(next.keys);
    if (next.by_shard_key)
    {
        Oid input;
        getTypeInputInfo(var->vartype, &input, &next.input_param);
        fmgr_info_cxt(input, &next.input, layout_context);
        Oid output;
        bool varlena;
        getTypeOutputInfo(var->vartype, &output, &varlena);
        fmgr_info_cxt(output, &next.output, layout_context);
    }
    next.key_type = var->vartype;
    next.distributed = true;
}

// The Citus releases (major.minor) whose private layout this file relies on
// -- the columns of its catalogs, the tag of the shard metadata lock tried
// without waiting, the signatures of the routines and flags its library
// exports (up to PostgreSQL 15), its rule that an update of a replicated
// reference table commits in two phases -- on the PostgreSQL major version
// each was tested on by test/t/060_citus.pl and t/061.  A Citus release on
// another PostgreSQL major is another build, with other code paths (and
// from 16 on other exports): untested too.  A change there could go
// unnoticed here, so anything that relies on that layout is refused on any
// other pair rather than run unprotected.
static const struct
{
    int postgres;
    const char *citus;
} tested_citus_releases[] = {{15, "13.0"}, {15, "13.1"}, {15, "13.2"}, {17, "13.2"}, {18, "14.0"}};

// Whether Citus `version` ("13.2-1" from its catalog, "13.2.2" from its
// library: the release first) was tested on this PostgreSQL major.
static bool tested_citus(const char *version)
{
    size_t release = strspn(version, "0123456789");
    if (version[release] == '.')
        release += 1 + strspn(version + release + 1, "0123456789");
    for (const auto &tested : tested_citus_releases)
        if (tested.postgres == PG_VERSION_NUM / 10000 && strlen(tested.citus) == release &&
            strncmp(tested.citus, version, release) == 0)
            return true;
    return false;
}

// The guard in front of Citus's private layout: the loaded library's
// release (whose routines, flags and lock tags are used) and the installed
// extension's (whose catalogs are read) must both be a tested pair with
// this PostgreSQL major.  Every lookup of a routine in Citus's library
// (exported) and every read of the layout goes through it first.
static void require_tested_citus()
{
    const char *library = GetConfigOption("citus.version", true, false);
    Oid citus = get_extension_oid("citus", true);
    char *version = nullptr;
    if (OidIsValid(citus))
        scan_catalog(ExtensionRelationId, "pg_extension_oid_index", "oid", OIDOID, F_OIDEQ,
                     ObjectIdGetDatum(citus), [&](Relation rel, HeapTuple tuple) {
                         bool isnull;
                         Datum extversion = column(rel, tuple, "extversion", TEXTOID, &isnull);
                         version = isnull ? nullptr : TextDatumGetCString(extversion);
                     });
    const char *untested = nullptr;
    if (library == nullptr)
        untested = "(not loaded)";
    else if (!tested_citus(library))
        untested = library;
    else if (version == nullptr || !tested_citus(version))
        untested = version != nullptr ? version : "(unknown)";
    if (untested == nullptr)
        return;
    StringInfoData tested;
    initStringInfo(&tested);
    for (const auto &release : tested_citus_releases)
        appendStringInfo(&tested, "%s%s on %d", tested.len > 0 ? ", " : "", release.citus,
                         release.postgres);
    ereport(ERROR,
            (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
             errmsg("Citus %s on PostgreSQL %d is not a combination this extension is tested with",
                    untested, PG_VERSION_NUM / 10000),
             errdetail("The extension reads Citus's catalogs, takes its shard locks and calls its "
                       "library as the tested releases lay them out (Citus %s); on another "
                       "release a change there could let a shard move have a key claimed twice, "
                       "or a commit lose a claim.",
                       tested.data),
             errhint("Use a tested Citus release (see doc/citus.md), or an idempotency release "
                     "tested with this one.")));
}

static int compare_shards(const void *a, const void *b)
{
    int32 x = static_cast<const Shard *>(a)->min, y = static_cast<const Shard *>(b)->min;
    return x < y ? -1 : x > y;
}

// This node's group: 0 on the coordinator, -1 when the catalog has no row.
static int32 local_group(Oid pg_dist_local_group)
{
    int32 group = -1;
    scan_catalog(pg_dist_local_group, nullptr, nullptr, InvalidOid, InvalidOid, (Datum)0,
                 [&](Relation rel, HeapTuple tuple) {
                     bool isnull;
                     group = DatumGetInt32(column(rel, tuple, "groupid", INT4OID, &isnull));
                 });
    return group;
}

static void read_shards(Layout &next, Oid pg_dist_shard, Oid pg_dist_placement)
{
    int capacity = 32;
    next.shards = static_cast<Shard *>(palloc(capacity * sizeof(Shard)));
    scan_catalog(pg_dist_shard, "pg_dist_shard_logical_relid_index", "logicalrelid", REGCLASSOID,
                 F_OIDEQ, ObjectIdGetDatum(next.keys), [&](Relation rel, HeapTuple tuple) {
                     bool min_null, isnull;
                     Datum min = column(rel, tuple, "shardminvalue", TEXTOID, &min_null);
                     if (min_null)
                         unsupported_layout("A shard of it has no hash range.");
                     if (next.shard_count == capacity)
                         next.shards = static_cast<Shard *>(
                             repalloc(next.shards, (capacity *= 2) * sizeof(Shard)));
                     next.shards[next.shard_count++] =
                         Shard{DatumGetInt64(column(rel, tuple, "shardid", INT8OID, &isnull)),
                               pg_strtoint32(TextDatumGetCString(min)), false};
                 });
    qsort(next.shards, next.shard_count, sizeof(Shard), compare_shards);

    // This node's placements.
    scan_catalog(pg_dist_placement, "pg_dist_placement_groupid_index", "groupid", INT4OID, F_INT4EQ,
                 Int32GetDatum(next.group), [&](Relation rel, HeapTuple tuple) {
                     bool isnull;
                     int64 shard = DatumGetInt64(column(rel, tuple, "shardid", INT8OID, &isnull));
                     int position = shard_position(next, shard);
                     if (position >= 0)
                         next.shards[position].local = true;
                 });
}

// The layout of `keys`, read again when an invalidation may have changed it.
// Registers invalidate_layout, once per backend.
static void watch_invalidations()
{
    static bool callback_registered = false;
    if (!callback_registered)
    {
        CacheRegisterRelcacheCallback(invalidate_layout, (Datum)0);
        callback_registered = true;
    }
}

static const Layout &layout_of(Oid keys)
{
    watch_invalidations();
    while (layout.keys != keys || layout.generation != invalidations)
    {
        uint64 generation = invalidations;
        MemoryContext context =
            AllocSetContextCreate(CacheMemoryContext, "idempotency citus", ALLOCSET_SMALL_SIZES);
        MemoryContext previous = layout_context;
        layout_context = context;
        Layout next = {};
        next.keys = keys;
        next.generation = generation;
        next.group = -1;
        Oid partition = catalog("pg_dist_partition"), shard = catalog("pg_dist_shard"),
            placement = catalog("pg_dist_placement"), local_groups = catalog("pg_dist_local_group");
        next.catalogs[0] = partition;
        next.catalogs[1] = shard;
        next.catalogs[2] = placement;
        next.catalogs[3] = local_groups;
        // Watch the catalogs from now on, so that a change during the reads
        // makes this loop read again.
        layout = next;
        layout.generation = 0;
        MemoryContext old = MemoryContextSwitchTo(context);
        PG_TRY();
        {
            if (OidIsValid(partition) && OidIsValid(shard) && OidIsValid(placement) &&
                OidIsValid(local_groups))
            {
                next.group = local_group(local_groups);
                read_partition(next, partition);
                if (next.distributed)
                {
                    require_tested_citus();
                    read_shards(next, shard, placement);
                }
            }
        }
        PG_CATCH();
        {
            MemoryContextSwitchTo(old);
            layout = Layout{};
            layout_context = previous;
            MemoryContextDelete(context);
            PG_RE_THROW();
        }
        PG_END_TRY();
        MemoryContextSwitchTo(old);
        layout = next;
        if (previous != nullptr)
            MemoryContextDelete(previous);
    }
    return layout;
}

// ---------------------------------------------------------------------------
// Scope -> shard
// ---------------------------------------------------------------------------

// Where a scope's keys are, copied out of the layout.
struct Placement
{
    bool distributed;
    int64 shard;
    int index; // in the shard list sorted by range: the metadata lock's tag
    uint32 colocation;
    bool local; // the shard is placed here; not distributed: this node may keep the keys

    bool same_shard(const Placement &other) const
    {
        return distributed == other.distributed && shard == other.shard && index == other.index &&
               colocation == other.colocation;
    }
};

static Placement placement_at(const Layout &layout, int index)
{
    const Shard &shard = layout.shards[index];
    return Placement{true, shard.id, index, layout.colocation, shard.local};
}

// Names the tenant column's type in the errors of reading a scope as it.
static void scope_value_context(void *type)
{
    errcontext("reading the scope as a value of the distributed keys' tenant type, %s",
               format_type_be(*static_cast<Oid *>(type)));
}

// The scope (text) as a value of `type`, read by the type's input function:
// the scope of a call with a bigint or uuid scope is that value's text, which
// reads back as the value Citus delegated the call by; a text scope such as
// '042' (from a distributed handler) names the shard of the bigint 42.
static Datum scope_value(FmgrInfo *input, Oid input_param, Oid type, Datum scope)
{
    ErrorContextCallback context = {error_context_stack, scope_value_context, &type};
    error_context_stack = &context;
    Datum value = InputFunctionCall(input, text_to_cstring(DatumGetTextPP(scope)), input_param, -1);
    error_context_stack = context.previous;
    return value;
}

Datum tenant_scope(Oid keys, Datum scope)
{
    const Layout &current = layout_of(keys);
    if (!current.by_shard_key)
        return scope;
    // (Neither function reads a catalog: `current` stays valid.)
    Datum value = scope_value(const_cast<FmgrInfo *>(&current.input), current.input_param,
                              current.key_type, scope);
    return CStringGetTextDatum(OutputFunctionCall(const_cast<FmgrInfo *>(&current.output), value));
}

Datum scope_as(Oid type, Datum scope)
{
    Oid input, input_param;
    getTypeInputInfo(type, &input, &input_param);
    FmgrInfo input_function;
    fmgr_info(input, &input_function);
    return scope_value(&input_function, input_param, type, scope);
}

// Runs `call` with the keys' owner `owner` as the current user, for Citus's
// SQL-level functions that check the caller's rights on the keys (the
// caller of the API need not have any).  The user is restored by the abort
// of an error, as for any security-restricted operation.
template <typename Call> static Datum as_owner(Oid owner, Call call)
{
    Oid user;
    int security;
    GetUserIdAndSecContext(&user, &security);
    SetUserIdAndSecContext(owner,
                           security | SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION);
    Datum result = call();
    SetUserIdAndSecContext(user, security);
    return result;
}

// The shard Citus places the distribution column's value `value` in, by
// its get_shard_id_for_distribution_column() (as the keys' owner: it checks
// SELECT on the table).
static int64 citus_shard_id(const Layout &current, Datum value)
{
    LOCAL_FCINFO(call, 2);
    InitFunctionCallInfoData(*call, const_cast<FmgrInfo *>(&current.shard_id), 2, InvalidOid,
                             nullptr, nullptr);
    call->args[0].value = ObjectIdGetDatum(current.keys);
    call->args[0].isnull = false;
    call->args[1].value = value;
    call->args[1].isnull = false;
    Datum shard = as_owner(current.owner, [&] { return FunctionCallInvoke(call); });
    if (call->isnull)
        elog(ERROR, "get_shard_id_for_distribution_column() gave NULL");
    return DatumGetInt64(shard);
}

// The last scope placed (if short: tenants' values are), and its shard: a
// call places its scope two or three times (before and after its lock), and
// a request's calls name the same scope.  Valid for the layout of `keys`
// and `generation` only: a change of Citus's metadata comes with an
// invalidation of that layout.
static struct
{
    Oid keys;
    uint64 generation;
    int length;
    char scope[64];
    int64 shard;
} last_placed = {};

// Where the keys of `scope` are: the shard Citus gives the scope's value
// (read as the tenant column's type), in the layout.
static Placement place(Oid keys, Datum scope)
{
    text *scope_text = DatumGetTextPP(scope);
    int length = VARSIZE_ANY_EXHDR(scope_text);
    for (;;)
    {
        const Layout &current = layout_of(keys);
        if (!current.distributed)
            return Placement{false, 0, -1, 0, current.group <= 0};
        int64 shard;
        if (last_placed.keys == keys && last_placed.generation == current.generation &&
            last_placed.length == length &&
            memcmp(last_placed.scope, VARDATA_ANY(scope_text), length) == 0)
            shard = last_placed.shard;
        else
        {
            // (Reading a bigint, integer or uuid reads no catalog: the
            // layout stays current.)
            Datum value = current.by_shard_key
                              ? scope_value(const_cast<FmgrInfo *>(&current.input),
                                            current.input_param, current.key_type, scope)
                              : scope;
            uint64 generation = current.generation;
            shard = citus_shard_id(current, value);
            if (generation != invalidations)
                continue; // Citus read changed metadata: so does the layout
            if (size_t(length) <= sizeof last_placed.scope)
            {
                last_placed.keys = keys;
                last_placed.generation = generation;
                last_placed.length = length;
                memcpy(last_placed.scope, VARDATA_ANY(scope_text), length);
                last_placed.shard = shard;
            }
        }
        int position = shard_position(current, shard);
        if (position >= 0)
            return placement_at(current, position);
        unsupported_layout("Citus places the scope in a shard that its catalogs do not list.");
    }
}

// A routine the loaded Citus library exports, by its name: NULL when this
// Citus does not export it.  Kept for the backend's life by the callers: a
// loaded library is never unloaded, so the address stays valid.
static void *exported(const char *name)
{
    require_tested_citus(); // the routines' signatures are Citus's private layout
    return load_external_function("$libdir/citus", name, false, nullptr);
}

// The tag of the shard's metadata lock in the tested Citus releases (an
// advisory tag: the shard's index in the sorted shard list, the co-location
// id, class 8); see lock_metadata.
static void metadata_locktag(LOCKTAG *tag, const Placement &placement)
{
    SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, uint32(placement.index), placement.colocation,
                         colocated_shards_metadata_lock);
}

// The shard's metadata lock in ShareLock, as Citus's own router writes take
// it before they pick a placement: the lock a move or split takes in
// ExclusiveLock before it switches the shard over.  Held to the end of the
// transaction.  Taken by its tag in the tested releases first -- waiting,
// or without `wait` only if it is free at once (Citus offers no such try)
// -- then, if the shard still exists after the invalidations of a switch
// the wait let through, through Citus's SQL-level lock_shard_metadata(),
// which holds Citus's lock whatever its tag in a release (at once when the
// tags agree).  It checks that the current user owns the table: it runs as
// the keys' owner.  A shard that a split removed meanwhile is left to the
// caller, which places the scope again (Citus's function would fail on
// it).
static bool lock_metadata(Oid keys, const Placement &placement, bool wait)
{
    LOCKTAG tag;
    metadata_locktag(&tag, placement);
    if (LockAcquire(&tag, ShareLock, false, !wait) == LOCKACQUIRE_NOT_AVAIL)
        return false;
    AcceptInvalidationMessages();
    const Layout &current = layout_of(keys);
    if (shard_position(current, placement.shard) < 0)
        return true;
    Oid types[] = {INT4OID, INT8ARRAYOID};
    Oid lock_shard_metadata = citus_function("lock_shard_metadata", 2, types);
    Datum shard = Int64GetDatum(placement.shard);
    Datum shards =
        PointerGetDatum(construct_array(&shard, 1, INT8OID, sizeof(int64), true, TYPALIGN_DOUBLE));
    as_owner(current.owner, [&] {
        return OidFunctionCall2(lock_shard_metadata, Int32GetDatum(ShareLock), shards);
    });
    return true;
}

// Finds and locks the shard relation, named by Citus's SQL-level
// shard_name() (quoted as needed, and schema-qualified: it leaves out only
// the schema public, never the keys'), through PostgreSQL's
// own lookup, which checks the name again after the lock.  InvalidOid when
// skip_if_busy and it is busy.  Citus 13.1 added shard_name's third
// argument (whether to leave out public) and dropped the two-argument form.
// (The keys are always idempotency.keys: store.cpp.)
static Oid lock_shard_relation(Oid keys, int64 shard, LOCKMODE lockmode, bool skip_if_busy)
{
    Oid types[] = {REGCLASSOID, INT8OID, BOOLOID};
    Oid shard_name = citus_function("shard_name", 3, types, true);
    Datum name = OidIsValid(shard_name)
                     ? OidFunctionCall3(shard_name, ObjectIdGetDatum(keys), Int64GetDatum(shard),
                                        BoolGetDatum(false))
                     : OidFunctionCall2(citus_function("shard_name", 2, types),
                                        ObjectIdGetDatum(keys), Int64GetDatum(shard));
    RangeVar *relation =
        makeRangeVarFromNameList(compat::qualified_name_list(TextDatumGetCString(name)));
    Oid relid = RangeVarGetRelidExtended(relation, lockmode,
                                         RVR_MISSING_OK | (skip_if_busy ? RVR_SKIP_LOCKED : 0),
                                         nullptr, nullptr);
    if (!OidIsValid(relid) && !OidIsValid(RangeVarGetRelid(relation, NoLock, true)))
        ereport(ERROR,
                (errcode(ERRCODE_UNDEFINED_TABLE),
                 errmsg("shard %s of idempotency.keys does not exist", TextDatumGetCString(name)),
                 errdetail("Citus's metadata places shard " INT64_FORMAT " on this node.", shard)));
    return relid;
}

// Takes the metadata lock of the scope's shard and returns where the scope is
// after it: if a move or split changed the shard meanwhile, the lock of the
// new one is taken too (the old one is harmless), until they agree.
static Placement lock_placement(Oid keys, Datum scope)
{
    Placement placement = place(keys, scope);
    while (placement.distributed)
    {
        lock_metadata(keys, placement, true);
        AcceptInvalidationMessages();
        Placement now = place(keys, scope);
        if (now.same_shard(placement))
            return now;
        placement = now;
    }
    return placement;
}

// Whether Citus coordinates this database's transactions: only in a
// database that has its extension (read at each call, an index probe of
// pg_extension, so that a CREATE EXTENSION citus is seen at once).
static bool citus_in_database()
{
    return loaded() && OidIsValid(get_extension_oid("citus", true));
}

// Asks Citus to commit the coordinated transaction -- if any: a transaction
// that writes on workers -- with two-phase commit.  Otherwise Citus commits
// the workers' part with a one-phase COMMIT before the local commit, and a
// crash in between keeps a business write whose claim is lost.  Citus's flag
// is read at pre-commit and reset at the end of the transaction, so setting
// it at any write of the transaction suffices.  By Citus's C routine, looked
// up in the loaded library by name (kept for the backend's life: a loaded
// library is never unloaded).  Returns false where Citus does not export it
// -- from PostgreSQL 16 on, extension libraries export only their SQL
// functions; two_phase_by_reference_table is the SQL-level way.
static bool request_two_phase()
{
    if (!citus_in_database())
        return true; // no coordinated transactions
    static bool looked_up = false;
    static void (*use_2pc)() = nullptr;
    if (!looked_up)
    {
        use_2pc = reinterpret_cast<void (*)()>(exported("Use2PCForCoordinatedTransaction"));
        looked_up = true;
    }
    if (use_2pc == nullptr)
        return false;
    use_2pc();
    return true;
}

// Whether Citus keeps `table` as a reference table placed on more than one
// node: an update of it then has several placements, and Citus commits
// such a transaction in two phases.
static bool replicated_reference_table(Oid table)
{
    Oid partitions = catalog("pg_dist_partition"), shards = catalog("pg_dist_shard"),
        placements = catalog("pg_dist_placement");
    if (!OidIsValid(partitions) || !OidIsValid(shards) || !OidIsValid(placements))
        return false;
    char method = 0, model = 0;
    scan_catalog(partitions, "pg_dist_partition_logical_relid_index", "logicalrelid", REGCLASSOID,
                 F_OIDEQ, ObjectIdGetDatum(table), [&](Relation rel, HeapTuple tuple) {
                     bool isnull;
                     method = DatumGetChar(column(rel, tuple, "partmethod", CHAROID, &isnull));
                     model = DatumGetChar(column(rel, tuple, "repmodel", CHAROID, &isnull));
                 });
    if (method != 'n' || model != 't')
        return false;
    int shard_count = 0;
    int64 shard = 0;
    scan_catalog(shards, "pg_dist_shard_logical_relid_index", "logicalrelid", REGCLASSOID, F_OIDEQ,
                 ObjectIdGetDatum(table), [&](Relation rel, HeapTuple tuple) {
                     bool isnull;
                     shard = DatumGetInt64(column(rel, tuple, "shardid", INT8OID, &isnull));
                     shard_count++;
                 });
    int placement_count = 0;
    if (shard_count == 1)
        scan_catalog(placements, "pg_dist_placement_shardid_index", "shardid", INT8OID, F_INT8EQ,
                     Int64GetDatum(shard), [&](Relation, HeapTuple) { placement_count++; });
    return placement_count > 1;
}

// The transaction whose commit two_phase_by_reference_table made two-phase.
// Trusted only together with the update's lock on the table, still held:
// a local transaction id names one transaction of this backend, the lock
// shows that the (sub)transaction that ran the update was not rolled back,
// and Citus keeps its choice to the end of the transaction.  An error or a
// cancel rolls back with the lock.
static LocalTransactionId two_phase_updated = InvalidLocalTransactionId;

// The SQL-level request for two-phase commit, for where Citus does not
// export its routine: when the DBA made idempotency.two_phase a reference
// table (create_reference_table), an UPDATE of it -- of no row: it is
// always empty -- which Citus commits in two phases with the rest of the
// transaction.  Once per transaction, while the update's RowExclusiveLock
// on the table is held: a rollback to a savepoint releases it, and the next
// write updates the table again (Citus keeps its choice to the end of the
// transaction anyway).  Returns false when idempotency.two_phase is not
// such a table.
static bool two_phase_by_reference_table(Oid keys)
{
    Oid table = get_relname_relid("two_phase", get_rel_namespace(keys));
    if (!OidIsValid(table))
        return false;
    if (two_phase_updated == compat::current_lxid() &&
        compat::relation_lock_held(table, RowExclusiveLock))
        return true;
    if (!replicated_reference_table(table))
        return false;
    // (That such an update commits in two phases is Citus's own rule, not
    // its interface.)
    require_tested_citus();
    char *update = psprintf(
        "UPDATE %s SET marked = marked",
        quote_qualified_identifier(get_namespace_name(get_rel_namespace(table)), "two_phase"));
    // (At pre-commit no statement's snapshot is active any more; PostgreSQL
    // fires deferred triggers there the same way.)
    bool push_snapshot = !ActiveSnapshotSet();
    if (push_snapshot)
        PushActiveSnapshot(GetTransactionSnapshot());
    // Citus serialises the writes of a reference table by a lock on its
    // shard held to the commit -- every request's would queue behind one
    // another's two-phase commit -- unless they are declared commutative,
    // which an update of no row is.  Set for this update only, as a
    // function's SET clause is (an error unwinds it with the transaction).
    int guc_level = NewGUCNestLevel();
    if (GetConfigOption("citus.all_modifications_commutative", true, false) != nullptr)
        (void)set_config_option("citus.all_modifications_commutative", "on", PGC_USERSET,
                                PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
    as_owner(relation_owner(table), [&] {
        SPI_connect();
        int result = SPI_execute(update, false, 0);
        if (result != SPI_OK_UPDATE)
            elog(ERROR, "the update of idempotency.two_phase failed (SPI %d)", result);
        SPI_finish();
        return (Datum)0;
    });
    AtEOXact_GUC(true, guc_level);
    if (push_snapshot)
        PopActiveSnapshot();
    two_phase_updated = compat::current_lxid();
    return true;
}

// Two-phase commit for a write of keys kept on this node (by Citus's
// routine, else by idempotency.two_phase where the DBA made it a reference
// table: the routine costs nothing, the update a statement on every node
// and their part in the commit), or of a call forwarded to another (by the
// routine, which Citus exports wherever it exports what forwarding needs):
// refused (55000) before it writes where Citus cannot be asked.
static void force_two_phase(Oid keys)
{
    if (request_two_phase() || (!distributes(keys) && two_phase_by_reference_table(keys)))
        return;
    ereport(ERROR,
            (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
             errmsg("idempotency.two_phase is not a Citus reference table on several nodes"),
             errdetail("With keys on this node, a write asks Citus to commit the transaction's "
                       "distributed writes in two phases, with the claim: by an update of "
                       "idempotency.two_phase as a reference table, or by Citus's routine "
                       "Use2PCForCoordinatedTransaction, "
                       "which the loaded Citus library does not export%s.",
                       PG_VERSION_NUM >= 160000
                           ? " (from PostgreSQL 16 on, extension libraries are built with "
                             "hidden symbols)"
                           : ""),
             errhint("Run SELECT create_reference_table('idempotency.two_phase') on the "
                     "coordinator, or distribute the keys with idempotency_distribute().")));
}

// `why`: why the call cannot be forwarded to the shard's node, if it could
// have been but for that.
[[noreturn]] static void not_routed(int64 shard, const char *why = nullptr)
{
    ereport(ERROR,
            (errcode(errcode_not_routed),
             errmsg("the idempotency keys of this scope are not stored on this node"),
             errdetail("idempotency.keys is distributed by Citus, and its shard " INT64_FORMAT
                       " for the scope is placed on another node: the call was not routed "
                       "to it, or the shard has just moved.%s%s",
                       shard, why != nullptr ? " " : "", why != nullptr ? why : ""),
             errhint("Call the functions in a shape Citus delegates by scope, e.g. SELECT * "
                     "FROM idempotency_begin(...), or from a function distributed by the "
                     "tenant column with the scope of its tenant; then retry."),
             errhidestmt(true)));
}

// A Citus worker whose idempotency.keys is a plain table: a call here was
// delegated (the API, or a handler distributed by the tenant column) while
// the keys were never distributed, or while this node does not know they
// are.  Reading or writing this node's own table would keep a second,
// separate copy of the keys: a key completed elsewhere would be claimed
// again here.
[[noreturn]] static void refuse_local_keys_on_worker()
{
    ereport(ERROR,
            (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
             errmsg("idempotency.keys is not distributed, and this node is a Citus worker"),
             errdetail("The keys are kept on the coordinator or in the shards of a distributed "
                       "table; this worker's own idempotency.keys would hold a second copy of "
                       "them."),
             errhint("Call the functions on the coordinator, or distribute the keys with "
                     "SELECT idempotency_distribute(...) on the coordinator."),
             errhidestmt(true)));
}

// Where a reader finds the scope's keys, with the shard relation locked in
// AccessShareLock: the placement the catalogs give once that lock is held.
// No metadata lock, so a read never queues behind a move waiting for it in
// ExclusiveLock.  Safe because a reader changes nothing a move copies; until
// the switch, the source shard is the scope's only copy that takes writes,
// and the switch cannot drop it while this lock is held.  Locking processed
// the invalidations of a switch committed before it, and one committed
// after it happened during the read: either way the read shows the scope as
// it was at a moment of the call.  A placement moved away gives IK005 (or,
// with elsewhere_ok, InvalidOid: the call is forwarded to the new node).
static Oid read_placement(Oid keys, Datum scope, const Placement &placement, bool elsewhere_ok)
{
    Oid relid = lock_shard_relation(keys, placement.shard, AccessShareLock, false);
    AcceptInvalidationMessages();
    Placement now = place(keys, scope);
    if (!now.same_shard(placement) || !now.local)
    {
        if (elsewhere_ok)
            return InvalidOid;
        not_routed(now.shard);
    }
    return relid;
}

Oid relation_for_scope(Oid keys, Datum scope, LOCKMODE lockmode, bool elsewhere_ok)
{
    bool reader = lockmode == AccessShareLock;
    Placement placement = reader ? place(keys, scope) : lock_placement(keys, scope);
    if (!placement.distributed)
    {
        // (local: this node may keep the keys, the coordinator or no Citus)
        if (!placement.local)
            refuse_local_keys_on_worker();
        if (lockmode != AccessShareLock)
            force_two_phase(keys);
        return keys;
    }
    // Role OIDs differ from node to node, and a shard move copies them as
    // they are: a key of one role would belong to another after a move.
    if (settings::tenant_isolation != settings::tenant_isolation_off)
        ereport(ERROR,
                (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                 errmsg("idempotency.tenant_isolation = role is not supported with distributed "
                        "keys"),
                 errdetail("Role OIDs differ between Citus nodes and shard moves copy them."),
                 errhint("Use one scope per tenant (the tenant column) instead.")));
    if (!placement.local)
    {
        if (elsewhere_ok)
            return InvalidOid;
        not_routed(placement.shard);
    }
    if (reader)
        return read_placement(keys, scope, placement, elsewhere_ok);
    return lock_shard_relation(keys, placement.shard, lockmode, false);
}

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
    bool colocated = false;
    Oid pg_dist_partition = catalog("pg_dist_partition");
    if (OidIsValid(route) && OidIsValid(pg_dist_partition))
        scan_catalog(pg_dist_partition, "pg_dist_partition_logical_relid_index", "logicalrelid",
                     REGCLASSOID, F_OIDEQ, ObjectIdGetDatum(route),
                     [&](Relation rel, HeapTuple tuple) {
                         bool isnull;
                         Datum colocation = column(rel, tuple, "colocationid", INT4OID, &isnull);
                         colocated = !isnull && DatumGetUInt32(colocation) == placement.colocation;
                     });
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

// Whether the keys hold a completed, unexpired record of (scope, key), which
// a begin only reads (replay or mismatch).  Asked through Citus -- a router
// query to the scope's placement, which takes no shard metadata lock -- as
// the table's owner, since the caller need not be allowed to read it.
static bool completed_record(Oid keys, Datum scope, Datum key)
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
    bool found = DatumGetBool(as_owner(current.owner, [&] {
        SPI_connect();
        bool seen = SPI_execute_with_args(query.data, 2, types, values, nullptr, true, 1) ==
                        SPI_OK_SELECT &&
                    SPI_processed > 0;
        SPI_finish();
        return BoolGetDatum(seen);
    }));
    pfree(query.data);
    return found;
}

// Whether a begin of (scope, key), whose shard is `placement`, may run on
// the shard's node without that shard's metadata lock: only when a move
// holds or awaits the lock and the key is completed (a replay or a mismatch
// only reads, and must not wait for a move).  Otherwise false, with the lock
// held if it was free at once.
static bool replays_without_lock(Oid keys, const Placement &placement, Datum scope, Datum key)
{
    return !lock_metadata(keys, placement, false) && completed_record(keys, scope, key);
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
    *answer = call_on_shard_node(fcinfo, routed);
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

uint64 forward_read(FunctionCallInfo fcinfo, Datum scope, Datum **rows)
{
    // A read takes no lock here, as on the shard's node (read_placement).
    Oid keys = store::keys_table();
    Placement placement = place(keys, scope);
    if (placement.local)
        not_routed(placement.shard); // moved here since the read looked: retry
    RoutedCall routed = routed_call(fcinfo, keys, scope, placement, false);
    bool *nulls;
    uint64 count = run_routed(routed, route_call, rows, &nulls);
    for (uint64 i = 0; i < count; i++)
        if (nulls[i])
            elog(ERROR, "a forwarded read gave a NULL row");
    return count;
}

bool loaded()
{
    // Citus is preloaded or absent for the server's life: asked once.
    static const bool citus_loaded = GetConfigOption("citus.version", true, false) != nullptr;
    return citus_loaded;
}

bool distributes(Oid keys)
{
    return layout_of(keys).distributed;
}

List *local_shards(Oid keys, LOCKMODE lockmode, bool skip_if_busy)
{
    const Layout &current = layout_of(keys);
    if (!current.distributed)
        return NIL;
    // Copied out first: taking locks processes invalidations.
    int count = current.shard_count;
    Placement *candidates = static_cast<Placement *>(palloc(count * sizeof(Placement)));
    for (int i = 0; i < count; i++)
        candidates[i] = placement_at(current, i);
    List *relations = NIL;
    for (int i = 0; i < count; i++)
    {
        if (!candidates[i].local || !lock_metadata(keys, candidates[i], !skip_if_busy))
            continue;
        AcceptInvalidationMessages();
        // Still this node's, with the same index, after the lock?
        const Layout &now = layout_of(keys);
        int position = shard_position(now, candidates[i].shard);
        if (position < 0 || !now.shards[position].local ||
            !placement_at(now, position).same_shard(candidates[i]))
            continue;
        Oid relid = lock_shard_relation(keys, candidates[i].shard, lockmode, skip_if_busy);
        if (OidIsValid(relid))
            relations = lappend_oid(relations, relid);
    }
    pfree(candidates);
    return relations;
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

// How Citus distributes a function (its row of pg_dist_object): by which
// argument, co-located with which tables.
struct DistributedFunction
{
    bool distributed; // by an argument: Citus delegates its calls by it
    int argument;     // distribution_argument_index: of all its arguments
    uint32 colocation;
};

// How Citus distributes `function`; not distributed for a built-in one
// (Citus distributes only functions users create).  A call of such a
// function in a transaction block is delegated to that argument's node,
// where a handler's claim is made.  The last answer is kept until an
// invalidation of pg_dist_object (Citus's trigger on it sends one) or of
// the layout.
static DistributedFunction citus_distributed_function(Oid function)
{
    static struct
    {
        Oid function;
        uint64 generation;
        DistributedFunction found;
    } last = {};
    if (function < FirstNormalObjectId)
        return DistributedFunction{};
    watch_invalidations();
    if (last.function == function && last.generation == invalidations)
        return last.found;
    uint64 generation = invalidations;
    Oid pg_dist_object = catalog("pg_dist_object");
    watched_dist_object = pg_dist_object;
    DistributedFunction found = {};
    if (OidIsValid(pg_dist_object))
        scan_catalog(
            pg_dist_object, "pg_dist_object_pkey", "objid", OIDOID, F_OIDEQ,
            ObjectIdGetDatum(function), [&](Relation rel, HeapTuple tuple) {
                bool isnull, no_argument, no_colocation;
                Oid classid = DatumGetObjectId(column(rel, tuple, "classid", OIDOID, &isnull));
                Datum argument =
                    column(rel, tuple, "distribution_argument_index", INT4OID, &no_argument);
                Datum colocation = column(rel, tuple, "colocationid", INT4OID, &no_colocation);
                if (classid == ProcedureRelationId && !no_argument)
                    found = DistributedFunction{true, DatumGetInt32(argument),
                                                no_colocation ? 0 : DatumGetUInt32(colocation)};
            });
    last = {function, generation, found};
    return found;
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
    return node != nullptr && IsA(node, Const) && castNode(Const, node)->constisnull;
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

bool worker_node()
{
    Oid pg_dist_local_group = catalog("pg_dist_local_group");
    return OidIsValid(pg_dist_local_group) && local_group(pg_dist_local_group) > 0;
}

} // namespace idempotency::citus
