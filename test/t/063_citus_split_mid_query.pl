# Citus: a shard split that commits while Citus plans or starts a query the
# extension routes to the scope's shard without the shard's metadata lock.
# Such a query -- a begin's check that its key is completed (while a move
# holds or awaits the lock), a forwarded replay's call, a forwarded read --
# was planned for the shard the split then removed, and Citus failed it with
# an internal error, "could not find valid entry for shard ..." (XX000),
# which the client got (t/061's split under load saw it now and then).  Each
# case holds its query between Citus's planning and its run
# (idempotency.inject_fault = pause_in_lock_free_routing) while a split of
# the scope's shard commits, then lets it go on: the call answers as it
# would have without the split -- a replay, or the key's status -- by
# waiting for the lock and routing afresh (a begin) or routing afresh (a
# read), and no XX000 reaches a client or the log.  With a bigint tenant;
# the forwarded cases only where calls are forwarded (up to PostgreSQL 15).
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
my $without_exports = citus_without_exports();
note($without_exports) if $without_exports;

my $db = 'postgres';
my ($coordinator, @workers) = start_citus_cluster();
citus_database($db, $coordinator, @workers);

sub query { return $coordinator->safe_psql($db, shift); }

query(
	q{CREATE EXTENSION idempotency;
	  CREATE TABLE orders (tenant_id bigint NOT NULL, id bigserial,
	                       idem_key text NOT NULL, item text NOT NULL,
	                       PRIMARY KEY (tenant_id, id));
	  SELECT create_distributed_table('orders', 'tenant_id', shard_count => 4);
	  SELECT idempotency_distribute('orders');});
query(typed_tenant_handler_sql('bigint'));
my @node_ids = map {
	query(sprintf(q{SELECT nodeid FROM pg_dist_node WHERE nodeport = %d}, $_->port))
} @workers;
my $tenant = '4611686018427387000';

# The metadata lock of the tenant's shards, as a split waits for it on the
# coordinator (ExclusiveLock) ...
my $split_waits = q{SELECT count(*) > 0 FROM pg_locks
                     WHERE locktype = 'advisory' AND objsubid = 8 AND mode = 'ExclusiveLock'
                       AND NOT granted};
# ... and a session held at the pause of lock 18763 or 18764.
my $paused_at = q{SELECT count(*) > 0 FROM pg_locks
                   WHERE locktype = 'advisory' AND objid = %d AND NOT granted};

# Runs $call on the coordinator held at the pause of lock $key, while a
# split of the tenant's shard, which waits for a claim's transaction (so
# that the call finds the shard's metadata lock busy and goes without it),
# commits; returns its output and errors once it ran on.
sub call_across_split
{
	my ($what, $call, $key) = @_;
	my ($shard, $low, $high) = split /\|/, query(
		sprintf(q{SELECT shardid, shardminvalue, shardmaxvalue FROM pg_dist_shard
		           WHERE shardid = get_shard_id_for_distribution_column('orders', %s)},
			quote($tenant)));
	my $shards = query(q{SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'orders'::regclass});
	my $holder = $coordinator->background_psql($db);
	$holder->query_safe('BEGIN');
	is( $holder->query_safe(
			sprintf(q{SELECT outcome FROM idempotency_begin(%s::bigint, %s, request_hash('x'::text))},
				$tenant, quote("holder $what"))),
		'claimed',
		"$what: a claim holds the tenant's shard");
	my $pause = $coordinator->background_psql($db);
	$pause->query_safe("SELECT pg_advisory_lock($key)");
	my %split;
	my $split = IPC::Run::start(
		[
			'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $coordinator->connstr($db), '-c',
			sprintf(q{SELECT citus_split_shard_by_split_points(%d, ARRAY[%s], ARRAY[%d, %d],
			                                                      'block_writes')},
				$shard, quote(int(($low + $high) / 2)), @node_ids)
		],
		'>', \$split{out}, '2>', \$split{err});
	ok($coordinator->poll_query_until($db, $split_waits), "$what: a split waits for the claim");
	my %held;
	my $held = IPC::Run::start(
		[
			'psql', '-XAtq', '-v', 'VERBOSITY=verbose', '-d', $coordinator->connstr($db), '-c',
			"SET idempotency.inject_fault = 'pause_in_lock_free_routing'; $call"
		],
		'>', \$held{out}, '2>', \$held{err});
	ok($coordinator->poll_query_until($db, sprintf($paused_at, $key)),
		"$what: the call is held between Citus's planning of its query and its run");
	$holder->query_safe('ROLLBACK');
	$holder->quit;
	ok($split->finish, "$what: the split commits meanwhile") or diag($split{err});
	is(query(q{SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'orders'::regclass}),
		$shards + 1, "$what: ... and the tenant's shard is split");
	$pause->query_safe("SELECT pg_advisory_unlock($key)");
	$pause->quit;
	$held->finish;
	chomp $held{out};
	return ($held{out}, $held{err});
}

# A completed key of the tenant, which each call below asks for.
is(query(sprintf(q{SELECT place_order(%s, 'done', 'book')}, $tenant)),
	'claimed', 'a request through the handler completes');
my $log_offset = -s $coordinator->logfile;

# A begin delegated by the coordinator: before Citus delegates it, a move
# holds the lock, so it asks (through Citus, without the lock) whether its
# key is completed.  The split removes the shard that query was planned
# for: the begin waits for the lock instead, and is delegated to the new
# shard's node.
my ($out, $err) = call_across_split('a delegated begin',
	sprintf(q{SELECT outcome FROM idempotency_begin(%s::bigint, 'done', request_hash('book'::text))},
		$tenant),
	18763);
is($out, 'replay', 'a delegated begin: ... then replays') or diag($err);
unlike($err, qr/XX000|could not find valid entry/, 'a delegated begin: ... without an internal error');

unless ($without_exports)
{
	# The handler's retry, run on the coordinator (an expression of its
	# call, which Citus does not delegate): its begin is forwarded, and
	# while a move holds the lock it first asks whether the key is completed
	# (as in t/061's split under load, where it failed now and then).
	my $retry = sprintf(q{SELECT (place_order(%s, 'done', 'book') = 'replay')::int}, $tenant);
	($out, $err) = call_across_split('a forwarded begin\'s check', $retry, 18763);
	is($out, '1', 'a forwarded begin\'s check: ... then the retry replays') or diag($err);
	unlike($err, qr/XX000|could not find valid entry/,
		'a forwarded begin\'s check: ... without an internal error');

	# The key is completed: the forwarded begin is then run on the shard's
	# node without the lock, and that call is held instead.
	($out, $err) = call_across_split('a forwarded replay', $retry, 18764);
	is($out, '1', 'a forwarded replay: ... then the retry replays') or diag($err);
	unlike($err, qr/XX000|could not find valid entry/,
		'a forwarded replay: ... without an internal error');

	# A lookup on the coordinator by a text scope, which Citus does not
	# delegate: forwarded, without the lock.
	($out, $err) = call_across_split('a forwarded lookup',
		sprintf(q{SELECT status FROM idempotency_lookup(%s, 'done')}, quote($tenant)), 18764);
	is($out, 'completed', 'a forwarded lookup: ... then answers') or diag($err);
	unlike($err, qr/XX000|could not find valid entry/,
		'a forwarded lookup: ... without an internal error');
}

is( query(
		sprintf(q{SELECT string_agg(status::text, ',') FROM idempotency.keys WHERE scope = %s},
			quote($tenant))),
	'c', 'the tenant has its one completed key, and no claim is left');
is(query(q{SELECT count(*) FROM orders}), '1', '... and one order');
unlike(slurp_file($coordinator->logfile, $log_offset), qr/could not find valid entry/,
	'the coordinator logged no internal error of a split shard');

done_testing();
