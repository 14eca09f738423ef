# Citus: calls that reach the shard's node.  Once the keys are distributed,
# a call in a shape Citus does not delegate (a field of the result, a WHERE
# clause, a client of the worker without the shard, a distributed function
# of another tenant) is forwarded to the shard's node in the caller's
# transaction: it commits with two-phase commit, rolls back with it and with
# a savepoint, keeps the IK004 rule and the node's SQLSTATE; where Citus
# refuses a remote query (a force-delegated call in a transaction block, or
# a library that exports none of what forwarding needs), IK005.  A NULL
# scope, or a NULL tenant of a handler Citus distributes with the keys, is
# refused before Citus's delegation hashes it, without a crash; and a
# non-superuser caller uses the handler and the functions, never the storage,
# and is forwarded once granted the routing table.  (Was part of
# test/t/060_citus.pl; the cluster and the requests are
# test/t/CitusTest.pm's.)
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
my $without_exports = citus_without_exports();

create_documented_handler();
query(q{SELECT idempotency_distribute('orders')});

# ---------------------------------------------------------------------------
# Calls Citus does not delegate: forwarded to the shard's node, or refused
# ---------------------------------------------------------------------------
{
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
}

# ---------------------------------------------------------------------------
# A NULL scope or tenant: refused before Citus's delegation
# ---------------------------------------------------------------------------
{
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

done_testing();
