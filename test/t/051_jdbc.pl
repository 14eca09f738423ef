# The SQL surface through pgjdbc with its default settings
# (test/drivers/JdbcDefaults.java): setString's varchar and
# setObject(..., Types.CHAR)'s bpchar taken by request_hash(?), varchar by
# request_hash_jsonb(?), jsonb arguments cast from it, statements prepared on
# the server after prepareThreshold uses, replays, retry_after_seconds as an
# int.  Needs javac and pgjdbc (Debian: default-jdk-headless,
# libpostgresql-jdbc-java, which test/run installs); skips, saying so,
# without.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $jar = '/usr/share/java/postgresql.jar';
my ($javac_found) = grep { -x "$_/javac" } split /:/, $ENV{PATH};
plan skip_all => "javac and $jar are needed (Debian: default-jdk-headless, libpostgresql-jdbc-java)"
  unless $javac_found && -r $jar;

# pgjdbc speaks TCP only.
my $node = new_node('jdbc', conf => [ "listen_addresses = '127.0.0.1'" ]);
$node->append_conf('pg_hba.conf', 'host all all 127.0.0.1/32 trust');
$node->reload;
$node->safe_psql('postgres', 'CREATE EXTENSION idempotency');

my $classes = PostgreSQL::Test::Utils::tempdir();
my $compiled;
ok(IPC::Run::run([ 'javac', '-d', $classes, 'test/drivers/JdbcDefaults.java' ], '>&', \$compiled),
	'the JDBC check compiles')
  or diag $compiled;

my $user = $node->safe_psql('postgres', 'SELECT current_user');

# Runs the check against the JDBC URL $url and passes its lines on.
sub run_check
{
	my ($label, $url) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'java', '-cp', "$jar:$classes", 'JdbcDefaults', $url ], '>', \$out, '2>', \$err);
	my @lines = split /\n/, $out;
	my ($planned) = map { /^1\.\.(\d+)$/ ? $1 : () } @lines;
	is($planned, 6, "$label: the JDBC check ran to its end") or diag $err;
	for my $line (grep { /^(not )?ok \d+ - / } @lines)
	{
		my ($not, $what) = $line =~ /^(not )?ok \d+ - (.*)$/;
		ok(!$not, "$label: $what");
	}
	return;
}

run_check('pgjdbc defaults', sprintf('jdbc:postgresql://127.0.0.1:%d/postgres?user=%s', $node->port, $user));

# Through PgBouncer in transaction mode, with the setting doc/reference.md
# gives for pgjdbc before PgBouncer 1.21 (prepareThreshold=0: no named
# statements), or its defaults from 1.21 with max_prepared_statements.
SKIP:
{
	my $bouncer = start_pgbouncer($node, 'postgres', $user, tcp => 1);
	skip 'pgbouncer is not installed (Debian: pgbouncer)', 1 unless $bouncer;
	ok($bouncer->{up}, "PgBouncer $bouncer->{version} runs in transaction mode") or diag(slurp_file($bouncer->{log}));
	my $url = sprintf('jdbc:postgresql://127.0.0.1:%d/postgres?user=%s', $bouncer->{port}, $user);
	if ($bouncer->{prepared_statements})
	{
		run_check("PgBouncer $bouncer->{version} with max_prepared_statements, pgjdbc defaults", $url);
	}
	else
	{
		run_check("PgBouncer $bouncer->{version}, pgjdbc with prepareThreshold=0", "$url&prepareThreshold=0");
	}
	$bouncer->{handle}->kill_kill;
}

$node->stop;
done_testing();
