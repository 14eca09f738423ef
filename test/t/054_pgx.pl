# The SQL surface through pgx v4, Debian 12's Go driver (test/drivers/pgx_v4.go):
# with its defaults directly, and through PgBouncer in transaction mode with
# the setting doc/reference.md gives for it before PgBouncer 1.21
# (statement_cache_mode=describe), or its defaults from 1.21 with
# max_prepared_statements.  Before 1.21 its defaults fail there, as the
# reference says.  Built offline against Debian's sources (GOPATH mode).
# Needs golang-go and golang-github-jackc-pgx-v4-dev, and pgbouncer; skips,
# saying so, without them.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $sources = '/usr/share/gocode';
plan skip_all => 'Go or pgx v4 is not installed (Debian: golang-go, golang-github-jackc-pgx-v4-dev)'
  unless system('go version >/dev/null 2>&1') == 0 && -d "$sources/src/github.com/jackc/pgx/v4";

my $tmp = PostgreSQL::Test::Utils::tempdir();
my $program = "$tmp/pgx_v4";
my ($out, $err) = ('', '');
my $built = IPC::Run::run(
	[ 'go', 'build', '-o', $program, 'test/drivers/pgx_v4.go' ],
	'>', \$out, '2>', \$err,
	init => sub {
		@ENV{qw(GO111MODULE GOPATH GOCACHE GOFLAGS HOME)} =
		  ('off', "$tmp/gopath:$sources", "$tmp/gocache", '', $tmp);
	});
ok($built, 'the pgx v4 check builds offline against Debian\'s sources') or diag($err);

my $node = new_node('pgx', conf => ['max_connections = 100']);
$node->safe_psql('postgres', q{
	CREATE EXTENSION idempotency;
	CREATE ROLE app LOGIN;
	CREATE TABLE orders (item text);
	GRANT INSERT, SELECT ON orders TO app;
	GRANT EXECUTE ON FUNCTION idempotency_begin, idempotency_complete TO app});

# Runs the check with the connection string $dsn and passes its lines on.
sub run_check
{
	my ($label, $dsn) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ $program, $dsn ], '>', \$out, '2>', \$err);
	my @lines = grep { /^(not )?ok - / } split /\n/, $out;
	ok(@lines >= 5, "$label: the checks ran") or diag("$out\n$err");
	for my $line (@lines)
	{
		my ($failed, $name) = $line =~ /^(not )?ok - (.*)$/;
		ok(!$failed, "$label: $name") or diag($line);
	}
	return $out;
}

run_check('pgx v4 defaults', sprintf('host=%s port=%d dbname=postgres user=app', $node->host, $node->port));

SKIP:
{
	my $bouncer = start_pgbouncer($node, 'postgres', 'app');
	skip 'pgbouncer is not installed (Debian: pgbouncer)', 1 unless $bouncer;
	my ($version, $prepared_statements, $pooled) = @$bouncer{qw(version prepared_statements connstr)};
	ok($bouncer->{up}, "PgBouncer $version runs in transaction mode") or diag(slurp_file($bouncer->{log}));
	if ($prepared_statements)
	{
		run_check("PgBouncer $version with max_prepared_statements, pgx v4 defaults", $pooled);
	}
	else
	{
		run_check("PgBouncer $version, pgx v4 with statement_cache_mode=describe",
			"$pooled statement_cache_mode=describe");
		# pgx prepares named statements, which are missing on the next server
		# connection: the reference says to describe instead before 1.21.
		my ($out, $err) = ('', '');
		IPC::Run::run([ $program, $pooled ], '>', \$out, '2>', \$err);
		like($out, qr/^not ok - .*prepared statement "lrupsc_\d+_\d+" (?:does not exist|already exists)/m,
			"PgBouncer $version, pgx v4 defaults: named prepared statements fail, as the reference says");
	}
	$bouncer->{handle}->kill_kill;
}

done_testing();
