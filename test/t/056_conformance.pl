# The HTTP conformance suite (test/conformance/README.md): the same cases,
# test/conformance/client.py, against every setup of every middleware package
# (each middleware/<language>/conformance/run), with the package installed as
# its users install it.  One TAP line per check and setup.
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
# The same as the client's connection string.
my %conninfo = (PGHOST => 'host', PGPORT => 'port', PGDATABASE => 'dbname', PGUSER => 'user');

for my $run (@packages)
{
	my $dir = $run =~ s{/conformance/run$}{}r;
	# An absolute path: IPC::Run looks the program up before the chdir of its init.
	$run = abs_path($run);
	my ($setups, $why) = ('', '');
	IPC::Run::run([ $run, 'setups' ], '>', \$setups, '2>', \$why,
		init => sub { chdir $dir or die "chdir $dir: $!" });
	my @setups = grep { /\S/ } split /\n/, $setups;
	if (!@setups)
	{
		note "$dir: no setup can run here: $why";
		next;
	}
	my $prepared = PostgreSQL::Test::Utils::tempdir();
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ $run, 'prepare', $prepared ],
		init => sub { chdir $dir or die "chdir $dir: $!" },
		'>', \$out, '2>', \$err, IPC::Run::timeout(1800));
	ok($ok, "$dir: the package installs as its users install it") or diag("$out\n$err");
	next unless $ok;
	run_setup($dir, $run, $prepared, $_) for @setups;
}

done_testing();

# Serves one setup and runs the cases against it.
sub run_setup
{
	my ($dir, $run, $prepared, $setup) = @_;
	my $port = free_tcp_port();
	my $log = "$prepared/$setup.log";
	my $server = IPC::Run::start([ $run, 'serve', $prepared, $setup, $port ],
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
				'--dsn', join(' ', map { "$conninfo{$_}=$database{$_}" } sort keys %database) ],
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
