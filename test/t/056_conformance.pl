# The HTTP conformance suite (test/conformance/README.md): the same cases,
# test/conformance/client.py, against every setup of every middleware package
# (each middleware/<language>/conformance/run), with the package installed as
# its users install it.  One TAP line per check and setup.  Then the first
# setup of each package once more, on a database with the SQL edition
# (doc/sql-edition.md) instead of the extension, on a server without the
# extension's library, with no option changed, as an application role with
# README.md's grants.
#
# The adapters do not depend on the server's major version, so the suite runs
# where CONFORMANCE is not 0; test/chroot sets it to 0 for PostgreSQL 17 and
# 18, and CI runs it once, on the host's PostgreSQL.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Cwd qw(abs_path);

plan skip_all => 'CONFORMANCE=0: the HTTP conformance suite runs on the host\'s PostgreSQL (make test)'
  if ($ENV{CONFORMANCE} // '1') eq '0';

# CONFORMANCE_PACKAGES="go node" runs only those packages' setups, while one works on them.
my @packages = sort glob('middleware/*/conformance/run');
if (my @only = split ' ', $ENV{CONFORMANCE_PACKAGES} // '')
{
	my %only = map { $_ => 1 } @only;
	@packages = grep { m{^middleware/([^/]+)/} && $only{$1} } @packages;
}
plan skip_all => 'no middleware package has a conformance/run' unless @packages;

my $python = -x '/usr/bin/python3' ? '/usr/bin/python3' : 'python3';
my ($node, %database) = new_orders_database('conformance', conf => ['max_connections = 300']);
# The SQL edition on a server of its own that does not load the extension's
# library, as a managed server does not.
my $edition_node = new_node('conformance_sql', conf => [ 'max_connections = 300', "shared_preload_libraries = ''" ]);
# The package connects as an application role with README.md's grants ("On
# a managed PostgreSQL") and its own table, as a team there would; the
# cases' client, which reads idempotency.keys, as the owner.
my %edition_client = (%database, PGHOST => $edition_node->host, PGPORT => $edition_node->port,
	PGDATABASE => 'conformance_sql');
my %edition_database = (%edition_client, PGUSER => 'conformance_app');
$edition_node->safe_psql('postgres', 'CREATE DATABASE conformance_sql');
$edition_node->safe_psql('conformance_sql', q{
	CREATE EXTENSION idempotency_sql;
	CREATE TABLE orders (id bigserial PRIMARY KEY, item text NOT NULL);
	CREATE ROLE conformance_app LOGIN;
	GRANT EXECUTE ON FUNCTION idempotency_begin, idempotency_complete, idempotency_checkpoint,
	                          idempotency_release, idempotency_lookup, idempotency_forget,
	                          idempotency_keys TO conformance_app;
	GRANT SELECT, INSERT ON orders TO conformance_app;
	GRANT USAGE ON SEQUENCE orders_id_seq TO conformance_app;
});
# The same as the client's connection string.
my %conninfo = (PGHOST => 'host', PGPORT => 'port', PGDATABASE => 'dbname', PGUSER => 'user');

for my $run (@packages)
{
	my $dir = $run =~ s{/conformance/run$}{}r;
	# An absolute path: IPC::Run looks the program up before the chdir of its init.
	$run = abs_path($run);
	my ($listed, $why) = conformance_setups($run, $dir);
	my @setups = @$listed;
	if (!@setups)
	{
		note "$dir: no setup can run here: $why";
		next;
	}
	my $prepared = prepare_conformance($run, $dir) or next;
	run_setup($dir, $run, $prepared, $_, \%database, '') for @setups;
	run_setup($dir, $run, $prepared, $setups[0], \%edition_database, ' (SQL edition)', \%edition_client);
}

done_testing();

# Serves one setup on a database (libpq's environment) and runs the cases
# against it, their client connected as $client (default: the same); $label
# follows the setup's name in each check.
sub run_setup
{
	my ($dir, $run, $prepared, $setup_name, $database, $label, $client) = @_;
	my %database = %$database;
	my %client = %{ $client // $database };
	my $setup = "$setup_name$label";
	my $port = free_tcp_port();
	my $log = "$prepared/$setup_name" . ($label ? '-sql' : '') . '.log';
	my $server = IPC::Run::start([ $run, 'serve', $prepared, $setup_name, $port ],
		'<', \'', '>', $log, '2>&1',
		init => sub {
			chdir $dir or die "chdir $dir: $!";
			@ENV{ keys %database } = values %database;
		});
	my $up = wait_for_health($port, $server);
	ok($up, "$setup: the server answers GET /health") or diag(log_tail($log));
	if ($up)
	{
		my ($out, $err) = ('', '');
		my $ran = IPC::Run::run(
			[ $python, 'test/conformance/client.py', '--url', "http://127.0.0.1:$port",
				'--dsn', join(' ', map { "$conninfo{$_}=$client{$_}" } sort keys %client) ],
			'>', \$out, '2>', \$err, IPC::Run::timeout(1800));
		# Each check, with the "#   " lines of diagnostics that follow a failed one.
		my $checks = 0;
		for my $check ($out =~ /^((?:not )?ok - .*\n(?:#   .*\n)*)/mg)
		{
			my ($failed, $name, $details) = $check =~ /^(not )?ok - (.*)\n((?:.*\n)*)/;
			$checks++;
			ok(!$failed, "$setup: $name") or diag($details);
		}
		ok($checks >= 20 && $ran, "$setup: every case ran") or diag("$out\n$err\n" . log_tail($log));
	}
	$server->kill_kill(grace => 30);    # TERM, then KILL if it has not stopped
	return;
}
