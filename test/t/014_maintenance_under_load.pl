# Routine maintenance under load: eight clients claim, write and complete keys
# (some expiring within seconds, so the worker sweeps as they go) while
# another session loops ANALYZE and VACUUM of the keys table and autovacuum
# runs every second.  Each of those sends relcache invalidations that reach
# the functions between their lock acquisitions.  No client may see an error,
# the server log must show none, every index must match the heap (amcheck),
# and every key completed must have exactly one business row per claim.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use lib 'test/t';
use IdempotencyTest;

my $seconds = $ENV{MAINTENANCE_SECONDS} // 15;

my $node = new_node(
	'maintenance',
	conf => [
		'autovacuum_naptime = 1s',
		'autovacuum_vacuum_threshold = 50',
		'autovacuum_analyze_threshold = 50',
		'autovacuum_vacuum_scale_factor = 0',
		'autovacuum_analyze_scale_factor = 0',
		"idempotency.expire_interval = '100ms'",
		'max_connections = 30',
	]);
$node->safe_psql(
	'postgres', q{
	CREATE EXTENSION idempotency;
	CREATE EXTENSION amcheck;
	CREATE TABLE orders (id bigserial PRIMARY KEY, idem_key text NOT NULL, attempt int NOT NULL);
});

my $dir = PostgreSQL::Test::Utils::tempdir;
my $client_script = "$dir/client.sql";
PostgreSQL::Test::Utils::append_to_file(
	$client_script, q{
\set n random(1, 2000)
BEGIN;
SELECT (b.outcome = 'claimed')::int AS claimed, coalesce(b.attempt, 0) AS attempt
  FROM idempotency_begin('load', 'k' || :n, request_hash('POST /orders'::text),
                         ttl => CASE WHEN :n % 4 = 0 THEN '1 second' ELSE '1 day' END::interval,
                         wait => '5s') AS b \gset
\if :claimed
INSERT INTO orders (idem_key, attempt) VALUES ('k' || :n, :attempt);
SELECT idempotency_complete('load', 'k' || :n, 201, jsonb_build_object('key', :n));
\endif
COMMIT;
});
my $maintenance_script = "$dir/maintenance.sql";
PostgreSQL::Test::Utils::append_to_file(
	$maintenance_script, q{
ANALYZE idempotency.keys;
VACUUM idempotency.keys;
});

sub start_pgbench
{
	my ($script, $clients, $out, $err) = @_;
	return IPC::Run::start(
		[
			'pgbench', '-n', '-T', $seconds, '-c', $clients, '-j', 2,
			'-f', $script, '-h', $node->host, '-p', $node->port, 'postgres'
		],
		'>', $out, '2>', $err);
}

my $log_offset = -s $node->logfile;
my ($clients_out, $clients_err, $maint_out, $maint_err) = ('', '', '', '');
my $clients = start_pgbench($client_script, 8, \$clients_out, \$clients_err);
my $maint = start_pgbench($maintenance_script, 1, \$maint_out, \$maint_err);
my $clients_ok = $clients->finish;
my $maint_ok = $maint->finish;

my ($transactions) = $clients_out =~ /number of transactions actually processed: (\d+)/;
ok($clients_ok, 'the clients finished without an error')
  or diag("pgbench stderr:\n$clients_err");
unlike($clients_err, qr/ERROR|aborted/, 'no client saw an error');
ok($maint_ok && $maint_err !~ /ERROR/, 'ANALYZE and VACUUM ran throughout')
  or diag("maintenance stderr:\n$maint_err");
cmp_ok($transactions // 0, '>', 100, 'the clients did real work')
  or diag($clients_out);

my $log = PostgreSQL::Test::Utils::slurp_file($node->logfile, $log_offset);
my @problems = grep { /\b(ERROR|FATAL|PANIC|WARNING):/ } split /\n/, $log;
is(join("\n", @problems), '', 'the server log shows no error or warning');

is(indexes_checked($node, 'postgres'),
	'keys_pkey: checked',
	'amcheck finds every heap tuple in every index');

# A completed key that has not expired was claimed once per attempt: one
# business row for its current attempt.
is( $node->safe_psql(
		'postgres', q{
		SELECT count(*) FROM idempotency.keys AS k
		 WHERE k.status = 'c' AND k.ttl = '1 day'
		   AND (SELECT count(*) FROM orders AS o WHERE o.idem_key = k.key) <> 1}),
	'0',
	'every completed key that cannot have expired has exactly one business row');

done_testing();
