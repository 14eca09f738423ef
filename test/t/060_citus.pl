# Citus: a coordinator and two workers on this machine.  Keys on the
# coordinator with distributed business writes (or schema-sharded ones)
# commit with two-phase commit, asked of Citus by its routine (PostgreSQL 15)
# or else through idempotency.two_phase made a reference table, so a coordinator
# crash at either commit point never duplicates work; keys
# distributed with idempotency_distribute() live in the shard of their scope,
# next to the tenant's rows, with concurrent same-key requests, coordinator
# crashes, a shard move under load, a block_writes move waiting for a claim
# (reads answer meanwhile, a new request waits and then claims on the new
# node), expiry on the shards and a non-superuser caller.  A call on a node
# without the scope's shard (a shape Citus does not delegate, a client of
# the other worker) is forwarded to the shard's node in the caller's
# transaction: it commits with two-phase commit (a coordinator crash at
# either commit point keeps the claim on the worker and an order on the
# coordinator together), rolls back with it and with a savepoint; where
# Citus refuses a remote query, IK005.  A worker never
# uses keys of its own; a NULL scope, or a NULL tenant of a handler Citus
# distributes with the keys, never reaches Citus's delegation; a worker lost
# mid-call leaves no request in the coordinator's log; and an untested pair
# of Citus release and PostgreSQL major is refused.
# Skipped, visibly, when the citus library is not installed.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

plan skip_all => citus_missing() if citus_missing();

my $db = 'postgres';
my ($coordinator, @workers) = start_citus_cluster(
	conf => [
		'restart_after_crash = on',
		# Tenant statistics, for doc/citus.md's word on them.
		"citus.stat_tenants_track = 'all'",
		"idempotency.expire_interval = '200ms'",
		# The recovery of prepared transactions runs when the test asks.
		"citus.recover_2pc_interval = '-1'"
	],
	# The coordinator's commits can be held at the synchronous replication
	# wait of a session that asks for it.
	coordinator_conf => [ "synchronous_standby_names = 'nobody'", 'synchronous_commit = local' ],
	# PG_TEST_CITUS_PORT: the first of three fixed ports, instead of free ones.
	port => $ENV{PG_TEST_CITUS_PORT});
citus_database($db, $coordinator, @workers);

sub query { return $coordinator->safe_psql($db, shift); }

# Citus creates the extension on the workers too.
query(
	q{CREATE EXTENSION idempotency;
	  CREATE TABLE orders (tenant text COLLATE "C" NOT NULL, id bigserial,
	                       idem_key text NOT NULL, item text NOT NULL,
	                       PRIMARY KEY (tenant, id));
	  SELECT create_distributed_table('orders', 'tenant', shard_count => 4);
	  CREATE TABLE hold (x int)});
my ($version) = slurp_file('idempotency.control') =~ /^default_version\s*=\s*'([^']+)'/m;
is($workers[0]->safe_psql($db, q{SELECT extversion FROM pg_extension WHERE extname = 'idempotency'}),
	$version, 'the extension is on the workers');

# From PostgreSQL 16, Citus's library exports only its SQL functions: not its
# request for two-phase commit, which keys on the coordinator need, nor its
# execution state, which forwarded calls need.  Those are refused there
# (checked below); distributed keys and the calls Citus delegates are tested
# as on 15, through Citus's SQL-level functions.
my $without_exports = citus_without_exports();
note($without_exports) if $without_exports;

sub order_count
{
	my ($tenant, $key) = @_;
	return query(sprintf(q{SELECT count(*) FROM orders WHERE tenant = %s AND idem_key = %s},
			quote($tenant), quote($key)));
}

sub order_sql
{
	my ($tenant, $key) = @_;
	return sprintf(q{INSERT INTO orders (tenant, idem_key, item) VALUES (%s, %s, 'book')},
		quote($tenant), quote($key));
}

# The worker that holds the tenant's shard.
sub worker_of
{
	my ($tenant) = @_;
	my $port = query(sprintf(
			q{SELECT nodeport FROM pg_dist_shard_placement
			   WHERE shardid = get_shard_id_for_distribution_column('orders', %s)},
			quote($tenant)));
	my ($worker) = grep { $_->port == $port } @workers;
	return $worker;
}

sub wait_for_wait_event
{
	my ($pid, $event) = @_;
	$coordinator->poll_query_until($db,
		"SELECT wait_event = '$event' FROM pg_stat_activity WHERE pid = $pid")
	  or die "backend $pid never waited on $event";
	return;
}

# A request's statements inside its transaction: begin, order, complete.
# With handler, a call of a force-delegated handler instead, and an order
# in a table of the coordinator too; with local_order, the order in a table
# of the coordinator; with forwarded,
# that too, and the calls in shapes Citus does not delegate (forwarded to
# the shard's node).
sub request_statements
{
	my ($tenant, $key, %opts) = @_;
	my $local_order = sprintf(q{INSERT INTO local_orders VALUES (%s, %s)}, quote($tenant), quote($key));
	# (A handler's call, then the order on the coordinator, and a stand-in
	# for the completion the handler made.)
	return (sprintf(q{SELECT outcome FROM place_order_forced(%s, %s, 'POST /orders')}, quote($tenant), quote($key)),
		$local_order, 'SELECT true')
	  if $opts{handler};
	return (
		'SELECT outcome FROM ' . begin_call($tenant, $key, 'POST /orders'),
		$opts{local_order} ? $local_order : order_sql($tenant, $key),
		'SELECT ' . complete_call($tenant, $key, 201)) unless $opts{forwarded};
	return (
		sprintf(q{SELECT (%s).outcome}, begin_call($tenant, $key, 'POST /orders')),
		$local_order,
		sprintf(q{SELECT done FROM %s AS done WHERE done IS NOT NULL},
			complete_call($tenant, $key, 201)));
}

sub local_order_count
{
	my ($key) = @_;
	return query(sprintf(q{SELECT count(*) FROM local_orders WHERE idem_key = %s}, quote($key)));
}

# The orders of the request with $key: in the coordinator's table where
# request_statements (with %opts) writes it there, else distributed.
sub orders_of
{
	my ($tenant, $key, %opts) = @_;
	return $opts{forwarded} || $opts{local_order} || $opts{handler}
	  ? local_order_count($key)
	  : order_count($tenant, $key);
}

# Runs a request on the coordinator (request_statements) and sends its
# COMMIT; the commit is held at $point:
#  - 'pre_commit': after Citus's pre-commit work on the workers (PREPARE with
#    two-phase commit, else a one-phase COMMIT) and before the local commit
#    record: the request NOTIFYs, and another session holds the lock a
#    notifying commit takes, stuck in its own synchronous replication wait;
#  - 'post_commit': after the local commit record is flushed, before the
#    workers are told (COMMIT PREPARED): the request's synchronous
#    replication wait.
# Then the coordinator stops with a crash (immediate) and starts again, and
# Citus recovers the prepared transactions.  Returns the number of prepared
# transactions the worker had while the commit was held.
sub crash_at_commit_point
{
	my ($point, $tenant, $key, %opts) = @_;
	my $holder;
	if ($point eq 'pre_commit')
	{
		$holder = $coordinator->background_psql($db);
		my $pid = $holder->query_safe('SELECT pg_backend_pid()');
		$holder->query_safe(
			q{SET synchronous_commit = on; BEGIN; INSERT INTO hold VALUES (1); NOTIFY hold});
		$holder->query_until(qr//, "COMMIT;\n");
		wait_for_wait_event($pid, 'SyncRep');
	}
	my $request = $coordinator->background_psql($db);
	my $pid = $request->query_safe('SELECT pg_backend_pid()');
	$request->query_safe($point eq 'post_commit' ? 'SET synchronous_commit = on' : 'SELECT');
	$request->query_safe('BEGIN');
	my @statements = request_statements($tenant, $key, %opts);
	is($request->query_safe(shift @statements), 'claimed', "$point, $key: claimed");
	$request->query_safe($_) for @statements;
	$request->query_safe('NOTIFY hold') if $point eq 'pre_commit';
	$request->query_until(qr//, "COMMIT;\n");
	wait_for_wait_event($pid, $point eq 'pre_commit' ? 'object' : 'SyncRep');
	my $prepared = worker_of($tenant)->safe_psql($db, 'SELECT count(*) FROM pg_prepared_xacts');
	$coordinator->stop('immediate');
	# Their server is gone: quitting may find the pipe closed.
	eval { $_->quit } for grep { defined } $request, $holder;
	$coordinator->start;
	query('SELECT recover_prepared_transactions()');
	is(worker_of($tenant)->safe_psql($db, 'SELECT count(*) FROM pg_prepared_xacts'),
		'0', "$point, $key: Citus resolved the prepared transactions");
	return $prepared;
}

# What a retry of the request with $key is told, in a transaction block.
sub outcome_of
{
	my ($tenant, $key) = @_;
	return query(sprintf(q{BEGIN; SELECT outcome FROM %s; COMMIT},
			begin_call($tenant, $key, 'POST /orders')));
}

# After the crash, a retry of the request with $key, which runs it when told
# claimed: the order exists once.
sub retry_once
{
	my ($point, $tenant, $key, $expected, %opts) = @_;
	if ($expected eq 'claimed')
	{
		is( query(join ";\n", 'BEGIN', request_statements($tenant, $key, %opts), 'COMMIT'),
			"claimed\nt", "$point, $key: the retry claims and runs the request");
	}
	else
	{
		is(outcome_of($tenant, $key), $expected, "$point, $key: the retry is told $expected");
	}
	is(orders_of($tenant, $key, %opts), '1', "$point, $key: exactly one order");
	return;
}

# A coordinator crash at each commit point of a request of $tenant
# (%opts as for request_statements), then its retry: the shard's node held
# its part (the order, or the claim) as a prepared transaction, so the order
# rolled back or committed with the claim, and the retry claims or replays.
sub crash_and_retry
{
	my ($tenant, $name, %opts) = @_;
	for my $point (qw(pre_commit post_commit))
	{
		my $key = "$name-$point";
		my $prepared = crash_at_commit_point($point, $tenant, $key, %opts);
		is($prepared, '1', "$point, $key: the shard's node held its part as a prepared transaction");
		my $claimed = $point eq 'pre_commit';
		is(orders_of($tenant, $key, %opts), $claimed ? '0' : '1',
			"$point, $key: the order " . ($claimed ? 'rolled back' : 'committed') . ' with the claim');
		retry_once($point, $tenant, $key, $claimed ? 'claimed' : 'replay', %opts);
		is(order_count($tenant, $key), '1', "$point, $key: ... and the handler's own order once")
		  if $opts{handler};
	}
	return;
}

# Runs @statements in a transaction block on the coordinator with Citus's
# remote commands logged; returns psql's exit code and output, and the log.
sub commit_logged
{
	my (@statements) = @_;
	return $coordinator->psql($db,
		join ";\n", 'SET citus.log_remote_commands = on', 'SET client_min_messages = log',
		'BEGIN', @statements, 'COMMIT');
}

# ---------------------------------------------------------------------------
# Keys on the coordinator, orders distributed: two-phase commit
# ---------------------------------------------------------------------------
# Citus is asked for it by its exported routine (PostgreSQL 15), else by an
# update of idempotency.two_phase once it is a reference table.

# On a Citus release not tested with this PostgreSQL major, a write of keys
# kept here is refused before the extension looks up a routine of Citus's
# library (or updates idempotency.two_phase): the routine's signature is
# Citus's private layout too.  (In a transaction rolled back.)
{
	my ($sqlstate, $stderr) = sql_error($coordinator, $db,
		q{BEGIN;
		  SET citus.enable_version_checks TO off;
		  UPDATE pg_extension SET extversion = '13.9-1' WHERE extname = 'citus';
		  SELECT outcome FROM idempotency_begin('ten1', 'unguarded', request_hash('x'::text));
		  ROLLBACK});
	is($sqlstate, '0A000', 'keys on the coordinator, an untested Citus: a write is refused');
	like($stderr, qr/Citus 13\.9-1 on PostgreSQL \d+ is not a combination this extension is tested with/,
		'... before the routine of Citus\'s library is looked up');
}

if ($without_exports)
{
	# A write is refused before it writes, with the reason; a lookup still
	# answers.
	my ($sqlstate, $err) =
	  sql_error($coordinator, $db, 'SELECT outcome FROM ' . begin_call('ten1', 'local-pre', 'POST /orders'));
	is($sqlstate, '55000', 'keys on the coordinator: a begin is refused (55000)');
	like($err, qr/idempotency.two_phase is not a Citus reference table/, '... saying why');
	like($err, qr/HINT:.*create_reference_table\('idempotency.two_phase'\).*idempotency_distribute\(\)/s,
		'... and what to run');
	is(query(q{SELECT count(*) FROM idempotency.keys}), '0', '... having written nothing');
	is(query(q{SELECT count(*) FROM idempotency_lookup('ten1', 'local-pre')}), '0', 'a lookup answers');
}
else
{
	crash_and_retry('ten1', 'local');
}

query(q{SELECT create_reference_table('idempotency.two_phase')});
if ($without_exports)
{
	crash_and_retry('ten1', 'reference');
	# Updated once per transaction (two begins in the savepoint), and again
	# after a rollback to the savepoint released the update's lock.
	my $key = 'reference-savepoint';
	my $begin = 'SELECT outcome FROM ' . begin_call('ten1', $key, 'POST /orders');
	my ($rc, $stdout, $stderr) = commit_logged('SAVEPOINT s', $begin, $begin, 'ROLLBACK TO SAVEPOINT s',
		$begin, order_sql('ten1', $key), 'SELECT ' . complete_call('ten1', $key, 201));
	is($rc, 0, 'a request with a rollback to a savepoint commits');
	# (Citus logs each placement's update, and each rollback it sends.)
	my $sequence = join ',', map { /ROLLBACK/ ? 'rollback' : 'update' }
	  $stderr =~ /(UPDATE idempotency\.two_phase_\d+|ROLLBACK TO SAVEPOINT)/g;
	my ($before, $after) = split /(?:,?rollback)+,?/, $sequence;
	ok($before && $after && $before eq $after,
		'... idempotency.two_phase updated once in the savepoint, and again after its rollback')
	  or diag("updates and rollbacks sent: $sequence");
	like($stderr, qr/PREPARE TRANSACTION/, '... in two phases');
	is(order_count('ten1', $key), '1', '... with its order');
	is(outcome_of('ten1', $key), 'replay', '... and replays');
}
else
{
	# (The routine costs nothing; the update, a statement on every node.)
	my ($rc, $stdout, $stderr) = commit_logged(request_statements('ten1', 'local-routine'));
	is("$rc|$stdout", "0|claimed\nt", 'with both ways, a request commits');
	like($stderr, qr/PREPARE TRANSACTION/, '... in two phases');
	unlike($stderr, qr/two_phase/, '... by the routine, not through idempotency.two_phase');
}
{
	# Schema-based sharding, whose tables have no tenant column to
	# distribute the keys by: a tenant's schema in one shard on a worker,
	# the keys on the coordinator.
	query('SET citus.enable_schema_based_sharding TO on; CREATE SCHEMA shop_7');
	query('CREATE TABLE shop_7.orders (id bigserial PRIMARY KEY, idem_key text NOT NULL)');
	my $key = 'schema-sharded';
	my ($rc, $stdout, $stderr) = commit_logged(
		'SELECT outcome FROM ' . begin_call('shop_7', $key, 'POST /orders'),
		qq{INSERT INTO shop_7.orders (idem_key) VALUES ('$key')},
		'SELECT ' . complete_call('shop_7', $key, 201));
	is($rc, 0, 'schema-based sharding, keys on the coordinator: a request commits');
	like($stderr, qr/PREPARE TRANSACTION/, '... in two phases');
	is(query(qq{SELECT count(*) FROM shop_7.orders WHERE idem_key = '$key'}), '1', '... with its order');
	is(outcome_of('shop_7', $key), 'replay', '... and replays');
}

# A database without the citus extension, on the same server: Citus
# coordinates no transaction there, and nothing is refused.
$coordinator->safe_psql('postgres', 'CREATE DATABASE without_citus');
$coordinator->safe_psql('without_citus', 'CREATE EXTENSION idempotency');
is(run_request($coordinator, 'without_citus', 'ten1', 'k', 'POST /orders', 201),
	"claimed 1\nt", 'a database without Citus: a request claims and completes');
is($coordinator->safe_psql('without_citus', 'SELECT outcome FROM ' . begin_call('ten1', 'k', 'POST /orders')),
	'replay', '... and replays');

# The one-round-trip handler of doc/citus.md (tested: citus_handler.sql): one
# delegated call runs the whole request on the node of the tenant's shard.
# Its function is created here, before the keys are distributed: a call then
# runs on a worker, whose own idempotency.keys must not be used -- a key
# completed through the coordinator would be claimed again there.  Its example
# call runs once the keys are distributed, below.
my ($citus_handler) = slurp_file('doc/citus.md') =~ /<!-- tested: citus_handler.sql -->\n```sql\n(.*?)```/s;
my ($create_handler, $documented_call) = $citus_handler =~ /\A(.*;)\n(SELECT [^\n]*place_order\([^\n]*;)/s;
ok(defined $documented_call, 'doc/citus.md has the handler and its call');
query($create_handler);

{
	my ($sqlstate, $stderr) = sql_error($coordinator, $db,
		q{SELECT outcome FROM place_order('ten1', 'local-post_commit', 'book')});
	is($sqlstate, '55000', 'keys not distributed: a call delegated to a worker is refused');
	like($stderr, qr/idempotency.keys is not distributed, and this node is a Citus worker/,
		'... saying why');
	is(order_count('ten1', 'local-post_commit'), $without_exports ? '0' : '1',
		'... and the completed request is not run again');
	($sqlstate) = sql_error($workers[0], $db,
		q{SELECT outcome FROM idempotency_begin('ten1', 'on-worker', request_hash('x'::text))});
	is($sqlstate, '55000', '... nor is a call made on a worker directly');
	is(join(',', map { $_->safe_psql($db, 'SELECT count(*) FROM ONLY idempotency.keys') } @workers),
		'0,0', 'no worker wrote a key of its own');
}

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
	# (Through Citus's routine, PostgreSQL 15: local-pre_commit,
	# -post_commit and -routine; else through idempotency.two_phase:
	# reference-pre_commit, -post_commit and -savepoint; and schema-sharded.)
	my $stored = 4;
	is(query(q{SELECT count(*) FROM idempotency.keys
	            WHERE key LIKE 'local-%' OR key LIKE 'reference-%' OR key = 'schema-sharded'}),
		$stored, 'the coordinator\'s keys moved into the shards');
	is(query(q{SELECT count(*) FROM ONLY idempotency.keys}), $stored,
		'... and are read through Citus');
	is(query(q{SELECT colocationid = (SELECT colocationid FROM pg_dist_partition
	                                   WHERE logicalrelid = 'orders'::regclass)
	             FROM pg_dist_partition WHERE logicalrelid = 'idempotency.keys'::regclass}),
		't', 'idempotency.keys is co-located with orders');
	is(outcome_of('ten1', $without_exports ? 'reference-post_commit' : 'local-post_commit'), 'replay',
		'a key completed before distribution replays after it');
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
	if ($without_exports)
	{
		# A call in a shape Citus does not delegate runs on the coordinator,
		# which does not hold the scope's shard, and cannot be forwarded to
		# the shard's node: IK005, saying why, and nothing written.
		for my $call (
			q{SELECT (idempotency_begin('ten1', 'field', request_hash('x'::text))).outcome},
			q{SELECT status FROM idempotency_lookup('ten1', 'local-pre') WHERE status IS NOT NULL})
		{
			my ($sqlstate, $stderr) = sql_error($coordinator, $db, $call);
			is($sqlstate, 'IK005', "not forwarded: $call");
			like($stderr, qr/which the loaded Citus library does not export/, '... saying why');
		}
		is(query(q{SELECT count(*) FROM idempotency.keys WHERE key = 'field'}), '0',
			'... and nothing was written');
	}
	else
	{
		# A call in a shape Citus does not delegate runs on the coordinator,
		# which does not hold the scope's shard: the call is forwarded to the
		# shard's node, in the caller's transaction.
		my $key_count = sub {
			my ($key) = @_;
			return query(sprintf(q{SELECT count(*) FROM idempotency.keys WHERE scope = 'ten1' AND key = %s},
					quote($key)));
		};
		my ($sqlstate, $stderr) = sql_error($coordinator, $db,
			q{SELECT (idempotency_begin('ten1', 'field', request_hash('x'::text))).outcome});
		is($sqlstate, 'IK004',
			'forwarded: a claim outside a transaction block is refused at commit, as here (IK004)');
		is($key_count->('field'), '0', '... and rolled back on the node of the shard');
		# With a write on the coordinator between them: the worker's part must
		# be prepared before the coordinator commits, else a crash between the
		# two commits keeps one without the other.
		my ($ret, $stdout);
		($ret, $stdout, $stderr) = $coordinator->psql(
			$db,
			sprintf(
				q{SET citus.log_remote_commands = on;
				  SET client_min_messages = log;
				  BEGIN;
				  SELECT (%s).outcome;
				  INSERT INTO hold VALUES (2);
				  SELECT done FROM %s AS done WHERE done IS NOT NULL;
				  COMMIT},
				begin_call('ten1', 'forwarded', 'POST /orders'),
				complete_call('ten1', 'forwarded', 201)));
		is("$ret|$stdout", "0|claimed\nt",
			'forwarded: a claim and its completion in shapes Citus does not delegate')
		  or diag($stderr);
		like($stderr, qr/PREPARE TRANSACTION/,
			'forwarded: ... commit with two-phase commit, the shard\'s node prepared');
		is(query('SELECT outcome FROM ' . begin_call('ten1', 'forwarded', 'POST /orders')),
			'replay', 'forwarded: ... and the key replays through a delegated call');
		is(query(sprintf(q{SELECT (%s).outcome}, begin_call('ten1', 'forwarded', 'POST /orders'))),
			'replay', 'forwarded: a replay');
		# Reads, through the coordinator in shapes Citus does not delegate and
		# from a client of the worker without the shard.
		my ($elsewhere) = grep { $_->port != worker_of('ten1')->port } @workers;
		my $lookup = q{SELECT status, attempt FROM idempotency_lookup('ten1', 'forwarded')
		                WHERE status IS NOT NULL};
		my $listing = q{SELECT string_agg(key, ',' ORDER BY key) FROM idempotency_keys('ten1')
		                 WHERE key LIKE 'forwarded%'};
		is(query($lookup), 'completed|1', 'forwarded: a lookup');
		is($elsewhere->safe_psql($db, $lookup), 'completed|1', '... also from the other worker');
		is(query(q{SELECT count(*) FROM idempotency_lookup('ten1', 'never-seen') WHERE true}), '0',
			'forwarded: a lookup of an absent key gives no row');
		is(query($listing), 'forwarded', 'forwarded: a key listing');
		is($elsewhere->safe_psql($db, $listing), 'forwarded', '... also from the other worker');
		($sqlstate) = sql_error($coordinator, $db,
			sprintf(q{SELECT done FROM %s AS done WHERE done IS NOT NULL},
				complete_call('ten1', 'never-claimed', 201)));
		is($sqlstate, 'IK001', 'forwarded: the error of the call on the node, with its SQLSTATE');
		query(sprintf(q{BEGIN; SELECT (%s).outcome; ROLLBACK},
				begin_call('ten1', 'forwarded-rollback', 'POST /orders')));
		is($key_count->('forwarded-rollback'), '0', 'forwarded: a claim rolls back with its transaction');
		is( query(
				sprintf(
					q{BEGIN;
					  SAVEPOINT s;
					  SELECT (%1$s).outcome;
					  ROLLBACK TO SAVEPOINT s;
					  SELECT (%1$s).attempt;
					  COMMIT;
					  SELECT status, attempt FROM idempotency_lookup('ten1', 'forwarded-savepoint')},
					begin_call('ten1', 'forwarded-savepoint', 'POST /orders'))),
			"claimed\n1\nin_progress|1",
			'forwarded: a claim rolled back to a savepoint is gone, and claimed again');
		# A client of the worker that does not hold the shard.
		is( $elsewhere->safe_psql(
				$db,
				sprintf(q{BEGIN; SELECT outcome FROM %s; %s; SELECT %s; COMMIT},
					begin_call('ten1', 'from-worker', 'POST /orders'),
					order_sql('ten1', 'from-worker'),
					complete_call('ten1', 'from-worker', 201))),
			"claimed\nt",
			'forwarded: a request on the worker without the shard');
		is(query('SELECT outcome FROM ' . begin_call('ten1', 'from-worker', 'POST /orders')),
			'replay', '... replays through the coordinator');
		is(order_count('ten1', 'from-worker'), '1', '... with its order');
		# A distributed function that handles a request of another tenant's
		# scope: Citus runs it on the node of its own tenant, which forwards the
		# calls.  Citus lets no query run on another node in a call it
		# force-delegates inside a transaction block: IK005 there.
		my ($foreign) =
		  grep { worker_of($_)->port != worker_of('ten1')->port } map { "ten$_" } 2 .. 20;
		for my $forced ('false', 'true')
		{
			query(sprintf(
					q{CREATE FUNCTION handle_for_%1$s(p_tenant text, p_scope text, p_key text)
					  RETURNS text LANGUAGE plpgsql AS $$
					  DECLARE
					      answer idempotency_begin_result;
					  BEGIN
					      answer := idempotency_begin(p_scope, p_key, request_hash('x'::text));
					      IF answer.outcome = 'claimed' THEN
					          PERFORM idempotency_complete(p_scope, p_key, 201, NULL);
					      END IF;
					      RETURN answer.outcome;
					  END $$;
					  SELECT create_distributed_function('handle_for_%1$s(text, text, text)', 'p_tenant',
					             colocate_with => 'orders', force_delegation => %1$s)},
					$forced));
		}
		my $handle_for = sprintf(q{SELECT handle_for_false('ten1', %s, 'nested')}, quote($foreign));
		is(query($handle_for), 'claimed', 'forwarded: from a distributed function on another node');
		is(query($handle_for), 'replay', '... which replays');
		is(query(sprintf(q{SELECT status FROM idempotency_lookup(%s, 'nested')}, quote($foreign))),
			'completed', '... with the key completed on the node of its shard');
		($sqlstate, $stderr) = sql_error($coordinator, $db,
			sprintf(q{BEGIN; SELECT handle_for_true('ten1', %s, 'nested-in-block'); COMMIT},
				quote($foreign)));
		is($sqlstate, 'IK005',
			'a scope of another node in a force-delegated call in a transaction block: IK005');

	}

	# A NULL scope, which Citus's delegation would hash without a NULL check:
	# 22004 from the extension before Citus plans the call, whatever shape
	# the NULL comes in.  The same for the tenant of a handler that Citus
	# distributes with the keys (the documented one, a force-delegated one,
	# and a procedure), which crashed the coordinator before.
	query(q{CREATE PROCEDURE record_order(p_key text, p_tenant text)
	            LANGUAGE plpgsql AS $$
	        BEGIN
	            INSERT INTO orders (tenant, idem_key, item) VALUES (p_tenant, p_key, 'book');
	        END $$;
	        SELECT create_distributed_function('record_order(text, text)', 'p_tenant',
	                                           colocate_with => 'orders');
	        CREATE FUNCTION place_order_in_block(p_tenant text, p_key text)
	            RETURNS text LANGUAGE sql AS $$ SELECT 'never'::text $$;
	        SELECT create_distributed_function('place_order_in_block(text, text)', 'p_tenant',
	                                           colocate_with => 'orders', force_delegation => true)});
	# (A crash restart keeps the postmaster, its PID and its start time: its
	# log tells.)
	my $log_offset = -s $coordinator->logfile;
	for my $call (
		q{SELECT * FROM idempotency_begin(NULL, 'k', request_hash('x'::text))},
		q{SELECT idempotency_begin(NULL::text, 'k', request_hash('x'::text))},
		q{SELECT * FROM idempotency_lookup(nullif('a', 'a'), 'k')},
		q{PREPARE null_scope(text) AS SELECT * FROM idempotency_complete($1, 'k', 200);
		  EXECUTE null_scope(NULL)},
		q{BEGIN; SELECT * FROM idempotency_begin(NULL, 'k', request_hash('x'::text))},
		q{SELECT * FROM idempotency_begin(key => 'k', scope => NULL, request => request_hash('x'::text))})
	{
		my ($null_state) = sql_error($coordinator, $db, $call);
		is($null_state, '22004', "a NULL scope is refused: $call");
	}
	for my $call (
		q{SELECT outcome FROM place_order(NULL, 'null-tenant', 'book')},
		q{SELECT place_order(NULL::text, 'null-tenant', 'book')},
		q{SELECT * FROM place_order(p_key => 'null-tenant', p_item => 'book', p_tenant => NULL)},
		q{PREPARE null_tenant(text) AS SELECT outcome FROM place_order($1, 'null-tenant', 'book');
		  EXECUTE null_tenant(NULL)},
		q{BEGIN; SELECT place_order_in_block(NULL, 'null-tenant')},
		q{CALL record_order('null-tenant', NULL)})
	{
		my ($null_state, $stderr) = sql_error($coordinator, $db, $call);
		is($null_state, '22004', "a handler's NULL tenant is refused: $call");
		like($stderr, qr/p_tenant must not be null/, '... naming the argument');
	}
	is(crash_restarts($coordinator, $log_offset), '', 'the coordinator never restarted');
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

# Many clients, few keys, through pgbench.
my $pgbench_script = PostgreSQL::Test::Utils::tempdir() . '/place_order.sql';
PostgreSQL::Test::Utils::append_to_file($pgbench_script,
	qq{\\set tenant random(1, 8)\n\\set key random(1, :keys)\n}
	  . qq{SELECT outcome FROM place_order('t' || :tenant, 'k' || :key, 'book');\n});

sub start_pgbench
{
	my ($clients, $transactions, $keys, $log) = @_;
	my @command = (
		'pgbench', '-n', '-c', $clients, '-j', $clients, '-t', $transactions,
		'-D', "keys=$keys", '-f', $pgbench_script,
		'-h', $coordinator->host, '-p', $coordinator->port, $db);
	return IPC::Run::start(\@command, '>', \$log->{out}, '2>', \$log->{err});
}

sub check_orders_match_keys
{
	my ($what) = @_;
	is(query(q{SELECT count(*) FROM (SELECT FROM orders GROUP BY tenant, idem_key
	                                   HAVING count(*) > 1) AS twice}),
		'0', "$what: no order was placed twice");
	is(query(q{SELECT count(*) FROM orders WHERE tenant LIKE 't_'}),
		query(q{SELECT count(*) FROM idempotency.keys WHERE scope LIKE 't_' AND status = 'c'}),
		"$what: orders = completed keys");
	return;
}

{
	my %log;
	my $run = start_pgbench(4, 100, 10, \%log);
	ok($run->finish, 'same-key load: pgbench succeeded') or diag($log{err});
	like($log{out}, qr/number of transactions actually processed: 400\b/,
		'same-key load: every request was answered');
	check_orders_match_keys('same-key load');
}

# ---------------------------------------------------------------------------
# Coordinator crashes with distributed keys: the claim and the order are on
# one worker and commit there together.
# ---------------------------------------------------------------------------
for my $point (qw(pre_commit post_commit))
{
	crash_at_commit_point($point, 'ten3', "dist-$point");
	retry_once($point, 'ten3', "dist-$point", 'replay');
}

query(q{CREATE TABLE local_orders (tenant text, idem_key text)});

# The calls delegated, and the order in a table of the coordinator, which
# Citus does not count: it would commit the worker's part (the completed
# claim) with a one-phase COMMIT before the coordinator's commit, and a crash
# between the two would lose the order while a retry replays.  The
# coordinator asks Citus for two-phase commit at the commit of such a
# transaction: by its routine (PostgreSQL 15), else through
# idempotency.two_phase, a reference table since the tests above.
crash_and_retry('ten3', 'delegated-local', local_order => 1);
# The same through a handler that Citus delegates in a transaction block
# (force_delegation), whose claim the coordinator does not see: a call of a
# function Citus distributes counts as a delegated write.
query(q{CREATE FUNCTION place_order_forced(p_tenant text, p_key text, p_item text)
            RETURNS idempotency_begin_result LANGUAGE plpgsql AS $$
        DECLARE
            answer idempotency_begin_result;
        BEGIN
            answer := idempotency_begin(p_tenant, p_key, request_hash(p_item));
            IF answer.outcome = 'claimed' THEN
                INSERT INTO orders (tenant, idem_key, item) VALUES (p_tenant, p_key, p_item);
                PERFORM idempotency_complete(p_tenant, p_key, 201);
            END IF;
            RETURN answer;
        END $$;
        SELECT create_distributed_function('place_order_forced(text, text, text)', 'p_tenant',
                                           colocate_with => 'orders', force_delegation => true)});
crash_and_retry('ten3', 'handler-local', handler => 1);

# Without a write on the coordinator, the worker commits alone, in one phase.
# (The order's id is given: a nextval that logs its sequence is a write on
# the coordinator too.)
{
	my @statements = request_statements('ten3', 'one-phase');
	$statements[1] = q{INSERT INTO orders (tenant, id, idem_key, item) VALUES ('ten3', -1, 'one-phase', 'book')};
	my ($ret, $stdout, $stderr) = commit_logged(@statements);
	is("$ret|$stdout", "0|claimed\nt", 'a request with its order distributed');
	unlike($stderr, qr/PREPARE TRANSACTION/, '... commits without two-phase commit');
}

# The same with the calls forwarded to the shard's node and the order in a
# table of the coordinator: the claim on the worker and the order on the
# coordinator commit with two-phase commit.
crash_and_retry('ten3', 'forwarded', forwarded => 1) unless $without_exports;

# ---------------------------------------------------------------------------
# A shard move under load
# ---------------------------------------------------------------------------
{
	my %log;
	my $before = query(q{SELECT count(*) FROM orders});
	my $run = start_pgbench(4, 400, 100000, \%log);
	$coordinator->poll_query_until($db, "SELECT count(*) >= $before + 50 FROM orders")
	  or die 'no load';
	my ($shard, $from) = split /\|/, query(
		q{SELECT shardid, nodeport FROM pg_dist_shard_placement
		   WHERE shardid = get_shard_id_for_distribution_column('orders', 't1')});
	my ($source) = grep { $_->port == $from } @workers;
	my ($target) = grep { $_->port != $from } @workers;
	# In Citus's default mode (auto: by logical replication, which it
	# refuses when a co-located table, the routing table say, has no
	# replica identity).
	query(sprintf(
			q{SELECT citus_move_shard_placement(%d, %s, %d, %s, %d)},
			$shard, quote($source->host), $source->port, quote($target->host), $target->port));
	$run->finish;
	my $aborted = () = $log{err} =~ /aborted/g;
	my ($processed) = $log{out} =~ /number of transactions actually processed: (\d+)/;
	note("pgbench during the move: $processed requests, $aborted clients aborted; "
		  . query(q{SELECT count(*) FROM orders}) . ' orders');
	like($log{out}, qr/number of transactions actually processed: [1-9]/,
		'move: pgbench ran requests') or diag($log{err});
	unlike($log{err}, qr/ERROR/, 'move: no error (a call that reached the old node is forwarded)');
	is(query(sprintf(q{SELECT nodeport FROM pg_dist_shard_placement
	                    WHERE shardid = get_shard_id_for_distribution_column('idempotency.keys', 't1')})),
		$target->port, 'move: the keys of t1 moved with its orders');
	check_orders_match_keys('move');
	is(run_request($coordinator, $db, 't1', 'after-move', 'POST /orders', 201,
			write => order_sql('t1', 'after-move')),
		"claimed 1\nt", 'move: a request after the move claims on the new node');
}

# ---------------------------------------------------------------------------
# A claim's transaction keeps a move from switching over; calls that write
# wait for the move and then go to the new node, reads never wait
# ---------------------------------------------------------------------------
{
	is(run_request($coordinator, $db, 'ten5', 'done', 'POST /orders', 201, write => order_sql('ten5', 'done')),
		"claimed 1\nt", 'lock: a request completes before the move');
	is(run_request($coordinator, $db, 'ten5', 'vanishing', 'POST /orders', 201),
		"claimed 1\nt", 'lock: another request completes before the move');
	# A caller that may not read the keys (the coordinator reads a key
	# through Citus as their owner, to tell a replay, which must not wait).
	query(q{CREATE ROLE replayer LOGIN;
	        GRANT EXECUTE ON FUNCTION idempotency_begin TO replayer});
	my $session = $coordinator->background_psql($db);
	$session->query_safe('BEGIN');
	is($session->query_safe('SELECT outcome FROM ' . begin_call('ten5', 'held', 'POST /orders')),
		'claimed', 'lock: a request claims and keeps its transaction open');
	my $source = worker_of('ten5');
	my ($target) = grep { $_ != $source } @workers;
	my $shard = query(q{SELECT get_shard_id_for_distribution_column('orders', 'ten5')});
	my %log;
	my $move = IPC::Run::start(
		[
			'psql', '-XAtq', '-d', $coordinator->connstr($db), '-c',
			sprintf(q{SELECT citus_move_shard_placement(%d, %s, %d, %s, %d, 'block_writes')},
				$shard, quote($source->host), $source->port, quote($target->host), $target->port)
		],
		'>', \$log{out}, '2>', \$log{err});
	# The claim holds the shard's metadata lock where Citus planned its
	# delegation, as Citus's own writes hold it: the move waits there.
	my $move_waits = q{SELECT count(*) > 0 FROM pg_locks
	                    WHERE locktype = 'advisory' AND objsubid = 8 AND mode = '%s'
	                      AND NOT granted};
	ok($coordinator->poll_query_until($db, sprintf($move_waits, 'ExclusiveLock')),
		'lock: the move waits on the coordinator for the shard metadata lock the claim holds');
	# Reads take no shard metadata lock: a replay, a mismatch and a lookup
	# answer while the move waits for that lock, through the coordinator and
	# on the shard's node (before, they queued behind the move: lock_timeout
	# turns that into a failure here instead of a hang).
	for my $node ($coordinator, $source)
	{
		my $where = $node == $coordinator ? 'the coordinator' : 'the node';
		my $read = sub {
			return $node->safe_psql($db, "SET lock_timeout = '60s'; " . shift);
		};
		is($read->('SELECT outcome FROM ' . begin_call('ten5', 'done', 'POST /orders')),
			'replay', "lock: a replay answers while the move waits, on $where");
		is($read->('SELECT outcome FROM ' . begin_call('ten5', 'done', 'PUT /orders')),
			'mismatch', "lock: so does a mismatch, on $where");
		is($read->(q{SELECT status FROM idempotency_lookup('ten5', 'done')}),
			'completed', "lock: and a lookup, on $where");
	}
	is( $coordinator->safe_psql(
			$db, "SET lock_timeout = '60s'; SELECT outcome FROM " . begin_call('ten5', 'done', 'POST /orders'),
			extra_params => [ '-U', 'replayer' ]),
		'replay', 'lock: ... also for a role that may not read the keys');
	unless ($without_exports)
	{
		# Nor does a replay forwarded to the shard's node (a shape Citus does not
		# delegate, through the coordinator or from the worker without the
		# shard): while the lock is not free, a completed key is forwarded
		# without it.
		for my $node ($coordinator, $target)
		{
			my $where = $node == $coordinator ? 'the coordinator' : 'the other worker';
			my $forwarded = sub {
				return $node->safe_psql($db,
					sprintf(q{SET lock_timeout = '60s'; SELECT (%s).outcome}, begin_call('ten5', 'done', shift)));
			};
			is($forwarded->('POST /orders'), 'replay', "lock: a forwarded replay answers while the move waits, from $where");
			is($forwarded->('PUT /orders'), 'mismatch', "lock: so does a forwarded mismatch, from $where");
		}
		# Should the key vanish between the check that it is completed and the
		# call on the shard's node, the begin there claims it, outside two-phase
		# commit: IK005, and the claim rolls back.  The forwarded call is held
		# between the two (idempotency.inject_fault) while the key's row is
		# deleted from its shard.
		my $pause = $coordinator->background_psql($db);
		$pause->query_safe('SELECT pg_advisory_lock(18760)');
		my %paused;
		my $paused = IPC::Run::start(
			[
				'psql', '-XAtq', '-v', 'VERBOSITY=verbose', '-d', $coordinator->connstr($db), '-c',
				sprintf(q{SET idempotency.inject_fault = 'pause_before_forwarded_replay';
				          SET lock_timeout = '60s'; SELECT (%s).outcome},
					begin_call('ten5', 'vanishing', 'POST /orders'))
			],
			'>', \$paused{out}, '2>', \$paused{err});
		ok( $coordinator->poll_query_until(
				$db, q{SELECT count(*) > 0 FROM pg_locks
				        WHERE locktype = 'advisory' AND objid = 18760 AND NOT granted}),
			'lock: a forwarded replay is held after its check that the key is completed');
		my $key_shard = query(q{SELECT shard_name('idempotency.keys',
		                                          get_shard_id_for_distribution_column('idempotency.keys', 'ten5'))});
		is( $source->safe_psql(
				$db, qq{SET citus.enable_manual_changes_to_shards = on;
				        DELETE FROM $key_shard WHERE scope = 'ten5' AND key = 'vanishing' RETURNING status}),
			'c', 'lock: ... and its key is deleted from the shard meanwhile');
		$pause->query_safe('SELECT pg_advisory_unlock(18760)');
		$pause->quit;
		ok(!$paused->finish, 'lock: ... then the forwarded begin fails');
		like($paused{err}, qr/IK005: the idempotency key changed while its shard was being moved/,
			'lock: ... with IK005') or diag($paused{out});
		is(query(q{SELECT count(*) FROM idempotency.keys WHERE scope = 'ten5' AND key = 'vanishing'}),
			'0', 'lock: ... and the claim it made on the shard\'s node is rolled back');
	}
	# A new request waits for the move, as a plain distributed write does,
	# and then claims on the new node -- not IK005.
	my %waiting;
	my $new_request = IPC::Run::start(
		[
			'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $coordinator->connstr($db), '-c',
			sprintf(q{SET lock_timeout = '120s';
			          BEGIN;
			          SELECT outcome || ' ' || attempt FROM %s;
			          %s;
			          SELECT %s;
			          COMMIT},
				begin_call('ten5', 'during-move', 'POST /orders'), order_sql('ten5', 'during-move'),
				complete_call('ten5', 'during-move', 201))
		],
		'>', \$waiting{out}, '2>', \$waiting{err});
	ok($coordinator->poll_query_until($db, sprintf($move_waits, 'ShareLock')),
		'lock: a new request waits for the move');
	# The claim's transaction writes through the coordinator while the move
	# waits: it holds the lock already, so it does not queue behind the move
	# (which would wait for it: a distributed deadlock).
	$session->query_safe("SET LOCAL lock_timeout = '60s'");
	$session->query_safe(order_sql('ten5', 'held'));
	$session->query_safe('SELECT ' . complete_call('ten5', 'held', 201));
	$session->query_safe('COMMIT');
	$session->quit;
	ok($move->finish, 'lock: the move finishes after the commit') or diag($log{err});
	is(worker_of('ten5')->port, $target->port, 'lock: ten5 is on the other worker now');
	ok($new_request->finish, 'lock: the request that waited succeeds') or diag($waiting{err});
	chomp $waiting{out};
	is($waiting{out}, "claimed 1\nt", 'lock: ... claimed after the move, and completed');
	is(query(q{SELECT count(*) FROM idempotency.keys WHERE scope = 'ten5' AND key = 'during-move'
	           AND status = 'c'}), '1', 'lock: ... its key is on the new node');
	is(order_count('ten5', 'during-move'), '1', 'lock: ... with its order');
	is(outcome_of('ten5', 'held'), 'replay', 'lock: the key moved with its completion');
	is(order_count('ten5', 'held'), '1', 'lock: ... and its order');
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

# ---------------------------------------------------------------------------
# A non-superuser caller: EXECUTE on the functions, nothing on the storage
# ---------------------------------------------------------------------------
{
	query(
		q{CREATE ROLE app LOGIN;
		  GRANT EXECUTE ON FUNCTION idempotency_begin, idempotency_complete,
		                            idempotency_lookup, place_order TO app;
		  GRANT SELECT, INSERT ON orders TO app;
		  GRANT USAGE ON SEQUENCE orders_id_seq TO app});
	my $as_app = sub {
		return $coordinator->safe_psql($db, shift, extra_params => [ '-U', 'app' ]);
	};
	is($as_app->(q{SELECT outcome FROM place_order('ten4', 'app-1', 'pen')}),
		'claimed', 'app: the one-round-trip handler claims');
	is($as_app->(q{SELECT outcome FROM place_order('ten4', 'app-1', 'pen')}),
		'replay', 'app: and replays');
	is( $as_app->(
			q{BEGIN;
			  SELECT outcome FROM idempotency_begin('ten4', 'app-2', request_hash('x'::text));
			  INSERT INTO orders (tenant, idem_key, item) VALUES ('ten4', 'app-2', 'pen');
			  SELECT idempotency_complete('ten4', 'app-2', 201);
			  COMMIT;
			  SELECT status FROM idempotency_lookup('ten4', 'app-2')}),
		"claimed\nt\ncompleted", 'app: a request in a transaction block, and its lookup');
	my ($ret, $out, $err) = $coordinator->psql($db, 'SELECT count(*) FROM idempotency.keys',
		extra_params => [ '-U', 'app' ]);
	like($err, qr/permission denied/, 'app: no access to the storage itself');
	is(order_count('ten4', 'app-2'), '1', 'app: one order');
	unless ($without_exports)
	{
		# Forwarding runs as the caller (Citus ties a transaction's writes on a
		# tenant's shards to one role's connection), through the routing table,
		# which the DBA grants: before, IK005 naming the grants, and nothing
		# written; after, forwarded.
		my $undelegated = q{BEGIN;
			  SELECT (idempotency_begin('ten4', '%1$s', request_hash('x'::text))).outcome;
			  INSERT INTO orders (tenant, idem_key, item) VALUES ('ten4', '%1$s', 'pen');
			  SELECT idempotency_complete('ten4', '%1$s', 201);
			  COMMIT;
			  SELECT (idempotency_begin('ten4', '%1$s', request_hash('x'::text))).outcome};
		($ret, $out, $err) = $coordinator->psql($db, "\\set VERBOSITY verbose\n" . sprintf($undelegated, 'app-3'),
			extra_params => [ '-U', 'app' ]);
		like($err, qr/IK005.*\n.*as the calling role, which may not use it: GRANT SELECT, UPDATE ON idempotency.route TO app/,
			'app: a call not delegated is not forwarded without the grants on the routing table (IK005)');
		is(order_count('ten4', 'app-3'), '0', 'app: ... and nothing was written');
		query(q{GRANT SELECT, UPDATE ON idempotency.route TO app});
		is($as_app->(sprintf($undelegated, 'app-4')), "claimed\nt\nreplay",
			'app: with them, a call not delegated is forwarded for the application role');
		is(order_count('ten4', 'app-4'), '1', 'app: ... one order');
		($ret, $out, $err) = $coordinator->psql($db, 'SELECT count(*) FROM idempotency.keys',
			extra_params => [ '-U', 'app' ]);
		like($err, qr/permission denied for table keys/, 'app: ... and still no access to the keys');
		# Without UPDATE on it, a write is not forwarded; a read is.
		query(q{REVOKE UPDATE ON idempotency.route FROM app});
		($ret, $out, $err) = $coordinator->psql($db, "\\set VERBOSITY verbose\n" . sprintf($undelegated, 'app-5'),
			extra_params => [ '-U', 'app' ]);
		like($err, qr/IK005/, 'app: without UPDATE on the routing table, a write is not forwarded (IK005)');
		is(order_count('ten4', 'app-5'), '0', 'app: ... and nothing was written');
		is($as_app->(q{SELECT status FROM idempotency_lookup('ten4', 'app-4') WHERE status IS NOT NULL}),
			'completed', 'app: ... while a read still is');
		query(q{GRANT UPDATE ON idempotency.route TO app});
	}
}

# ---------------------------------------------------------------------------
# A tenant isolated to a shard of its own, and a background rebalance
# ---------------------------------------------------------------------------
{
	is(run_request($coordinator, $db, 'ten6', 'before-isolate', 'POST /orders', 201,
			write => order_sql('ten6', 'before-isolate')),
		"claimed 1\nt", 'isolate: a request');
	query(q{SELECT isolate_tenant_to_new_shard('orders', 'ten6', cascade_option => 'CASCADE',
	                                          shard_transfer_mode => 'block_writes')});
	is( query(
			q{SELECT count(DISTINCT get_shard_id_for_distribution_column(t, 'ten6'))
			    FROM unnest(ARRAY['orders', 'idempotency.keys', 'idempotency.route']::regclass[]) AS t
			   WHERE (SELECT count(*) FROM pg_dist_shard
			           WHERE shardid = get_shard_id_for_distribution_column(t, 'ten6')
			             AND shardminvalue = shardmaxvalue) = 1}),
		'3', 'isolate: the keys and the routing table have a shard of the tenant alone too');
	is(outcome_of('ten6', 'before-isolate'), 'replay', 'isolate: the key replays');
	query(q{SELECT citus_rebalance_start(); SELECT citus_rebalance_wait()});
	is(outcome_of('ten6', 'before-isolate'), 'replay', 'rebalance: the key replays');
	is(run_request($coordinator, $db, 'ten6', 'after-rebalance', 'POST /orders', 201,
			write => order_sql('ten6', 'after-rebalance')),
		"claimed 1\nt", 'rebalance: a request');
	is(order_count('ten6', 'after-rebalance'), '1', 'rebalance: ... one order');
	is( query(sprintf(q{SELECT (%s).outcome}, begin_call('ten6', 'after-rebalance', 'POST /orders'))),
		'replay', 'rebalance: ... which replays when forwarded')
	  unless $without_exports;
}

# ---------------------------------------------------------------------------
# A worker lost mid-call: Citus's error on the coordinator is logged without
# the statement, which holds the request (a call Citus delegates, of the API
# or of a handler distributed with the keys)
# ---------------------------------------------------------------------------
{
	query(q{CREATE FUNCTION held_order(p_tenant text, p_key text, p_item text)
	            RETURNS text LANGUAGE plpgsql AS $$
	        BEGIN
	            PERFORM pg_advisory_xact_lock(4242);
	            RETURN (idempotency_begin(p_tenant, p_key, request_hash(p_item))).outcome;
	        END $$;
	        SELECT create_distributed_function('held_order(text, text, text)', 'p_tenant',
	                                           colocate_with => 'orders')});
	my $worker = worker_of('ten7');
	# The handler waits for an advisory lock on the worker, the API's begin
	# for a claim that a transaction through the coordinator holds there.
	my $holder = $worker->background_psql($db);
	$holder->query_safe('SELECT pg_advisory_lock(4242)');
	my $claimer = $coordinator->background_psql($db);
	$claimer->query_safe('BEGIN');
	is($claimer->query_safe('SELECT outcome FROM ' . begin_call('ten7', 'held-api', 'POST /orders')),
		'claimed', 'worker lost: a claim is held on the worker');
	my $marker = 'body-marker-' . int(rand(1_000_000_000));
	my $log_offset = -s $coordinator->logfile;
	# Each call is its psql's last -c; the ones before it go first, each a
	# statement of its own.  The third and fourth are an EXECUTE of a
	# prepared statement, which names no function of the extension but
	# carries the body: of the API's call, and of the handler's.
	my @calls = (
		[ sprintf(q{SELECT held_order('ten7', 'held-handler', %s)}, quote($marker)) ],
		[
			sprintf(q{SELECT outcome FROM idempotency_begin('ten7', 'held-api', request_hash('POST /orders'::text),
			                                                wait => '10 minutes',
			                                                claim_data => jsonb_build_object('body', %s::text))},
				quote($marker))
		],
		[
			q{PREPARE held_begin(text, jsonb) AS
			    SELECT outcome FROM idempotency_begin($1, 'held-api', request_hash('POST /orders'::text),
			                                          wait => '10 minutes', claim_data => $2)},
			sprintf(q{EXECUTE held_begin('ten7', '{"body": "%s"}')}, $marker)
		],
		[
			q{PREPARE held_handler(text, text, text) AS SELECT held_order($1, $2, $3)},
			sprintf(q{EXECUTE held_handler('ten7', 'held-handler-prepared', %s)}, quote($marker))
		]);
	# (Cluster.pm logs every statement; a server that does not is what the
	# check below is about.)
	my (%out, @runs);
	for my $i (0 .. $#calls)
	{
		push @runs, IPC::Run::start(
			[
				'psql', '-XAtq', '-d', $coordinator->connstr($db),
				'-c', 'SET log_statement = none', map { ('-c', $_) } @{ $calls[$i] }
			],
			'>', \$out{"out$i"}, '2>', \$out{"err$i"});
	}
	ok( $worker->poll_query_until(
			$db, sprintf(q{SELECT count(*) = %d FROM pg_stat_activity
			        WHERE state = 'active' AND wait_event IS NOT NULL AND query LIKE '%%held-%%'
			          AND pid <> pg_backend_pid()}, scalar @calls)),
		'worker lost: every call waits on the worker');
	$worker->stop('immediate');
	ok(!$_->finish, 'worker lost: the call fails') for @runs;
	eval { $_->quit } for $claimer, $holder;
	my $log = slurp_file($coordinator->logfile, $log_offset);
	like($out{"err$_"}, qr/ERROR: /, "worker lost: call $_ got an error") for 0 .. $#calls;
	cmp_ok(scalar(() = $log =~ /ERROR: /g), '>=', scalar(@calls), 'worker lost: the coordinator logged the errors')
	  or diag($log);
	unlike($log, qr/\Q$marker\E/, '... without the request in any line');
	$worker->start;
	is(outcome_of('ten7', 'held-handler'), 'claimed', 'worker lost: after its restart, the request runs');
}

# ---------------------------------------------------------------------------
# The error of a delegated call made through a prepared statement, which
# Citus relays from the worker (IK001): the coordinator logs the EXECUTE,
# which names no function of the extension but carries the body; the log
# gate finds the prepared statement's text and keeps the line out.
# ---------------------------------------------------------------------------
{
	my $marker = 'body-marker-' . int(rand(1_000_000_000));
	my $log_offset = -s $coordinator->logfile;
	my $session = $coordinator->background_psql($db, on_error_stop => 0);
	$session->query_safe('SET log_statement = none');
	$session->query_safe(q{PREPARE finish(text, text, jsonb) AS
	                         SELECT idempotency_complete($1, $2, 201, $3)});
	$session->query(sprintf(q{EXECUTE finish('ten8', 'never-claimed', '{"body": "%s"}')}, $marker));
	like($session->{stderr}, qr/"never-claimed" is not claimed|IK001/,
		'a prepared call whose delegated call fails: the error of the worker');
	$session->quit;
	my $log = slurp_file($coordinator->logfile, $log_offset);
	like($log, qr/ERROR: .*never-claimed/, 'a prepared call whose delegated call fails: the coordinator logs it')
	  or diag($log);
	unlike($log, qr/\Q$marker\E/, '... without the request in any line');
}

done_testing();
