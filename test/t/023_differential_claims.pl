# The differential test of the claim protocol (test/differential/claims.py):
# random sequences of every API call, transaction and savepoint command,
# PREPARE TRANSACTION, cancelled waits and terminated sessions, and lookups
# held while a transaction changing their key rolls back, each run with
# idempotency.defer_claims on and off, on a server without the shared claims
# table (every claim takes the key lock and is written at once), and on one
# whose table has a single slot (claims fall back to the key lock), and on
# one without the backend-local caches (idempotency.inject_fault =
# no_caches: the table's layout, the digests' secret, the last digest, begin's
# result row are read afresh at every call).  Every
# answer and the final tables must be the same, and no claimed answer may
# contradict what other transactions hold or what committed.
# DIFFERENTIAL_SECONDS sets how long it runs (60 by default; longer by hand).
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
my @common = ('max_prepared_transactions = 10', 'idempotency.worker_enabled = off');
my %nodes = (
	main => new_node('differential', conf => [@common]),
	tableless =>
	  new_node('tableless', conf => [ @common, 'idempotency.max_deferred_claims = 0' ]),
	one_slot =>
	  new_node('one_slot', conf => [ @common, 'idempotency.max_deferred_claims = 1' ]),
	uncached => new_node('uncached', conf => [ @common, 'idempotency.inject_fault = no_caches' ]));
sub dsn
{
	my ($node) = @_;
	return sprintf('host=%s port=%d dbname=postgres', $node->host, $node->port);
}
$_->safe_psql('postgres', 'CREATE EXTENSION idempotency') for values %nodes;

my $seconds = $ENV{DIFFERENTIAL_SECONDS} // 60;
my ($stdout, $stderr);
my $passed = IPC::Run::run(
	[
		'/usr/bin/python3', 'test/differential/claims.py',
		'--dsn', dsn($nodes{main}),
		'--also', dsn($nodes{tableless}),
		'--also', dsn($nodes{one_slot}),
		'--also', dsn($nodes{uncached}),
		'--seconds', $seconds
	],
	'>', \$stdout, '2>', \$stderr);
ok($passed, "every way of claiming answers alike, for $seconds s of random sequences")
  or diag("$stdout\n$stderr");
like($stdout, qr/^[1-9]\d* sequences of \d+ operations .* 0 differences, 0 violations$/m,
	'the driver ran sequences and found nothing');
# Completions, prepared transactions and lookup(latest) did succeed: an
# operation that always failed would compare equal in every run.
for my $what ('complete', 'PREPARE', 'COMMIT PREPARED', 'ROLLBACK PREPARED', 'latest=True')
{
	my ($count) = $stdout =~ /^succeeded: .*\b\Q$what\E (\d+)/m;
	ok(($count // 0) > 0, "the sequences ran $what successfully") or diag($stdout);
}
# Lookups were held in the window of a rollback (claims.hpp, rule R).
like($stdout, qr/^lookups held in the window of a rollback \(first runs\): [1-9]/m,
	'the sequences held lookups in the window of a rollback');
note $stdout;

# The one-slot server took the fallback path, and the main one deferred.
ok($nodes{one_slot}->safe_psql('postgres', 'SELECT deferred_fallbacks > 0 FROM idempotency_stats()') eq 't',
	'claims fell back to the key lock on the server with one slot');
ok($nodes{main}->safe_psql('postgres', 'SELECT deferred_claims > 0 FROM idempotency_stats()') eq 't',
	'claims were deferred on the main server');

done_testing();
