# The cluster and the requests shared by the Citus scripts that test one
# behaviour each of the extension on Citus (test/t/064_citus_placement.pl to
# test/t/068_citus_crashes.pl; one script, test/t/060_citus.pl, before):
# each starts a cluster of its own with start_orders_cluster -- a coordinator
# and two workers on this machine, the extension on each, orders distributed
# by tenant in 4 shards, and a table for holding a commit -- and runs its
# requests through the helpers below, which act on that cluster.  Each script
# skips, visibly, when the citus library is not installed (its first line
# after the imports: plan skip_all => citus_missing(), which test/cassert
# looks for).
package CitusTest;

use strict;
use warnings;

use Exporter 'import';
use IdempotencyTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

our @EXPORT = qw(
  start_orders_cluster query create_documented_handler order_count order_sql worker_of
  wait_for_wait_event request_statements local_order_count orders_of crash_at_commit_point
  outcome_of retry_once crash_and_retry commit_logged start_pgbench check_orders_match_keys
);

my $db = 'postgres';
my ($coordinator, @workers);

# Starts the script's cluster and returns the coordinator and the workers:
# every node with restart_after_crash (crash tests), Citus's tenant
# statistics, a 200 ms expiry interval, and Citus's recovery of prepared
# transactions only when a test asks for it; the coordinator's commits can be
# held at the synchronous replication wait of a session that asks for it.
# The extension on every node (checked on a worker: one test), orders
# distributed, and hold, a plain table of the coordinator.  Notes why, where
# Citus exports only its SQL functions (citus_without_exports), the checks of
# keys on the coordinator and of forwarded calls are their refusals.
sub start_orders_cluster
{
	($coordinator, @workers) = start_citus_cluster(
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

	# From PostgreSQL 16, Citus's library exports only its SQL functions: not
	# its request for two-phase commit, which keys on the coordinator need,
	# nor its execution state, which forwarded calls need.  Those are refused
	# there (the scripts check the refusals); distributed keys and the calls
	# Citus delegates are tested as on 15, through Citus's SQL-level functions.
	my $without_exports = citus_without_exports();
	note($without_exports) if $without_exports;
	return ($coordinator, @workers);
}

sub query { return $coordinator->safe_psql($db, shift); }

# The one-round-trip handler of doc/citus.md (the block marked "tested:
# citus_handler.sql"; test/t/050 checks that this file runs it): creates its
# function, place_order, and returns the block's example call (undef if the
# block has none: test/t/064 checks it).  Created before the keys are
# distributed, a call runs on a worker, whose own idempotency.keys must not
# be used (test/t/066 checks the refusal).
sub create_documented_handler
{
	my ($citus_handler) = slurp_file('doc/citus.md') =~ /<!-- tested: citus_handler.sql -->\n```sql\n(.*?)```/s;
	my ($create_handler, $documented_call) = ($citus_handler // '') =~ /\A(.*;)\n(SELECT [^\n]*place_order\([^\n]*;)/s;
	query($create_handler) if defined $create_handler;
	return $documented_call;
}

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

# Many clients, few keys, through pgbench: $clients clients of $transactions
# calls each of the documented handler (create_documented_handler) for a
# tenant t1 to t8 and a key of $keys; output and errors into %$log.
my $pgbench_script;

sub start_pgbench
{
	my ($clients, $transactions, $keys, $log) = @_;
	unless (defined $pgbench_script)
	{
		$pgbench_script = PostgreSQL::Test::Utils::tempdir() . '/place_order.sql';
		PostgreSQL::Test::Utils::append_to_file($pgbench_script,
			qq{\\set tenant random(1, 8)\n\\set key random(1, :keys)\n}
			  . qq{SELECT outcome FROM place_order('t' || :tenant, 'k' || :key, 'book');\n});
	}
	my @command = (
		'pgbench', '-n', '-c', $clients, '-j', $clients, '-t', $transactions,
		'-D', "keys=$keys", '-f', $pgbench_script,
		'-h', $coordinator->host, '-p', $coordinator->port, $db);
	return IPC::Run::start(\@command, '>', \$log->{out}, '2>', \$log->{err});
}

# Every order of the pgbench tenants (t1 to t8) placed once, as many orders
# as completed keys: two checks, named by $what.
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

1;
