# Citus: shard moves.  With the keys distributed, a shard move in Citus's
# default mode under load of the documented handler (no error: a call that
# reached the old node is forwarded; the keys move with the orders); a
# block_writes move waiting for a claim's transaction, while reads answer
# (through the coordinator, on the shard's node, forwarded, for a role that
# may not read the keys), a forwarded replay whose key vanishes meanwhile
# fails with IK005, and a new request waits and then claims on the new node;
# a tenant isolated to a shard of its own, with its keys and routing table,
# and a background rebalance.  (Was part of test/t/060_citus.pl; the cluster
# and the requests are test/t/CitusTest.pm's.)
# Skipped, visibly, when the citus library is not installed.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use CitusTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

plan skip_all => citus_missing() if citus_missing();

my $db = 'postgres';
my ($coordinator, @workers) = start_orders_cluster();
my $without_exports = citus_without_exports();

create_documented_handler();
query(q{SELECT idempotency_distribute('orders')});

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

done_testing();
