// Citus placement: which relation holds a scope's keys on this node, under
// which lock, and the commit protocol of a write to them -- see
// citus_placement.hpp for the protocol and the cache.  Below storage: it
// calls nothing of the extension's above it.
#include "citus_placement.hpp"
#include "boundary.hpp"
#include "errcodes.hpp"
#include "compat.hpp"
#include "settings.hpp"

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

namespace idempotency::citus_placement
{

// locktag_field4 of Citus's lock on the metadata of co-located shards.
constexpr uint16 colocated_shards_metadata_lock = 8;

// ---------------------------------------------------------------------------
// The layout of the table, from Citus's catalogs
// ---------------------------------------------------------------------------

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
        IsA(var, Var) && var->varattno == get_attnum(next.keys, "scope") && var->vartype == TEXTOID;
    next.by_shard_key =
        IsA(var, Var) && var->varattno == get_attnum(next.keys, "shard_key") &&
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
// each was tested on by the Citus TAP scripts (test/t/061, t/064 to t/068).  A Citus release on
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
        if (tested.postgres == compat::major_version && strlen(tested.citus) == release &&
            strncmp(tested.citus, version, release) == 0)
            return true;
    return false;
}

// The guard in front of Citus's private layout (citus_placement.hpp): the
// loaded library's release (whose routines, flags and lock tags are used)
// and the installed extension's (whose catalogs are read) must both be a
// tested pair with this PostgreSQL major.
void require_tested_citus()
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
                    untested, compat::major_version),
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

const Layout &layout_of(Oid keys)
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
Datum scope_value(FmgrInfo *input, Oid input_param, Oid type, Datum scope)
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
Placement place(Oid keys, Datum scope)
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
void *exported(const char *name)
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
bool lock_metadata(Oid keys, const Placement &placement, bool wait)
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
Placement lock_placement(Oid keys, Datum scope)
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
bool request_two_phase()
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

// Where Citus keeps a reference table: its one shard, how many nodes have
// a placement of it, and whether this node has one.
struct ReferenceShard
{
    bool distributed; // Citus knows the table at all
    bool reference;   // as a reference table, with one shard
    int64 shard;
    int placements;
    bool local;
};

static ReferenceShard reference_shard(Oid table)
{
    ReferenceShard found = {false, false, 0, 0, false};
    Oid partitions = catalog("pg_dist_partition"), shards = catalog("pg_dist_shard"),
        placements = catalog("pg_dist_placement"), groups = catalog("pg_dist_local_group");
    if (!OidIsValid(partitions) || !OidIsValid(shards) || !OidIsValid(placements) ||
        !OidIsValid(groups))
        return found;
    char method = 0, model = 0;
    scan_catalog(partitions, "pg_dist_partition_logical_relid_index", "logicalrelid", REGCLASSOID,
                 F_OIDEQ, ObjectIdGetDatum(table), [&](Relation rel, HeapTuple tuple) {
                     bool isnull;
                     method = DatumGetChar(column(rel, tuple, "partmethod", CHAROID, &isnull));
                     model = DatumGetChar(column(rel, tuple, "repmodel", CHAROID, &isnull));
                 });
    found.distributed = method != 0;
    if (method != 'n' || model != 't')
        return found;
    int shard_count = 0;
    scan_catalog(shards, "pg_dist_shard_logical_relid_index", "logicalrelid", REGCLASSOID, F_OIDEQ,
                 ObjectIdGetDatum(table), [&](Relation rel, HeapTuple tuple) {
                     bool isnull;
                     found.shard = DatumGetInt64(column(rel, tuple, "shardid", INT8OID, &isnull));
                     shard_count++;
                 });
    if (shard_count != 1)
        return found;
    found.reference = true;
    int32 group = local_group(groups);
    scan_catalog(placements, "pg_dist_placement_shardid_index", "shardid", INT8OID, F_INT8EQ,
                 Int64GetDatum(found.shard), [&](Relation rel, HeapTuple tuple) {
                     bool isnull;
                     found.placements++;
                     if (DatumGetInt32(column(rel, tuple, "groupid", INT4OID, &isnull)) == group)
                         found.local = true;
                 });
    return found;
}

// Whether Citus keeps `table` as a reference table placed on more than one
// node: an update of it then has several placements, and Citus commits
// such a transaction in two phases.
static bool replicated_reference_table(Oid table)
{
    ReferenceShard found = reference_shard(table);
    return found.reference && found.placements > 1;
}

Oid reference_placement(Oid table, LOCKMODE lockmode)
{
    if (!loaded())
        return table;
    ReferenceShard found = reference_shard(table);
    if (!found.distributed)
        return table;
    if (!found.reference || !found.local)
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("table \"%s\" has no placement on this node", get_rel_name(table)),
                        errdetail("Citus keeps it as a reference table, placed on every node."),
                        errhint("Run SELECT replicate_reference_tables() on the coordinator."),
                        errhidestmt(true)));
    return lock_shard_relation(table, found.shard, lockmode, false);
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
bool two_phase_by_reference_table(Oid keys)
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
void force_two_phase(Oid keys)
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
                       compat::libraries_hide_symbols
                           ? " (from PostgreSQL 16 on, extension libraries are built with "
                             "hidden symbols)"
                           : ""),
             errhint("Run SELECT create_reference_table('idempotency.two_phase') on the "
                     "coordinator, or distribute the keys with idempotency_distribute().")));
}

// `why`: why the call cannot be forwarded to the shard's node, if it could
// have been but for that.
[[noreturn]] void not_routed(int64 shard, const char *why)
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

// How Citus distributes `function`; not distributed for a built-in one
// (Citus distributes only functions users create).  A call of such a
// function in a transaction block is delegated to that argument's node,
// where a handler's claim is made.  The last answer is kept until an
// invalidation of pg_dist_object (Citus's trigger on it sends one) or of
// the layout.
DistributedFunction citus_distributed_function(Oid function)
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

uint32 colocation_of(Oid relid)
{
    uint32 found = 0;
    Oid pg_dist_partition = catalog("pg_dist_partition");
    if (OidIsValid(pg_dist_partition))
        scan_catalog(pg_dist_partition, "pg_dist_partition_logical_relid_index", "logicalrelid",
                     REGCLASSOID, F_OIDEQ, ObjectIdGetDatum(relid),
                     [&](Relation rel, HeapTuple tuple) {
                         bool isnull;
                         Datum colocation = column(rel, tuple, "colocationid", INT4OID, &isnull);
                         found = isnull ? 0 : DatumGetUInt32(colocation);
                     });
    return found;
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

bool worker_node()
{
    Oid pg_dist_local_group = catalog("pg_dist_local_group");
    return OidIsValid(pg_dist_local_group) && local_group(pg_dist_local_group) > 0;
}

} // namespace idempotency::citus_placement
