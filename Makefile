# Build with PGXS. `make test` and `make demo` bootstrap a fresh machine first
# (packages, build, install), so they must work before pg_config exists; the
# targets that need PGXS (all, install, installcheck, clean ...) stop instead.
EXTENSION = idempotency
MODULE_big = idempotency
OBJS = src/module.o src/settings.o src/boundary.o src/log_gate.o src/sha256.o src/siphash.o src/canonical.o src/request_hash.o src/store.o src/key_digest.o src/tenants.o src/citus_placement.o src/citus_routing.o src/session.o src/claims.o src/shared_claims.o src/unsettled.o \
       src/arguments.o src/inspect.o \
       src/api.o src/stats.o src/scope_stats.o src/worker.o
# The SQL edition (edition/, doc/sql-edition.md) installs beside it, for
# CREATE EXTENSION idempotency_sql; `make sql-edition` writes its pg_tle and
# plain forms.
DATA = $(wildcard sql/idempotency--*.sql) edition/idempotency_sql.control $(wildcard edition/idempotency_sql--*.sql)
DOCS = README.md
# `make installcheck`, against a running server where `make install` put the
# extension (connection from PGHOST, PGPORT, PGUSER; a superuser, whose server
# can write results/), each suite in a UTF-8 database in the C locale, as
# test/run's cluster:
#  - the pg_regress suite (REGRESS): every sql/*.sql but the install and
#    upgrade scripts (DATA), against expected/;
#  - the isolation specs (ISOLATION): test/specs/*.spec against
#    test/expected/.  PGXS gives pg_isolation_regress --inputdir=$(srcdir),
#    where it would look for specs/ and expected/; ISOLATION_OPTS comes after
#    it on the command line, and the last --inputdir wins.  They need the
#    library preloaded: installcheck-preloaded below checks it first.
# REGRESS=name or ISOLATION=name runs some; ISOLATION= runs the SQL suite alone.
REGRESS = $(sort $(patsubst sql/%.sql,%,$(filter-out $(DATA),$(wildcard sql/*.sql))))
REGRESS_OPTS = --encoding=UTF8 --no-locale
ISOLATION = $(sort $(patsubst test/specs/%.spec,%,$(wildcard test/specs/*.spec)))
ISOLATION_OPTS = --inputdir=$(srcdir)/test --encoding=UTF8 --no-locale
# `make prove_installcheck`: the TAP scripts (PROVE_TESTS: test/t/*.pl unless
# given; PROVE_FLAGS=-v shows every assertion), through PGXS's own recipe,
# each on nodes it starts itself with the PostgreSQL of PG_CONFIG (its bin/
# first in PATH), where `make install` put the extension; TEMP_CONFIG
# (test/idempotency.conf unless set) preloads the library in every node.
# PGXS's TAP_TESTS switch would run them in `make installcheck` as well, as
# contrib's do; here it is off, since they take long and need what test/run
# installs: `make installcheck TAP_TESTS=1` runs all three suites.
PROVE_TESTS ?= test/t/*.pl
TAP_TESTS ?=

PG_CONFIG ?= pg_config
# C++17; PostgreSQL headers are treated as system headers so -Wextra judges only our code.
WERROR ?=
# Extra compiler and linker flags, for sanitizer builds (test/sanitize).
SANITIZE ?=
# -MMD: objects are rebuilt when a header they include changes.
PG_CXXFLAGS = -std=c++17 -Wall -Wextra -Wno-register -MMD -MP $(WERROR) $(SANITIZE)
EXTRA_CLEAN = src/*.d
SHLIB_LINK = -lstdc++ -lcrypto $(SANITIZE)
# Debian builds the server --with-llvm; JIT-inlining our C++ buys nothing, so no bitcode.
override with_llvm = no

PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
ifneq ($(wildcard $(PGXS)),)
include $(PGXS)
override CPPFLAGS := $(patsubst -I$(includedir_server),-isystem $(includedir_server),$(patsubst -I$(includedir_internal),-isystem $(includedir_internal),$(CPPFLAGS)))
else
# No PGXS: the targets that need it stop and say why, instead of doing
# nothing -- or, with no `all` defined, running the first target below.
# test, demo and the others below need no PGXS: they install it first.
pgxs_missing = PG_CONFIG=$(PG_CONFIG): \
    $(if $(pg_config_found),$(pg_config_found) gives no PGXS$(if $(PGXS), ($(PGXS) does not exist)),not found), \
    and this target builds with PGXS. Install postgresql-server-dev-15 (make test does), \
    or set PG_CONFIG to the pg_config of the PostgreSQL to build against
pg_config_found = $(shell command -v '$(PG_CONFIG)' 2>/dev/null)
pgxs_targets = all install installdirs uninstall installcheck prove_installcheck check clean distclean maintainer-clean
.PHONY: $(pgxs_targets)
$(pgxs_targets):
	$(error $(pgxs_missing))
endif
# After PGXS, so that its `all` stays the default goal.
-include $(OBJS:.o=.d)

ifneq ($(wildcard $(PGXS)),)
# The isolation specs need what only a preloaded library has (deferred claims
# in shared memory: idempotency.max_deferred_claims exists only then); on a
# server without it some would wait out isolationtester's timeouts, minutes
# each.  So installcheck first asks the server, and stops at once if it lacks
# the library.  It also tells when the server's expiry worker is on: a sweep
# that falls between expiry_races's ageing of a record in its setup and its
# steps' expiry takes the record first.
.PHONY: installcheck-preloaded prove_installcheck
installcheck: installcheck-preloaded
installcheck-preloaded:
ifneq ($(strip $(ISOLATION)),)
	@server=$$('$(bindir)/psql' -X -q -A -t -d postgres -c "SELECT count(*), \
	    pg_catalog.current_setting('idempotency.worker_enabled', true) FROM pg_catalog.pg_settings \
	    WHERE name = 'idempotency.max_deferred_claims'") || exit 1; \
	case $$server in \
	'1|on') echo "make installcheck: the server's expiry worker is on (idempotency.worker_enabled):" \
	    "a sweep between expiry_races's setup, which ages a record, and its steps, which expire it," \
	    "fails that spec (make test's server runs it with the worker off)" ;; \
	'1|'*) ;; \
	*) echo "make installcheck: the server does not preload the library, and the isolation specs" \
	    "need it: add idempotency to shared_preload_libraries and restart the server, or run the SQL" \
	    "suite alone with make installcheck ISOLATION=" >&2; exit 1 ;; \
	esac
endif

installcheck prove_installcheck: export TEMP_CONFIG ?= $(abspath $(srcdir)/test/idempotency.conf)
prove_installcheck:
	$(prove_installcheck)
endif

.PHONY: test demo bench bench-cost bench-expiry bench-scale bench-citus fuzz sanitize test-cassert protocol protocol-check errcodes errcodes-check \
        dist release format format-check sql-edition
# `make test` tests the PostgreSQL that PG_CONFIG names (default: the host's
# Debian PostgreSQL 15).  `make test PG=N` tests PostgreSQL N: the host's own
# when Debian's /usr/lib/postgresql/N is installed here, else inside
# test/chroot's cached chroot for N (17: Debian trixie, 18: sid; made on
# first use, needs root), on a copy of the tree.
PG ?=
test:
ifeq ($(PG),)
	bash test/run
else ifneq ($(wildcard /usr/lib/postgresql/$(PG)/bin/pg_config),)
	PG_CONFIG=/usr/lib/postgresql/$(PG)/bin/pg_config bash test/run
else
	bash test/chroot test $(PG)
endif
demo:
	bash test/demo
bench:
	bash test/pgbench/run
# Instructions, WAL and tuples per request under callgrind, against the
# baselines; GATE=1 fails when a ratio misses its goal (see test/pgbench/cost).
bench-cost:
	bash test/pgbench/cost
bench-expiry:
	bash test/pgbench/expiry
bench-scale:
	bash test/pgbench/scale
bench-citus:
	bash test/pgbench/citus
# The files generated from src/errcodes.txt and src/protocol.txt (the C++
# constants; each middleware package's SQLSTATE map, answers, defaults, option
# names, route rules and SQL), and the check that they, doc/reference.md's
# table of errors and middleware/README.md's tables agree with the two lists
# (test/t/032_errcodes.pl runs it in make test).  errcodes and errcodes-check
# are their former names.
protocol errcodes:
	perl src/protocol.pl
protocol-check errcodes-check:
	perl src/protocol.pl --check
# The C++ as .clang-format lays it out: `make format` rewrites it, `make
# format-check` (run by make test, in test/t/036_format.pl) fails, naming each
# line, where a file differs.  src/errcodes.hpp is generated in that layout.
FORMATTED = $(sort $(wildcard src/*.cpp src/*.hpp test/unit/*.cpp test/fuzz/*.cpp))
format:
	clang-format -i $(FORMATTED)
format-check:
	clang-format --dry-run --Werror $(FORMATTED)
# Not part of `make test`: libFuzzer on the pure C++ byte formats of
# request_hash (FUZZ_SECONDS per harness, default 20); see test/fuzz/run.
fuzz:
	bash test/fuzz/run
# Not part of `make test`: the pg_regress and isolation suites against an
# ASan+UBSan build, in scratch copies of the tree and of PostgreSQL; see test/sanitize.
sanitize:
	bash test/sanitize
# Not part of `make test`: pg_regress, isolation and the worker's, crashes' and
# restarts' TAP scripts against a PostgreSQL 15 built with assertions, made
# once from Debian's source package and cached outside the tree (needs root
# then); see test/cassert.
test-cassert:
	bash test/cassert test
# The SQL edition's three install forms, from its one source, in
# edition/build (edition/generate; doc/sql-edition.md, "Installing").
sql-edition:
	perl edition/generate edition/build
# The PGXN archive, dist/idempotency-X.Y.Z.zip: git archive of HEAD, with
# META.json checked against the control file (tools/release, tools/pgxn-meta).
dist:
	bash tools/release dist
# make release VERSION=X.Y.Z: fails unless every version string is X.Y.Z
# (tools/versions), then builds every release file from HEAD into
# dist/X.Y.Z/ (Debian packages, PGXN archive, npm tarball, Python sdist and
# wheel, Java jar) and prints the tags to push; see tools/release.  (PGXS
# sets VERSION to PostgreSQL's: only the command line's counts here.)
release:
ifeq ($(origin VERSION),command line)
	bash tools/release all $(VERSION)
else
	$(error usage: make release VERSION=X.Y.Z)
endif
