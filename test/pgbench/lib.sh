# shellcheck shell=bash
# Shell functions shared by test/demo and the benchmarks in test/pgbench: bring
# a machine up (packages, build, install), run a throwaway cluster as an
# unprivileged user, and run pgbench against it.  They follow test/run's steps
# (the same package check, PG_CONFIG handling and cluster layout); test/run
# keeps its own copy for now.
#
# Sets, as its functions run: pg_config bindir pkglibdir extensiondir
# (locate_postgres), scratch server_user (make_scratch), cluster_data
# cluster_socket cluster_port cluster_log (start_cluster), redis_dir
# redis_socket redis_job (start_redis).

# The major version of the PostgreSQL to use, before it may be installed:
# from the path of a Debian pg_config (/usr/lib/postgresql/N/bin/pg_config),
# else by asking the pg_config that PG_CONFIG names.
lib_pg_major() {
    local wanted=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config} found
    if [[ $wanted =~ ^/usr/lib/postgresql/([0-9]+)/bin/pg_config$ ]]; then
        echo "${BASH_REMATCH[1]}"
    elif found=$(command -v "$wanted") && [[ $("$found" --version) =~ ^PostgreSQL\ ([0-9]+) ]]; then
        echo "${BASH_REMATCH[1]}"
    else
        printf '%s: cannot tell the PostgreSQL version of %s (set PG_CONFIG)\n' "${0##*/}" "$wanted" >&2
        return 1
    fi
}
lib_major=$(lib_pg_major) || exit 1
readonly lib_major

# What building and running needs on Debian; pgbench and psql come with
# postgresql-N (and its dependency postgresql-client-N).
readonly lib_packages=("postgresql-$lib_major" "postgresql-server-dev-$lib_major" libssl-dev g++ make)

scratch=''
server_user=''
cluster_data=''
cluster_log=''
postmaster_job=''
redis_dir=''
redis_socket=''
redis_job=''

say() { printf '==> %s\n' "$*"; }

die() {
    printf '%s: %s\n' "${0##*/}" "$*" >&2
    exit 1
}

# Runs a command as root: directly, through sudo, or not at all.
as_root() {
    if ((EUID == 0)); then
        "$@"
    elif command -v sudo >/dev/null; then
        sudo "$@"
    else
        die "'$*' needs root, and there is no sudo; run as root or install sudo"
    fi
}

# PostgreSQL refuses to run as root, so the cluster runs as postgres then.
as_server_user() {
    if ((EUID == 0)); then
        runuser -u "$server_user" -- "$@"
    else
        "$@"
    fi
}

# ---------------------------------------------------------------- machine

# The packages of lib_packages and of the arguments that are not installed.
missing_packages() {
    local pkg
    for pkg in "${lib_packages[@]}" "$@"; do
        dpkg-query -W -f='${Status}\n' "$pkg" 2>/dev/null | grep -q '^install ok installed$' ||
            printf '%s\n' "$pkg"
    done
}

# Says what apt-get is about to do for the packages named: what it installs,
# and what it upgrades, which a missing package can need (installing
# postgresql-server-dev-15 upgrades an older postgresql-15 to its version, and
# the upgrade restarts that server).  From apt-get's own simulation.
announce_install() {
    local line new=() upgraded=()
    # "Inst name [installed] (candidate suite [arch])", or without [installed]
    local upgrade='^Inst ([^ ]+) \[([^ ]+)\] \(([^ ]+)' install='^Inst ([^ ]+) \(([^ ]+)'
    while read -r line; do
        if [[ $line =~ $upgrade ]]; then
            upgraded+=("${BASH_REMATCH[1]} ${BASH_REMATCH[2]} -> ${BASH_REMATCH[3]}")
        elif [[ $line =~ $install ]]; then
            new+=("${BASH_REMATCH[1]} ${BASH_REMATCH[2]}")
        fi
    done < <(LC_ALL=C apt-get install -s -q --no-install-recommends "$@" 2>/dev/null)
    local list
    if ((${#new[@]} > 0)); then
        list=$(printf '%s, ' "${new[@]}")
        say "apt-get installs ${#new[@]} packages (with what they need): ${list%, }"
    fi
    if ((${#upgraded[@]} > 0)); then
        list=$(printf '%s, ' "${upgraded[@]}")
        say "apt-get UPGRADES ${#upgraded[@]} installed packages: ${list%, }"
        [[ $list == *postgresql-[0-9]* ]] &&
            say "(an upgraded PostgreSQL server is restarted by its package, which ends its sessions)"
    fi
    return 0
}

# Installs what is missing of lib_packages and of the arguments, the packages
# only one caller needs (make bench's Redis), saying first what that installs
# and upgrades.
install_packages() {
    if ! command -v dpkg-query >/dev/null; then
        say "not Debian: not checking packages (need ${lib_packages[*]} $* or equivalents)"
        return
    fi
    local missing
    mapfile -t missing < <(missing_packages "$@")
    ((${#missing[@]} == 0)) && return
    say "missing: ${missing[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
    announce_install "${missing[@]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# Sets the PostgreSQL paths every later step uses, all from one pg_config.
locate_postgres() {
    local wanted=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
    # A bare name (make demo PG_CONFIG=pg_config) is looked up in PATH.
    pg_config=$(command -v "$wanted") || die "no pg_config at $wanted (set PG_CONFIG)"
    bindir=$("$pg_config" --bindir)
    pkglibdir=$("$pg_config" --pkglibdir)
    extensiondir=$("$pg_config" --sharedir)/extension
    [[ -x $bindir/pgbench && -x $bindir/psql ]] || die "no pgbench or psql in $bindir"
    say "$("$pg_config" --version) from $bindir"
}

build_and_install() {
    local tree=$1
    say "building"
    make -C "$tree" -s -j"$(nproc)" PG_CONFIG="$pg_config"
    say "installing the extension into $pkglibdir and $extensiondir (make install)"
    if [[ -w $pkglibdir && -w $extensiondir ]]; then
        make -C "$tree" -s install PG_CONFIG="$pg_config"
    else
        as_root make -C "$tree" -s install PG_CONFIG="$pg_config"
    fi
}

# A directory the server user owns, for the cluster, its socket and logs.
make_scratch() {
    local name=$1
    if ((EUID == 0)); then
        server_user=postgres
        id -u "$server_user" >/dev/null || die "no user $server_user to run PostgreSQL as"
    else
        server_user=$(id -un)
    fi
    scratch=$(mktemp -d "${TMPDIR:-/tmp}/$name.XXXXXX")
    chmod 755 "$scratch"
    ((EUID == 0)) && chown "$server_user:" "$scratch"
    return 0
}

# Copies files where the server user can read them: the checkout may not be
# readable by postgres (e.g. under /root).
copy_for_server() {
    local dest=$1
    shift
    as_server_user mkdir -p "$dest"
    local f
    for f in "$@"; do
        as_server_user tee "$dest/${f##*/}" <"$f" >/dev/null
    done
}

# ---------------------------------------------------------------- cluster

# A port nobody listens on over TCP and no socket in the default directories
# uses; the cluster itself listens only on a socket in its own directory.
free_port() {
    local port
    for ((port = 20000 + RANDOM % 10000; ; port++)); do
        [[ -e /var/run/postgresql/.s.PGSQL.$port || -e /tmp/.s.PGSQL.$port ]] && continue
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue
        echo "$port"
        return
    done
}

# Starts a cluster in $scratch/cluster; the argument, settings, is appended
# to its postgresql.conf after the private socket settings.  (Not read from
# standard input: a pipe would run this in a subshell that forgets the
# cluster_* variables the clean-up needs.)
start_cluster() {
    local settings=$1 dir=$scratch/cluster
    cluster_socket=$dir/socket
    cluster_log=$dir/server.log
    cluster_port=$(free_port)
    as_server_user mkdir -p "$cluster_socket"
    as_server_user "$bindir/initdb" -D "$dir/data" --no-locale -E UTF8 -A trust -N \
        >"$scratch/initdb.log" 2>&1 || { cat "$scratch/initdb.log"; return 1; }
    cluster_data=$dir/data
    {
        printf '\n# %s: a private socket only\n' "${0##*/}"
        printf "listen_addresses = ''\nunix_socket_directories = '%s'\nport = %s\n" \
            "$cluster_socket" "$cluster_port"
        printf '%s\n' "$settings"
    } | as_server_user tee -a "$cluster_data/postgresql.conf" >/dev/null
    # A library that fails to preload stops the server here: show why.
    as_server_user "$bindir/pg_ctl" -D "$cluster_data" -l "$cluster_log" -w -t 120 start >/dev/null ||
        { cat "$cluster_log"; return 1; }
    say "cluster on port $cluster_port, log $cluster_log"
}

# A postmaster this shell started itself (postmaster_job: the cost runner's,
# under callgrind) is also waited for: pg_ctl returns once postmaster.pid is
# gone, but valgrind writes the postmaster's profile after that, so removing
# the scratch directory at that moment fails ("Directory not empty").
stop_cluster() {
    if [[ -n $cluster_data && -e $cluster_data/postmaster.pid ]]; then
        as_server_user "$bindir/pg_ctl" -D "$cluster_data" -m fast -w stop >/dev/null
    fi
    if [[ -n $postmaster_job ]]; then
        wait "$postmaster_job" || true
        postmaster_job=''
    fi
}

# psql into the cluster, stopping at the first error; database first.
psql_in() {
    local database=$1
    shift
    as_server_user "$bindir/psql" -X -q -v ON_ERROR_STOP=1 -h "$cluster_socket" \
        -p "$cluster_port" -d "$database" "$@"
}

# One value: the first column of the first row.
query_value() {
    local database=$1 sql=$2
    psql_in "$database" -At -c "$sql"
}

# Fails (and shows where) when the server log has a crash or an internal
# error: a backend assertion (TRAP:), a process killed by a signal, or an
# error of SQLSTATE class XX, which the log_line_prefix '... [%e] ...' the
# callers set prints as [XX...].  The same gate as test/run's.
check_server_log() {
    local pattern='TRAP: |terminated by signal [0-9]+:|\[XX[0-9A-Z]{3}\]'
    [[ -f $cluster_log ]] || return 0
    if grep -qE "$pattern" "$cluster_log"; then
        say "crash or internal error in the server log:"
        grep -nE -B3 -A3 "$pattern" "$cluster_log"
        return 1
    fi
}

# Stops Redis and the cluster and removes the scratch directory; KEEP_TMP=1 keeps it.
clean_up() {
    stop_redis || true
    stop_cluster || true
    if [[ -n $scratch && ${KEEP_TMP:-0} == 1 ]]; then
        say "kept $scratch"
    elif [[ -n $scratch ]]; then
        rm -rf "$scratch"
    fi
}

# ---------------------------------------------------------------- Redis

# Starts a throwaway Redis in $scratch/redis as the server user, on a unix
# socket there and no TCP port, in the background (Redis runs in the
# foreground; the pid file is how stop_redis finds it).  Durable through its
# append-only file, fsynced as the argument says (always or everysec); no RDB
# snapshots, and no automatic AOF rewrite, which, like a checkpoint, would
# land in whichever run it happened to fall into.
start_redis() {
    local appendfsync=$1 dir=$scratch/redis tries
    as_server_user mkdir -p "$dir"
    redis_dir=$dir
    redis_socket=$dir/redis.sock
    as_server_user redis-server --port 0 --unixsocket "$redis_socket" --unixsocketperm 700 \
        --daemonize no --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --dir "$dir" \
        --save '' --appendonly yes --appendfsync "$appendfsync" --auto-aof-rewrite-percentage 0 \
        </dev/null >/dev/null 2>&1 &
    redis_job=$!
    for ((tries = 0; tries < 300; tries++)); do
        [[ $(redis_cli PING 2>/dev/null) == PONG ]] && break
        if ! kill -0 "$redis_job" 2>/dev/null; then
            cat "$dir/redis.log" >&2
            die "redis-server did not start (its log is above)"
        fi
        sleep 0.1
    done
    [[ $(redis_cli PING 2>/dev/null) == PONG ]] || die "redis-server did not answer within 30 s"
    say "$(redis-server --version | cut -d ' ' -f 1-3) on $redis_socket, appendfsync $appendfsync"
}

# Stops Redis: SIGTERM makes it fsync its AOF and exit; SIGKILL after 30 s.
stop_redis() {
    [[ -n $redis_job ]] || return 0
    local pid tries
    pid=$(cat "$redis_dir/redis.pid" 2>/dev/null) || pid=$redis_job
    kill -TERM "$pid" 2>/dev/null || true
    for ((tries = 0; tries < 300; tries++)); do
        kill -0 "$redis_job" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$redis_job" 2>/dev/null; then
        kill -KILL "$pid" "$redis_job" 2>/dev/null || true
    fi
    wait "$redis_job" 2>/dev/null || true
    redis_job=''
}

redis_cli() {
    as_server_user redis-cli -s "$redis_socket" "$@"
}

# One field of Redis's INFO (the first argument; the second, its section).
redis_info() {
    local field=$1 section=$2
    redis_cli INFO "$section" | tr -d '\r' | sed -n "s/^$field://p"
}

# ---------------------------------------------------------------- workloads

# What each workload is, in the reports: test/pgbench/<name>.sql, or a Redis
# mode of redis_load (make bench).
declare -rA labels=(
    [bare_insert]='baseline: bare INSERT'
    [bare_select]='baseline: bare PK SELECT'
    [plain_new]='baseline: plain new request, 5 statements'
    [plain_new_fn]='baseline: plain new request, PL/pgSQL'
    [plain_replay]='baseline: plain replay'
    [plain_contention]='baseline: plain contention, 100 keys'
    [minimal_new_fn]='baseline: hand-written minimum, PL/pgSQL'
    [minimal_new]='baseline: hand-written minimum, 1 statement'
    [contract_new_fn]='baseline: minimum with the lookup first, PL/pgSQL'
    [ext_new]='ext: new request, 5 statements'
    [ext_new_fn]='ext: new request, 1 round trip (PL/pgSQL)'
    [ext_new_pipeline]='ext: new request, 1 round trip (pipeline)'
    [ext_replay]='ext: replay'
    [floor_replay]='probe: floor of a SQL edition, replay'
    [floor_checks]='probe: the same, with the checks a replay needs'
    [floor_front]='probe: the same, arguments checked by an inlined front'
    [floor_new_fn]='probe: floor of a SQL edition, new request'
    [floor_new_fn_lease]='probe: the same, with a lease (no IK004 trigger)'
    [ext_replay_scalar]='ext: replay, scalar call (a handler)'
    [ext_contention]='ext: contention, 100 keys'
    [ext_mismatch]='ext: mismatch'
    [ext_lookup]='ext: lookup'
    [ext_in_progress]='ext: in progress'
    [ext_two_phase]='ext: two-phase (begin; complete)'
    [redis_middleware]='redis middleware: SET NX; business INSERT; SET'
    [redis_new]='redis: SET NX; SET (no business write)'
    [redis_replay]='redis: replay (GET)'
)
# A broken variant of each script that checks something: each must fail its
# own checks, which proves the checks bite (with this pgbench and this
# extension) before any number is taken.  bare_insert checks nothing.  The
# Redis workloads' broken variants are redis_load --broken (make bench).
declare -rA breakages=(
    # The same key in every transaction: the second one must not claim.
    [plain_new]='s/random([01], 4611686018427387903)/:run/'
    [plain_new_fn]='s/random([01], 4611686018427387903)/:run/'
    [ext_new]='s/random([01], 4611686018427387903)/:run/'
    [ext_new_fn]='s/random([01], 4611686018427387903)/:run/'
    [ext_new_pipeline]='s/random([01], 4611686018427387903)/:run/'
    [ext_two_phase]='s/random([01], 4611686018427387903)/:run/'
    [minimal_new_fn]='s/random([01], 4611686018427387903)/:run/'
    [minimal_new]='s/random([01], 4611686018427387903)/:run/'
    [contract_new_fn]='s/random([01], 4611686018427387903)/:run/'
    # A key that was never stored.
    [bare_select]='s/random(1, :keys)/:keys + 1/'
    [plain_replay]='s/random(1, :keys)/:keys + 1/'
    [ext_replay]='s/random(1, :keys)/:keys + 1/'
    [ext_replay_scalar]='s/random(1, :keys)/:keys + 1/'
    [ext_lookup]='s/random(1, :keys)/:keys + 1/'
    # A key that nobody claimed.
    [ext_in_progress]='s/random(1, :pending)/:pending + 1/'
    # The stored request instead of another one.
    [ext_mismatch]='s/bench_other_request()/bench_request()/'
    # One hot key, a different request each time: the second must not replay.
    [plain_contention]='s/random(1, 100)/1/; s/bench_request_digest()/sha256(random()::text::bytea)/'
    [ext_contention]='s/random(1, 100)/1/; s/request_hash(bench_request())/request_hash(random()::text)/'
)
# How a broken variant must fail: through a script's check (\gset's "expected
# one row, got 0" or bench_fail), not, say, through a syntax error.  The
# hand-written minimum's check is the plain table's unique constraint itself.
readonly default_check_failure='expected one row, got 0|benchmark check failed'
declare -rA check_failures=(
    [minimal_new_fn]='duplicate key value violates unique constraint "idempotency_keys_plain_pkey"'
    [minimal_new]='duplicate key value violates unique constraint "idempotency_keys_plain_pkey"'
)

# Runs the broken variant of a pgbench workload (the first argument) for three
# transactions on one client; the rest are pgbench options (-D ...).
run_broken_script() {
    local workload=$1 broken=$scratch/broken/$1.sql
    shift
    sed "${breakages[$workload]}" "$here/$workload.sql" | as_server_user tee "$broken" >/dev/null
    pgbench_in "$db" -c 1 -j 1 -t 3 "$@" -f "$broken"
}

# Runs the broken variant of each of the workloads (the arguments) that has
# one, through the runner's run_broken and has_broken_variant; each must fail
# its checks.  Counts run_id up, one per variant, and a variant that passes in
# failures.
prove_checks_bite() {
    say "proving that the scripts' checks bite: a broken variant of each must fail"
    local workload out pattern proven=0
    as_server_user mkdir -p "$scratch/broken"
    for workload in "$@"; do
        has_broken_variant "$workload" || continue
        run_id=$((run_id + 1))
        out=$scratch/logs/broken-$run_id.out
        pattern=${check_failures[$workload]:-$default_check_failure}
        if run_broken "$workload" >"$out" 2>&1 || ! grep -qE "$pattern" "$out"; then
            failures=$((failures + 1))
            printf '\n!!! FAILED: the broken variant of %s did not fail its checks:\n' "$workload" >&2
            sed 's/^/!!!   /' "$out" >&2
        else
            proven=$((proven + 1))
        fi
    done
    say "$proven broken variants failed their checks, as they must"
}

# ---------------------------------------------------------------- benchmarks

# Prints the first argument normally, the second in smoke mode (SMOKE=1).
normal_or_smoke() {
    if [[ ${SMOKE:-0} == 1 ]]; then echo "$2"; else echo "$1"; fi
}

# pgbench's run length as arguments: $1 seconds, or in smoke mode a few
# transactions per client, which end however loaded the machine is (a 1 s
# run of 32 clients on a busy machine may complete none).
run_length() {
    if [[ ${SMOKE:-0} == 1 ]]; then echo "-t 5"; else echo "-T $1"; fi
}

# The command line as it was given: the settings among the named variables
# that were set, then the command (the first argument).
command_line() {
    local command=$1 var words=()
    shift
    for var in "$@"; do
        [[ -v $var ]] && words+=("$var=${!var@Q}")
    done
    echo "${words[*]} $command"
}

# The settings the benchmarks' clusters share, with shared_buffers as given.
# Throwaway, so tuned for the benchmark, not for safety beyond what the
# synchronous_commit = on runs must measure (fsync and full_page_writes stay on).
bench_settings() {
    local shared_buffers=$1
    cat <<EOF

# ${0##*/}: a 2-core, 24 GiB machine
shared_preload_libraries = 'idempotency'
shared_buffers = $shared_buffers
# No checkpoint inside a run: each would add full-page images and I/O to
# whichever run it lands in (the report flags a run one landed in anyway).
max_wal_size = 16GB
min_wal_size = 2GB
checkpoint_timeout = 1d
# Autovacuum would land in random runs too; the runner vacuums between
# repetitions instead.
autovacuum = off
jit = off
max_connections = 100
log_line_prefix = '%m [%p] [%e] %q%a '
EOF
}

# pgbench against a database of the cluster (the first argument), prepared
# statements and no vacuum of pgbench's own tables; the rest are pgbench's
# options.  PGOPTIONS, when set, reaches the server.
pgbench_in() {
    local database=$1
    shift
    as_server_user "$bindir/pgbench" -n -M prepared -h "$cluster_socket" -p "$cluster_port" \
        ${pgbench_role:+-U "$pgbench_role"} "$@" "$database"
}

# A value from pgbench's output: the first match of the sed pattern's group.
pgbench_field() {
    local pattern=$1 file=$2
    sed -n "s/$pattern/\\1/p" "$file" | head -n 1
}

pgbench_tps() { pgbench_field '^tps = \([0-9.]*\) .*' "$1"; }
pgbench_transactions() { pgbench_field '^number of transactions actually processed: \([0-9]*\).*' "$1"; }
pgbench_failed() { pgbench_field '^number of failed transactions: \([0-9]*\) .*' "$1"; }

# What went wrong in one pgbench run, one problem per line, nothing when it
# ran clean: its exit status (the first argument), an error in its output
# (the second, a file), no transaction at all, a failed one.
pgbench_problems() {
    local status=$1 out=$2 first_error tps transactions failed
    ((status == 0)) || echo "pgbench exited with status $status"
    first_error=$(grep -m 1 -E 'error|ERROR' "$out" || true)
    [[ -z $first_error ]] || echo "${first_error#pgbench: error: }"
    tps=$(pgbench_tps "$out")
    transactions=$(pgbench_transactions "$out")
    failed=$(pgbench_failed "$out")
    [[ -n $tps && -n $transactions ]] || echo "no tps in pgbench's output"
    ((${transactions:-0} > 0)) || echo "no transaction completed"
    ((${failed:-0} == 0)) || echo "$failed failed transactions"
    return 0
}

# The arguments on one line, separated by "; ".
semicolon_list() {
    local line
    line=$(printf '%s; ' "$@")
    echo "${line%; }"
}

# A failed run is loud: which run (the first argument), its problems (the
# rest), and the end of pgbench's output (the second, a file).
report_failed_run() {
    local what=$1 out=$2
    shift 2
    printf '\n!!! FAILED: %s: %s\n' "$what" "$*" >&2
    grep -v '^pgbench (' "$out" | tail -n 20 | sed 's/^/!!!   /' >&2
    printf '\n' >&2
}

# A benchmark runner counts failed runs in failures and sets finished=1 at
# its end; finish_bench, its EXIT trap, stops the cluster, then exits non-zero
# when either says so.
failures=0
finished=0

finish_bench() {
    local status=$?
    trap - EXIT INT TERM
    clean_up
    if ((!finished)); then
        echo "${0##*/}: stopped before the benchmark ran to its end (exit status $status)" >&2
        exit $((status == 0 ? 1 : status))
    fi
    ((failures == 0)) || exit 1
    exit 0
}
