# The differential test of deferred claims (test/differential/claims.py):
# random sequences of every API call, transaction and savepoint command,
# PREPARE TRANSACTION, cancelled waits and terminated sessions, each run with
# idempotency.defer_claims on and then off.  Every answer and the final
# tables must be the same, and no claimed answer may contradict what other
# transactions hold or what committed.  DIFFERENTIAL_SECONDS sets how long
# it runs (60 by default; longer by hand).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# No expiry worker: a sweep holds key locks for a moment, which the driver
# would take for a wait of its own.
my $node = new_node('differential',
	conf => [ 'max_prepared_transactions = 10', 'idempotency.worker_enabled = off' ]);
$node->safe_psql('postgres', 'CREATE EXTENSION idempotency');

my $seconds = $ENV{DIFFERENTIAL_SECONDS} // 60;
my $dsn = sprintf('host=%s port=%d dbname=postgres', $node->host, $node->port);
my ($stdout, $stderr);
my $passed = IPC::Run::run([ '/usr/bin/python3', 'test/differential/claims.py',
		'--dsn', $dsn, '--seconds', $seconds ],
	'>', \$stdout, '2>', \$stderr);
ok($passed, "deferred claims answer as claims written at once, for $seconds s of random sequences")
  or diag("$stdout\n$stderr");
like($stdout, qr/^[1-9]\d* sequences of \d+ operations .* 0 differences, 0 violations$/m,
	'the driver ran sequences and found nothing');
note $stdout;

done_testing();
