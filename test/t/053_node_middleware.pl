# The Node middleware (middleware/node: Express 4 and 5 and Fastify 4 and 5 over
# node-postgres) against a server with the extension: npm ci from the package lock
# (the npm registry, or npm's cache), then its own suite, middleware/node/test, one
# TAP line per test: the rules of middleware/README.md in each framework, the
# examples, the node-idempotency store, and the packed tarball under a strict
# TypeScript compile.  Needs node and npm (Debian: nodejs, npm); skips, saying so,
# without them.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

plan skip_all => 'node and npm are not installed (Debian: nodejs, npm)'
  unless system('node --version >/dev/null 2>&1 && npm --version >/dev/null 2>&1') == 0;

my $dir = 'middleware/node';
# npm's own cache, shared with the conformance suite's installs (t/056): the lock pins
# every package by its integrity, so what an earlier run fetched is not fetched again.
my ($out, $err) = ('', '');
my $installed = IPC::Run::run(
	[ 'npm', 'ci', '--no-audit', '--no-fund', '--prefer-offline' ],
	'>', \$out, '2>', \$err,
	init => sub { chdir $dir or die "chdir $dir: $!"; });
ok($installed, 'npm ci installs the locked dependencies') or diag("$out\n$err");

my $node = new_node('middleware', conf => ['max_connections = 100']);
$node->safe_psql('postgres', 'CREATE DATABASE middleware');
$node->safe_psql('middleware', 'CREATE EXTENSION idempotency');

my $user = getpwuid($<);

# Runs the suite against $host:$port and passes its lines on.
sub run_suite
{
	my ($label, $host, $port, $files) = @_;
	my ($out, $err) = ('', '');
	my $ran = IPC::Run::run(
		[ 'sh', '-c', "node --test --test-reporter=tap $files" ],
		'>', \$out, '2>', \$err,
		init => sub {
			chdir $dir or die "chdir $dir: $!";
			@ENV{qw(PGHOST PGPORT PGDATABASE PGUSER)} = ($host, $port, 'middleware', $user);
		});
	my @tests = $out =~ /^((?:not )?ok \d+ - .*)$/mg;
	ok(@tests >= 15, "$label: the middleware suite ran its tests") or diag("$out\n$err");
	for my $line (@tests)
	{
		my ($failed, $name) = $line =~ /^(not )?ok \d+ - (.*)$/;
		ok(!$failed, "$label: $name") or diag($out);
	}
	ok($ran, "$label: the suite exits 0") or diag($err);
	return;
}

run_suite('node middleware', $node->host, $node->port, 'test/*.test.js');

# Through PgBouncer in transaction mode: node-postgres's unnamed statements,
# the defaults of the middleware and of node-idempotency's store, need no
# setting there.
SKIP:
{
	my $bouncer = start_pgbouncer($node, 'middleware', $user);
	skip 'pgbouncer is not installed (Debian: pgbouncer)', 1 unless $bouncer;
	ok($bouncer->{up}, "PgBouncer $bouncer->{version} runs in transaction mode") or diag(slurp_file($bouncer->{log}));
	my ($host, $port) = $bouncer->{connstr} =~ /host=(\S+) port=(\d+)/;
	# All but the package's check (npm pack and tsc), which uses no database.
	run_suite("node middleware through PgBouncer $bouncer->{version}", $host, $port,
		'$(ls test/*.test.js | grep -v test/package.test.js)');
	$bouncer->{handle}->kill_kill;
}

done_testing();
