# The cross-edition differential test (doc/sql-edition.md): the same random
# sequences of claims, completions, checkpoints, releases, forgets, lookups,
# listings, savepoints, rollbacks, prepared transactions, cancelled waits and
# terminated sessions (test/differential/claims.py) run against the extension
# and against the SQL edition, each on a server of its own: the answers
# and the final tables must agree wherever doc/sql-edition.md's table does
# not say otherwise, and no claimed answer may contradict what the other
# transactions hold or what committed.  Then the same digests, or the same
# SQLSTATE, for random and hostile inputs of every request_hash constructor
# (test/differential/digests.py).  DIFFERENTIAL_SECONDS sets how long the
# sequences run (60 by default).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# The extension on a server that preloads it, with no expiry worker (a sweep
# holds key locks for a moment, which the driver would take for a wait of its
# own); the edition on one that does not, as on a managed server.
my $node = new_node('extension',
	conf => [ 'max_prepared_transactions = 10', 'idempotency.worker_enabled = off' ]);
my $edition_node = new_node('edition',
	conf => [ 'max_prepared_transactions = 10', "shared_preload_libraries = ''" ]);
$node->safe_psql('postgres', 'CREATE DATABASE extension');
$edition_node->safe_psql('postgres', 'CREATE DATABASE edition');
$node->safe_psql('extension', 'CREATE EXTENSION idempotency');
$edition_node->safe_psql('edition', 'CREATE EXTENSION idempotency_sql');
sub dsn
{
	my $server = $_[0] eq 'edition' ? $edition_node : $node;
	return sprintf('host=%s port=%d dbname=%s', $server->host, $server->port, $_[0]);
}

my $seconds = $ENV{DIFFERENTIAL_SECONDS} // 60;
my ($stdout, $stderr);
my $passed = IPC::Run::run(
	[
		'/usr/bin/python3', 'test/differential/claims.py',
		'--dsn', dsn('extension'), '--edition', dsn('edition'), '--seconds', $seconds
	],
	'>', \$stdout, '2>', \$stderr);
ok($passed, "the editions answer alike, for $seconds s of random sequences") or diag("$stdout\n$stderr");
like($stdout, qr/^[1-9]\d* sequences of \d+ operations .* and on the SQL edition\) .* 0 differences, 0 violations$/m,
	'the driver ran sequences on both editions and found nothing');
# Completions, prepared transactions and newest-state lookups succeeded: an
# operation that always failed would compare equal everywhere.
for my $what ('complete', 'PREPARE', 'COMMIT PREPARED', 'ROLLBACK PREPARED', 'latest=True')
{
	my ($count) = $stdout =~ /^succeeded: .*\b\Q$what\E (\d+)/m;
	ok(($count // 0) > 0, "the sequences ran $what successfully") or diag($stdout);
}
note $stdout;

# Digests: every input, both editions by the fingerprint rules of 0.5.0.
$passed = IPC::Run::run(
	[
		'/usr/bin/python3', 'test/differential/digests.py',
		'--extension', dsn('extension'), '--edition', dsn('edition'), '--count', 3000
	],
	'>', \$stdout, '2>', \$stderr);
ok($passed, 'the editions give the same digest, or the same error, for every input') or diag("$stdout\n$stderr");
like($stdout, qr/^[1-9]\d* inputs gave the same digest/m, 'digests were compared');
note $stdout;

done_testing();
