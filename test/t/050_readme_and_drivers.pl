# The README's examples, run exactly as written, by the role they are written
# for, through real drivers and through a connection pooler:
#  * the setup block as a superuser, then the SQL and PL/pgSQL handlers as the
#    application role, which has nothing but the README's grants;
#  * the Python handlers (test/drivers/readme_handlers.py) with psycopg 3 --
#    its defaults, which prepare named statements, and prepare_threshold=None
#    -- and psycopg2, which binds on the client: new requests, byte-exact
#    replays, 50 simultaneous duplicates writing one order, an untyped
#    request_hash() refused, a forgotten BEGIN refused, a bad key;
#  * the same through PgBouncer in transaction mode, the README's settings for
#    the PgBouncer version at hand: named prepared statements work from 1.21
#    with max_prepared_statements; before that they fail with 26000, as the
#    README says, and the unprepared settings work.
# Needs python3 with psycopg (3) and psycopg2, and pgbouncer (Debian:
# python3-psycopg, python3-psycopg2, pgbouncer); skips, saying so, without.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $readme = 'README.md';
my %blocks = slurp_file($readme) =~ /<!-- tested: (\S+) -->\n```\w*\n(.*?)\n```/gs;
ok(scalar(keys %blocks) >= 7, 'the README has its tested examples') or diag(join ', ', keys %blocks);

my $node = new_node('readme');
my ($ret, $stdout, $stderr) = $node->psql('postgres', $blocks{'setup.sql'});
is($ret, 0, 'the setup block runs as a superuser') or diag($stderr);

sub as_app
{
	my ($sql) = @_;
	my ($ret, $stdout, $stderr) =
	  $node->psql('postgres', $sql, extra_params => [ '-U', 'app' ], on_error_stop => 1);
	return ($ret, $stdout, $stderr);
}

for my $block (qw(orders.sql handler.sql))
{
	($ret, $stdout, $stderr) = as_app($blocks{$block});
	is($ret, 0, "$block runs as the application role") or diag($stderr);
}
($ret, $stdout, $stderr) = as_app($blocks{'replay.sql'});
is($stdout, 'replay|201|{"order": 1}|{"Location": "/orders/1"}', 'replay.sql replays, as its comment shows')
  or diag($stderr);
($ret, $stdout, $stderr) = as_app($blocks{'place_order.sql'});
is($stdout, 'claimed', 'place_order.sql creates the function and claims, as its comment shows')
  or diag($stderr);
is($node->safe_psql('postgres', 'SELECT string_agg(item || qty, \' \' ORDER BY id) FROM orders'),
	'book1 pen2', 'each handler wrote its order once');

# ---------------------------------------------------------------------------
# Python drivers
# ---------------------------------------------------------------------------
my $python = '/usr/bin/python3';
SKIP:
{
	skip 'python3 with psycopg and psycopg2 is not installed (Debian: python3-psycopg, python3-psycopg2)', 1
	  unless system($python, '-c', 'import psycopg, psycopg2') == 0;

	# Runs the handlers in $mode against $dsn and passes their TAP lines on.
	sub run_handlers
	{
		my ($label, $dsn, $mode, @scenarios) = @_;
		my ($out, $err) = ('', '');
		IPC::Run::run([ $python, 'test/drivers/readme_handlers.py', $readme, $dsn, $mode, @scenarios ],
			'>', \$out, '2>', \$err);
		my @lines = grep { /^(not )?ok - / } split /\n/, $out;
		ok(@lines > 0, "$label: the handlers ran") or diag($err);
		for my $line (@lines)
		{
			my ($failed, $name) = $line =~ /^(not )?ok - (.*)$/;
			ok(!$failed, "$label: $name");
		}
		return $out;
	}

	my $direct = sprintf('host=%s port=%d dbname=postgres user=app', $node->host, $node->port);
	run_handlers('psycopg 3', $direct, 'psycopg');
	run_handlers('psycopg 3, prepare_threshold=None', $direct, 'psycopg-unprepared');
	run_handlers('psycopg2', $direct, 'psycopg2');

	# -----------------------------------------------------------------------
	# PgBouncer, transaction pooling
	# -----------------------------------------------------------------------
	my ($pgbouncer) = grep { -x } map { "$_/pgbouncer" } split(/:/, $ENV{PATH}), '/usr/sbin';
	skip 'pgbouncer is not installed (Debian: pgbouncer)', 1 unless $pgbouncer;
	my ($version) = `$pgbouncer --version` =~ /PgBouncer (\d+\.\d+)/;
	my ($major, $minor) = split /\./, $version;
	my $prepared_statements = $major > 1 || $minor >= 21;
	my $dir = PostgreSQL::Test::Utils::tempdir_short;
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	PostgreSQL::Test::Utils::append_to_file("$dir/users.txt", qq{"app" ""\n});
	PostgreSQL::Test::Utils::append_to_file(
		"$dir/pgbouncer.ini", sprintf(qq{
[databases]
postgres = host=%s port=%d dbname=postgres
[pgbouncer]
listen_addr =
listen_port = %d
unix_socket_dir = %s
auth_type = trust
auth_file = %s/users.txt
pool_mode = transaction
default_pool_size = 4
max_client_conn = 200
logfile = %s/pgbouncer.log
pidfile = %s/pgbouncer.pid
%s
}, $node->host, $node->port, $port, $dir, $dir, $dir, $dir,
			$prepared_statements ? 'max_prepared_statements = 100' : ''));
	my $bouncer = IPC::Run::start([ $pgbouncer, "$dir/pgbouncer.ini" ], '>', \my $bouncer_out, '2>', \my $bouncer_err);
	my $pooled = "host=$dir port=$port dbname=postgres user=app";
	my $up = 0;
	for (1 .. 100)
	{
		last if ($up = -S "$dir/.s.PGSQL.$port");
		select(undef, undef, undef, 0.1);
	}
	ok($up, "PgBouncer $version runs in transaction mode") or diag($bouncer_err);

	# Four server connections for 50 clients: each transaction may land on
	# any of them.
	run_handlers("PgBouncer $version, psycopg 3, prepare_threshold=None", $pooled, 'psycopg-unprepared');
	run_handlers("PgBouncer $version, psycopg2", $pooled, 'psycopg2');
	if ($prepared_statements)
	{
		run_handlers("PgBouncer $version with max_prepared_statements, psycopg 3 defaults",
			$pooled, 'psycopg');
	}
	else
	{
		# Named statements prepared on one server connection are missing on the
		# next: the README says to turn them off before PgBouncer 1.21.
		my ($out, $err) = ('', '');
		IPC::Run::run(
			[ $python, 'test/drivers/readme_handlers.py', $readme, $pooled, 'psycopg', 'prepared_concurrently' ],
			'>', \$out, '2>', \$err);
		like($out, qr/^not ok - .*prepared statement "_pg3_\d+" (?:does not exist|already exists)/m,
			"PgBouncer $version, psycopg 3 defaults: named prepared statements fail, as the README says");
	}
	$bouncer->kill_kill;
}

done_testing();
