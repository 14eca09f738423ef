# The Node middleware (middleware/node: Express and Fastify over node-postgres)
# against a server with the extension: npm ci from the package lock (the npm
# registry, or npm's cache), then its own suite, middleware/node/test, one TAP
# line per test.  Needs node and npm (Debian: nodejs, npm); skips, saying so,
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
my $cache = PostgreSQL::Test::Utils::tempdir() . '/npm-cache';
my ($out, $err) = ('', '');
my $installed = IPC::Run::run(
	[ 'npm', 'ci', '--no-audit', '--no-fund', '--cache', $cache ],
	'>', \$out, '2>', \$err,
	init => sub { chdir $dir or die "chdir $dir: $!"; });
ok($installed, 'npm ci installs the locked dependencies') or diag("$out\n$err");

my $node = new_node('middleware', conf => ['max_connections = 100']);
$node->safe_psql('postgres', 'CREATE DATABASE middleware');
$node->safe_psql('middleware', 'CREATE EXTENSION idempotency');

($out, $err) = ('', '');
my $ran = IPC::Run::run(
	[ 'sh', '-c', 'node --test --test-reporter=tap test/*.test.js' ],
	'>', \$out, '2>', \$err,
	init => sub {
		chdir $dir or die "chdir $dir: $!";
		@ENV{qw(PGHOST PGPORT PGDATABASE PGUSER)} =
		  ($node->host, $node->port, 'middleware', scalar getpwuid($<));
	});
my @tests = $out =~ /^((?:not )?ok \d+ - .*)$/mg;
ok(@tests >= 15, 'the middleware suite ran its tests') or diag("$out\n$err");
for my $line (@tests)
{
	my ($failed, $name) = $line =~ /^(not )?ok \d+ - (.*)$/;
	ok(!$failed, "node middleware: $name") or diag($out);
}
ok($ran, 'the suite exits 0') or diag($err);

done_testing();
