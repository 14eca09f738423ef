# The Python middleware (middleware/python: Flask, FastAPI/Starlette, Django;
# psycopg 3 and psycopg2) against a server with the extension: its own suite,
# middleware/python/tests, one TAP line per test.  Needs Debian's
# python3-flask, python3-fastapi, python3-starlette, python3-httpx,
# python3-django, python3-psycopg and python3-psycopg2; skips, saying so,
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

my $python = '/usr/bin/python3';
my @modules = qw(flask fastapi starlette httpx django psycopg psycopg2);
plan skip_all => "python3 lacks one of @modules (Debian: python3-flask python3-fastapi "
  . 'python3-starlette python3-httpx python3-django python3-psycopg python3-psycopg2)'
  unless system($python, '-c', 'import ' . join(', ', @modules)) == 0;

# 20 concurrent clients per suite, each with a connection of its own.
my $node = new_node('middleware', conf => ['max_connections = 100']);
$node->safe_psql('postgres', 'CREATE DATABASE middleware');
$node->safe_psql('middleware', 'CREATE EXTENSION idempotency');

my ($out, $err) = ('', '');
my $ran = IPC::Run::run(
	[ $python, 'middleware/python/tests/tap.py' ],
	'>', \$out, '2>', \$err,
	init => sub {
		@ENV{qw(PGHOST PGPORT PGDATABASE PGUSER)} =
		  ($node->host, $node->port, 'middleware', scalar getpwuid($<));
	});
my @tests = $out =~ /^((?:not )?ok \d+ - .*)$/mg;
ok(@tests >= 40, 'the middleware suite ran its tests') or diag("$out\n$err");
for my $line (@tests)
{
	my ($failed, $name) = $line =~ /^(not )?ok \d+ - (.*)$/;
	ok(!$failed, "python middleware: $name")
	  or diag(join "\n", $out =~ /^\Q$line\E\n((?:#.*\n)*)/m);
}
ok($ran, 'the suite exits 0') or diag($err);

done_testing();
