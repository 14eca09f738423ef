# The Python middleware (middleware/python: Flask, FastAPI/Starlette, Django;
# psycopg 3 and psycopg2) against a server with the extension: its own suite,
# middleware/python/tests (the adapters' glue; what every package shares is
# the conformance suite's, t/056), one TAP line per test.  Needs Debian's
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

my $user = getpwuid($<);

# Runs the suite against $host:$port and passes its lines on.
sub run_suite
{
	my ($label, $host, $port) = @_;
	my ($out, $err) = ('', '');
	my $ran = IPC::Run::run(
		[ $python, 'middleware/python/tests/tap.py' ],
		'>', \$out, '2>', \$err,
		init => sub {
			@ENV{qw(PGHOST PGPORT PGDATABASE PGUSER)} = ($host, $port, 'middleware', $user);
		});
	my @tests = $out =~ /^((?:not )?ok \d+ - .*)$/mg;
	ok(@tests >= 20, "$label: the middleware suite ran its tests") or diag("$out\n$err");
	for my $line (@tests)
	{
		my ($failed, $name) = $line =~ /^(not )?ok \d+ - (.*)$/;
		ok(!$failed, "$label: $name")
		  or diag(join "\n", $out =~ /^\Q$line\E\n((?:#.*\n)*)/m);
	}
	ok($ran, "$label: the suite exits 0") or diag($err);
	return;
}

run_suite('python middleware', $node->host, $node->port);

# Typing: the package passes mypy --strict (pyproject.toml's [tool.mypy]), and
# the hooks are typed with the framework's own request: in
# tests/typing_hooks.py, the one line marked "# error" is the one mypy rejects.
SKIP:
{
	skip 'mypy is not installed (Debian: mypy)', 2 unless -x '/usr/bin/mypy';
	# One run for both: most of its time goes to reading the frameworks' types.
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ '/usr/bin/mypy', 'pg_idempotency', 'tests/typing_hooks.py' ],
		'>', \$out, '2>', \$err, init => sub { chdir 'middleware/python' or die "chdir: $!" });
	my @source = split /\n/, slurp_file('middleware/python/tests/typing_hooks.py');
	my ($marked) = grep { $source[ $_ - 1 ] =~ /# error$/ } 1 .. @source;
	my $checked = $out =~ /^Found \d+ errors? in 1 file \(checked \d+ source files\)$/m;
	ok($checked && $out !~ m{^pg_idempotency/\S+: error}m,
		'mypy --strict finds no error in the package')
	  or diag("$out$err");
	my @lines = $out =~ /^tests\/typing_hooks\.py:(\d+): error/mg;
	ok(!$ok && $checked && @lines && !grep({ $_ != $marked } @lines)
		  && $out =~ /no_such_attribute/,
		'a hook that reads what the framework\'s request lacks is a type error, and only it')
	  or diag("$out$err");
}

# Through PgBouncer in transaction mode: the middleware names no prepared
# statement and opens a connection per request, so the drivers' defaults do.
SKIP:
{
	my $bouncer = start_pgbouncer($node, 'middleware', $user);
	skip 'pgbouncer is not installed (Debian: pgbouncer)', 1 unless $bouncer;
	ok($bouncer->{up}, "PgBouncer $bouncer->{version} runs in transaction mode") or diag(slurp_file($bouncer->{log}));
	my ($host, $port) = $bouncer->{connstr} =~ /host=(\S+) port=(\d+)/;
	run_suite("python middleware through PgBouncer $bouncer->{version}", $host, $port);
	$bouncer->{handle}->kill_kill;
}

done_testing();
