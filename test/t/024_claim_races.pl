# Concurrent claims of few keys by many clients, every way a fresh claim can
# be made at once: deferred, written at once (idempotency.defer_claims off,
# or claim data), through the shared table and -- on the servers with one
# slot and with none -- through the key lock.  Each request that is told
# claimed does its business write and completes; one that is told
# in_progress waits for the holder and then replays.  Whatever interleaving
# the scheduler picks, every key is run exactly once: one business row per
# completed key, none for a key nobody completed.  (The isolation specs fix
# the interleavings that matter; this is the same guarantee under load.)
# On the first server, committed claims are also changed by transactions
# that roll back while retries read them (rollback_window, rule R).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $clients = 16;
my $seconds = $ENV{CLAIM_RACE_SECONDS} // 8;

# A transaction per request: claim with one of the ways (as pgbench variables
# decide), do the work when claimed, complete; else wait and replay.
my $script = PostgreSQL::Test::Utils::tempdir() . '/requests.sql';
PostgreSQL::Test::Utils::append_to_file($script, <<'SQL');
\set k random(1, 40)
\set way random(0, 2)
BEGIN;
SELECT set_config('idempotency.defer_claims', CASE WHEN :way = 1 THEN 'off' ELSE 'on' END, true) IS NOT NULL AS set;
SELECT (outcome = 'claimed')::integer AS claimed
  FROM idempotency_begin('race', 'key-' || :k, request_hash('POST /orders'::text), wait => '30s',
                         claim_data => CASE WHEN :way = 2 THEN '{"way": 2}'::jsonb END)
 WHERE outcome = 'claimed' OR (outcome = 'replay' AND response_status = 201) \gset
\if :claimed
INSERT INTO orders (key) VALUES ('key-' || :k);
SELECT 1 AS completed WHERE idempotency_complete('race', 'key-' || :k, 201, '{"ok": true}') \gset
\endif
COMMIT;
SQL

# Committed claims completed or checkpointed by transactions that roll back,
# while retries look at the keys: a reader that checks the committed version
# as it is being changed and the new version after the rollback must answer
# with the committed claim (claims.hpp, rule R), never with a record whose
# request and attempt are NULL.  (test/specs/replacement_rollback.spec holds
# a reader in that window, forgets included, whose deletion in progress
# answers NULL by design; here the scheduler finds it: 3 and 6 times in
# 34 k and 37 k answers of two runs before rule R.)  Nothing commits but the claims of the setup, whose
# leases outlast the run: every answer is that claim, committed or as the
# changing transaction shows it, attempt 1.
sub rollback_window
{
	my ($node) = @_;
	my $dir = PostgreSQL::Test::Utils::tempdir();
	PostgreSQL::Test::Utils::append_to_file("$dir/change.sql", <<'SQL');
\set k random(1, 8)
\set how random(0, 1)
BEGIN;
SELECT CASE :how
         WHEN 0 THEN idempotency_complete('window', 'key-' || :k, 201, '{}'::jsonb)::text
         ELSE idempotency_checkpoint('window', 'key-' || :k, 'step')::text
       END AS changed;
ROLLBACK;
SQL
	PostgreSQL::Test::Utils::append_to_file("$dir/read.sql", <<'SQL');
\set k random(1, 8)
INSERT INTO null_answers
SELECT 'lookup' FROM idempotency_lookup('window', 'key-' || :k, latest => true)
 WHERE attempt IS NULL;
INSERT INTO null_answers
SELECT 'begin ' || outcome FROM idempotency_begin('window', 'key-' || :k, request_hash('POST /orders'::text),
                                                  lease => '1 hour')
 WHERE attempt IS DISTINCT FROM 1 OR outcome <> 'in_progress';
SQL
	$node->safe_psql('postgres', q{
		CREATE TABLE null_answers (answer text);
		SELECT count(*) FROM generate_series(1, 8) AS k,
		  LATERAL idempotency_begin('window', 'key-' || k, request_hash('POST /orders'::text),
		                            lease => '1 hour')});
	my ($out, $err);
	my $ran = IPC::Run::run(
		[ 'pgbench', '-n', '-c', 8, '-j', 2, '-T', $seconds, '-f', "$dir/change.sql\@1",
		  '-f', "$dir/read.sql\@1", $node->connstr('postgres') ],
		'>', \$out, '2>', \$err);
	my ($reads) = ($out // '') =~ /SQL script 2:.*?\n - (\d+) transactions/s;
	ok($ran && ($reads // 0) > 0, 'rollbacks and reads ran') or diag("$out\n$err");
	is($node->safe_psql('postgres',
			q{SELECT coalesce(string_agg(answer || ': ' || n, ', '), 'none')
			    FROM (SELECT answer, count(*) AS n FROM null_answers GROUP BY answer) AS a}),
		'none', "no answer but the committed claim in @{[ 2 * ($reads // 0) ]} answers around rollbacks");
}

for my $setup (
	[ 'slots', 'idempotency.max_deferred_claims = 4096' ],
	[ 'one_slot', 'idempotency.max_deferred_claims = 1' ],
	[ 'no_table', 'idempotency.max_deferred_claims = 0' ])
{
	my ($name, $setting) = @$setup;
	my $node = new_node("race_$name", conf => [ $setting, 'max_connections = 40' ]);
	$node->safe_psql('postgres', q{
		CREATE EXTENSION idempotency;
		CREATE TABLE orders (id bigserial PRIMARY KEY, key text NOT NULL)});
	# Fresh keys for each round, so that claims meet again and again.
	my $rounds = 0;
	my $started = time;
	while ($rounds == 0 || time - $started < $seconds)
	{
		$node->safe_psql('postgres', 'TRUNCATE orders, idempotency.keys');
		# pgbench's own errors go to the output: a failed request here is a
		# finding (which SQLSTATE, which statement), not just a red line.
		my ($out, $err);
		my $ran = IPC::Run::run(
			[ 'pgbench', '-n', '--verbose-errors', '-c', $clients, '-j', 2, '-t', 40, '-f', $script, $node->connstr('postgres') ],
			'>', \$out, '2>', \$err);
		# pgbench counts a deadlock (40P01) as a failed transaction and goes
		# on; here a request has nothing to deadlock with, so none may fail.
		my ($failed) = ($out // '') =~ /number of failed transactions: (\d+)/;
		ok($ran && (!defined $failed || $failed == 0), "$name, round $rounds: pgbench ran every request")
		  or diag(join "\n", ($out // '') =~ /^(number of failed.*)$/m,
			grep { /error|ERROR|abort|DETAIL|CONTEXT/ } split /\n/, $err);
		my $twice = $node->safe_psql('postgres',
			q{SELECT count(*) FROM (SELECT key FROM orders GROUP BY key HAVING count(*) > 1) AS t});
		my $lost = $node->safe_psql('postgres',
			q{SELECT count(*) FROM idempotency.keys AS k
			   WHERE k.status = 'c' AND NOT EXISTS (SELECT FROM orders AS o WHERE o.key = k.key)});
		my $unclaimed = $node->safe_psql('postgres',
			q{SELECT count(*) FROM orders AS o
			   WHERE NOT EXISTS (SELECT FROM idempotency.keys AS k WHERE k.key = o.key AND k.status = 'c')});
		is("$twice $lost $unclaimed", '0 0 0',
			"$name, round $rounds: no key run twice, no completion without its work, no work without its completion");
		$rounds++;
	}
	note "$name: $rounds rounds of $clients clients x 40 requests over 40 keys";
	rollback_window($node) if $name eq 'slots';
	is($node->safe_psql('postgres', q{SELECT (deferred_fallbacks > 0) = (current_setting('idempotency.max_deferred_claims') = '1') FROM idempotency_stats()}),
		't', "$name: fallbacks to the key lock where, and only where, the table is tiny");
}

done_testing();
