# pg_repack of the keys table under load.  pg_repack copies the table while
# a row trigger logs every change made meanwhile, then replays the log and
# swaps the copy in; a write that bypassed the trigger would be lost with the
# old copy, and its key would run again on retry.  Four clients, as a role
# with nothing but EXECUTE, claim new keys, write a business row and complete
# them while pg_repack runs again and again.  Afterwards every business row's
# key must replay, and every index must match the heap.
#
# Needs pg_repack (Debian: postgresql-NN-repack); skipped, saying so, without.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use lib 'test/t';
use IdempotencyTest;

my $seconds = $ENV{REPACK_SECONDS} // 12;

my $node = new_node('repack');
if ($node->safe_psql('postgres',
		q{SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_repack'}) eq '0'
	|| system('pg_repack --version >/dev/null 2>&1') != 0)
{
	plan skip_all => 'pg_repack is not installed (Debian: postgresql-NN-repack)';
}

$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION idempotency;
	CREATE EXTENSION pg_repack;
	CREATE EXTENSION amcheck;
	CREATE ROLE app LOGIN;
	GRANT EXECUTE ON FUNCTION idempotency_begin, idempotency_complete TO app;
	CREATE TABLE orders (id bigserial PRIMARY KEY, idem_key text NOT NULL UNIQUE);
	CREATE SEQUENCE next_key;
	GRANT INSERT ON orders TO app;
	GRANT USAGE ON SEQUENCE orders_id_seq, next_key TO app;
	-- Enough keys that each repack takes a while.
	SELECT count(*) FROM generate_series(1, 20000) AS g,
	  LATERAL idempotency_begin('old', 'k' || g, request_hash('POST /orders'::text)) AS b,
	  LATERAL idempotency_complete('old', 'k' || g, 201) AS c;
});

my $dir = PostgreSQL::Test::Utils::tempdir;
my $script = "$dir/client.sql";
PostgreSQL::Test::Utils::append_to_file(
	$script, q{
SELECT nextval('next_key') AS n \gset
BEGIN;
SELECT outcome FROM idempotency_begin('load', 'k' || :n, request_hash('POST /orders'::text));
INSERT INTO orders (idem_key) VALUES ('k' || :n);
SELECT idempotency_complete('load', 'k' || :n, 201, jsonb_build_object('key', :n));
COMMIT;
});

my ($out, $err) = ('', '');
my $clients = IPC::Run::start(
	[
		'pgbench', '-n', '-T', $seconds, '-c', 4, '-j', 2, '-f', $script,
		'-h', $node->host, '-p', $node->port, '-U', 'app', 'postgres'
	],
	'>', \$out, '2>', \$err);
my ($repacks, $repack_failures, $repack_log) = (0, 0, '');
while ($clients->pumpable)
{
	my ($repack_out, $repack_err) = ('', '');
	my $ok = IPC::Run::run(
		[
			'pg_repack', '--no-kill-backend', '--table=idempotency.keys',
			'-h', $node->host, '-p', $node->port, '-d', 'postgres'
		],
		'>', \$repack_out, '2>', \$repack_err);
	$ok ? $repacks++ : $repack_failures++;
	$repack_log .= $repack_err;
	$clients->pump_nb;
}
my $clients_ok = $clients->finish;

ok($clients_ok && $err !~ /ERROR|aborted/, 'no client saw an error')
  or diag($err);
cmp_ok($repacks, '>=', 2, "pg_repack ran to the end under load ($repacks times)")
  or diag($repack_log);
is($repack_failures, 0, 'no run of pg_repack failed') or diag($repack_log);

my $orders = $node->safe_psql('postgres', 'SELECT count(*) FROM orders');
cmp_ok($orders, '>', 100, "the clients wrote $orders business rows meanwhile");
is($node->safe_psql('postgres', q{SELECT count(*) FROM idempotency.keys WHERE scope = 'load'}),
	$orders, 'there is one key for each business row');
is( $node->safe_psql(
		'postgres', q{
		BEGIN;
		SELECT count(*) FROM orders AS o,
		  LATERAL idempotency_begin('load', o.idem_key, request_hash('POST /orders'::text)) AS b
		 WHERE b.outcome <> 'replay';
		ROLLBACK;}),
	'0',
	'every key completed during the repacks replays: none runs again');
is(indexes_checked($node, 'postgres'),
	'keys_pkey: checked',
	'amcheck finds every heap tuple in every index after the swaps');

done_testing();
