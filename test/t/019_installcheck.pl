# make installcheck, the README's check of an installation, against a server
# that does not preload the library: the pg_regress suite passes there too.
# Without the preload there are no deferred claims and no statistics; the
# tests whose output depends on that compare with the answer the server's
# configuration calls for, so that one expected file holds for both, and
# make test runs the same suite against its preloading cluster.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('unpreloaded', conf => ["shared_preload_libraries = ''"]);
is($node->safe_psql('postgres', 'SHOW shared_preload_libraries'),
	'', 'the server does not preload the library');

# From the repository root (prove's working directory under test/run), with
# the PostgreSQL whose bin directory comes first in PATH, as make test's.
my ($stdout, $stderr);
my $passed = IPC::Run::run(
	[ 'make', '--no-print-directory', 'installcheck' ],
	'>', \$stdout, '2>', \$stderr,
	init => sub {
		$ENV{PGHOST} = $node->host;
		$ENV{PGPORT} = $node->port;
		delete $ENV{PGUSER};
	});
note $stdout;
ok($passed, 'make installcheck passes against a server that does not preload the library')
  or diag($stderr . (-e 'regression.diffs' ? slurp_file('regression.diffs') : ''));

done_testing();
