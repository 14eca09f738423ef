# Citus: two-phase commit.  Keys on the coordinator with distributed
# business writes (or schema-sharded ones) commit with two-phase commit,
# asked of Citus by its routine (PostgreSQL 15) or else through
# idempotency.two_phase made a reference table, so a coordinator crash at
# either commit point never duplicates work, and an untested Citus release is
# refused before the routine is looked up; a database without Citus is not
# affected; a worker never uses keys of its own while the keys are not
# distributed, and idempotency_distribute() moves the coordinator's keys into
# the shards.  With distributed keys, a transaction that lets Citus delegate
# the calls (or a force-delegated handler) and writes a table of the
# coordinator, or whose calls are forwarded to the shard's node beside such
# a write, commits in two phases too (a crash at either commit point, then a
# retry: one order); one whose writes are all distributed, in one.  (Was
# part of test/t/060_citus.pl; the cluster and the requests are
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

# The one-round-trip handler of doc/citus.md (create_documented_handler): one
# delegated call runs the whole request on the node of the tenant's shard.
# Its function is created here, before the keys are distributed: a call then
# runs on a worker, whose own idempotency.keys must not be used -- a key
# completed through the coordinator would be claimed again there.
create_documented_handler();

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
# idempotency_distribute moves the coordinator's keys into the shards
# ---------------------------------------------------------------------------
{
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
	is(outcome_of('ten1', $without_exports ? 'reference-post_commit' : 'local-post_commit'), 'replay',
		'a key completed before distribution replays after it');
}

# ---------------------------------------------------------------------------
# Distributed keys beside a write on the coordinator: two-phase commit
# ---------------------------------------------------------------------------
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

done_testing();
