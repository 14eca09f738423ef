# Citus: where the keys live.  idempotency_distribute() refuses a table it
# cannot co-locate the keys with, saying why, and then moves the keys into
# the shards of the tenant's table, co-located with it; the documented
# one-round-trip handler claims and replays there; an untested Citus release
# or catalog layout is refused before a key is read; concurrent same-key
# requests (two sessions, then pgbench) place each order once; and the
# expired keys of the shards are deleted by idempotency_expire() on each
# worker and by its background sweeper, which leaves the per-scope summary to
# the coordinator.  (Was part of test/t/060_citus.pl; the cluster and the
# requests are test/t/CitusTest.pm's.)
# Skipped, visibly, when the citus library is not installed.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use CitusTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

plan skip_all => citus_missing() if citus_missing();

my $db = 'postgres';
my ($coordinator, @workers) = start_orders_cluster();

my $documented_call = create_documented_handler();
ok(defined $documented_call, 'doc/citus.md has the handler and its call');

# A key stored on the coordinator before the distribution, which refuses a
# tenant column its scope is not a value of and moves it into the shards.
# (Keys on the coordinator commit with two-phase commit, from PostgreSQL 16
# through idempotency.two_phase as a reference table: test/t/066 tests them.)
query(q{SELECT create_reference_table('idempotency.two_phase')});
run_request($coordinator, $db, 'ten1', 'stored-before', 'POST /orders', 201);

# ---------------------------------------------------------------------------
# idempotency_distribute: refusals, then the keys co-located with orders
# ---------------------------------------------------------------------------
{
	query(
		q{CREATE TABLE default_collation (tenant text PRIMARY KEY);
		  SELECT create_distributed_table('default_collation', 'tenant');
		  CREATE TABLE by_number (tenant int PRIMARY KEY);
		  SELECT create_distributed_table('by_number', 'tenant');
		  CREATE TABLE by_name (tenant varchar PRIMARY KEY);
		  SELECT create_distributed_table('by_name', 'tenant');
		  CREATE TABLE reference (tenant text COLLATE "C" PRIMARY KEY);
		  SELECT create_reference_table('reference');
		  SET citus.enable_schema_based_sharding TO on;
		  CREATE SCHEMA tenant_schema;
		  RESET citus.enable_schema_based_sharding;
		  CREATE TABLE tenant_schema.orders (tenant text COLLATE "C" PRIMARY KEY)});
	is(query(q{SELECT partmethod FROM pg_dist_partition
	            WHERE logicalrelid = 'tenant_schema.orders'::regclass}),
		'n', 'a table of a distributed schema is a single-shard table');
	# Schema-based sharding keeps a schema's tables in one shard group,
	# with no tenant column to co-locate the keys by: refused, with the
	# reason (doc/citus.md gives the alternative).
	my %refusals = (
		'tenant_schema.orders' => [ '0A000', qr/is not hash-distributed.*single-shard/s ],
		hold => [ '22023', qr/table (public\.)?hold is not distributed/ ],
		reference => [ '0A000', qr/is not hash-distributed/ ],
		default_collation => [ '0A000', qr/is not of type bigint, integer, uuid or text COLLATE "C"/ ],
		by_name => [ '0A000', qr/is not of type bigint, integer, uuid or text COLLATE "C"/ ],
		# Integer tenants are (test/t/061), but the keys stored here have
		# text scopes: refused, with nothing changed.
		by_number => [ '22P02', qr/the scope of a stored key is not a value of type integer/ ]);
	for my $table (sort keys %refusals)
	{
		my ($sqlstate, $stderr) =
		  sql_error($coordinator, $db, "SELECT idempotency_distribute('$table')");
		is($sqlstate, $refusals{$table}[0], "idempotency_distribute('$table') is refused");
		like($stderr, $refusals{$table}[1], "... saying why ($table)");
	}
	query(q{SELECT idempotency_distribute('orders')});
	is(query(q{SELECT colocationid = (SELECT colocationid FROM pg_dist_partition
	                                   WHERE logicalrelid = 'orders'::regclass)
	             FROM pg_dist_partition WHERE logicalrelid = 'idempotency.keys'::regclass}),
		't', 'idempotency.keys is co-located with orders');
	is(query($documented_call), 'claimed', "doc/citus.md's call claims once the keys are distributed");
	is(query($documented_call), 'replay', '... and replays when sent again');
	# citus_stat_tenants counts the queries Citus's executor routes by tenant,
	# not delegated function calls: of tenant-42's, it shows only the SELECT
	# below.  doc/citus.md says so and points to idempotency_scope_stats().
	is(query(q{SELECT count(*) FROM orders WHERE tenant = 'tenant-42'}), '1',
		"the documented call wrote tenant-42's order once");
	is(query(q{SELECT query_count_in_this_period FROM citus_stat_tenants
	            WHERE tenant_attribute = 'tenant-42'}),
		'1', 'citus_stat_tenants counts the routed SELECT, not the delegated calls');
	# Citus's private layout, guarded: on an untested Citus version, or with a
	# catalog laid out otherwise, a call is refused before a key is read.  On
	# a worker (which reads the distributed keys' layout), in a transaction
	# rolled back.
	# A release tested on another PostgreSQL major only is refused too: a
	# Citus release is another build on each major.
	my ($major) = query('SHOW server_version_num') =~ /^(\d+)\d{4}$/;
	for my $case (
		(
			map {
				my ($untested, $what) = @$_;
				[
					qq{SET citus.enable_version_checks TO off;
					   UPDATE pg_extension SET extversion = '$untested' WHERE extname = 'citus'},
					qr/Citus \Q$untested\E on PostgreSQL $major is not a combination this extension is tested with/,
					$what
				]
			} citus_untested_versions($major)
		),
		[
			q{ALTER TABLE pg_dist_shard RENAME COLUMN shardminvalue TO shard_min},
			qr/Citus catalog pg_dist_shard has no column shardminvalue of type text/,
			'a renamed Citus catalog column'
		])
	{
		my ($setup, $message, $what) = @$case;
		my ($sqlstate, $stderr) = sql_error($workers[0], $db,
			qq{BEGIN; $setup;
			   SELECT outcome FROM idempotency_begin('ten1', 'guarded', request_hash('x'::text));
			   ROLLBACK});
		is($sqlstate, '0A000', "$what is refused");
		like($stderr, $message, "... saying why ($what)");
	}
}

# ---------------------------------------------------------------------------
# Concurrent same-key requests
# ---------------------------------------------------------------------------
{
	my $first = $coordinator->background_psql($db);
	$first->query_safe('BEGIN');
	is($first->query_safe('SELECT outcome FROM ' . begin_call('ten2', 'same', 'POST /orders')),
		'claimed', 'concurrent: the first request claims');
	$first->query_safe(order_sql('ten2', 'same'));
	is(query('SELECT outcome FROM ' . begin_call('ten2', 'same', 'POST /orders', lease => '1 minute')),
		'in_progress', 'concurrent: a second request is told in_progress');
	is(query(q{BEGIN;
	           SELECT outcome FROM idempotency_begin('ten2', 'same', request_hash('POST /orders'::text));
	           COMMIT}),
		'in_progress', 'concurrent: ... also inside a transaction block');
	$first->query_safe('SELECT ' . complete_call('ten2', 'same', 201));
	$first->query_safe('COMMIT');
	$first->quit;
	is(query('SELECT outcome FROM ' . begin_call('ten2', 'same', 'POST /orders', lease => '1 minute')),
		'replay', 'concurrent: after the commit, it replays');
	is(order_count('ten2', 'same'), '1', 'concurrent: one order');
}

# Many clients, few keys, through pgbench (CitusTest: start_pgbench).

{
	my %log;
	my $run = start_pgbench(4, 100, 10, \%log);
	ok($run->finish, 'same-key load: pgbench succeeded') or diag($log{err});
	like($log{out}, qr/number of transactions actually processed: 400\b/,
		'same-key load: every request was answered');
	check_orders_match_keys('same-key load');
}

# ---------------------------------------------------------------------------
# Expiry on the shards: idempotency_expire() on each worker, then the
# background sweeper
# ---------------------------------------------------------------------------
sub make_expiring_keys
{
	my ($prefix, $count) = @_;
	query(join '', map {
		sprintf(q{BEGIN; SELECT %s; SELECT %s; COMMIT;},
			begin_call("ten$_", "$prefix-$_", 'POST /orders', ttl => '1 second'),
			complete_call("ten$_", "$prefix-$_", 201))
	} 1 .. $count);
	return;
}

{
	for (@workers)
	{
		$_->append_conf('postgresql.conf', 'idempotency.worker_enabled = off');
		$_->reload;
	}
	make_expiring_keys('exp1', 8);
	$coordinator->poll_query_until($db,
		q{SELECT count(*) = 8 FROM idempotency.keys WHERE key LIKE 'exp1-%' AND expires_at <= now()})
	  or die 'keys never expired';
	my $expired = 0;
	$expired += $_->safe_psql($db, 'SELECT idempotency_expire()') for @workers;
	is($expired, 8, 'idempotency_expire() on the workers deletes the expired keys of their shards');
	is(query(q{SELECT count(*) FROM idempotency.keys WHERE key LIKE 'exp1-%'}), '0',
		'... all of them');

	for (@workers)
	{
		$_->append_conf('postgresql.conf', 'idempotency.worker_enabled = on');
		$_->reload;
	}
	make_expiring_keys('exp2', 8);
	ok($coordinator->poll_query_until($db,
			q{SELECT count(*) = 0 FROM idempotency.keys WHERE key LIKE 'exp2-%'}),
		'the expiry workers sweep the shards of their nodes');
	my $swept = 0;
	$swept += $_->safe_psql($db, 'SELECT keys_expired FROM idempotency_stats()') for @workers;
	cmp_ok($swept, '>=', 16, 'idempotency_stats() on the workers counts the expired keys');
	# Each worker node's sweeper reaches its refresh step (after its sweep)
	# and leaves it to the coordinator, which reads every shard.
	wait_for_sweeps($_, $db, 2) for @workers;
	is(join(',', map { $_->safe_psql($db, 'SELECT count(*) FROM idempotency.scope_stats') } @workers),
		'0,0', 'the worker nodes do not summarise the shards again');
	like(query(q{SELECT idempotency_scope_stats_refresh()}), qr/^[1-9]\d*$/,
		'idempotency_scope_stats_refresh() on the coordinator summarises the shards');
	like(query(q{SELECT count(*) FROM idempotency_scope_stats() WHERE scope LIKE 't_'}),
		qr/^[1-8]$/, 'idempotency_scope_stats() shows the scopes of every shard');
}

done_testing();
