# Every middleware package behind PgBouncer in transaction mode, with each of
# its drivers at their defaults: node-postgres, psycopg 3 and psycopg2, lib/pq
# and pgx, pgjdbc.  Named prepared statements are not pooled (PgBouncer before
# 1.21, as Debian 12's 1.18; max_prepared_statements = 0 from 1.21), so the
# drivers that name statements meet names prepared by other clients on the
# server connection they land on: errors, which are allowed, and statements run
# as another client's (pgjdbc's COMMIT as another client's ROLLBACK), which
# must never give a wrong answer.  Each driver's conformance setup
# (middleware/<language>/conformance/run) serves the order application through
# the pooler; test/conformance/duplicates.py sends concurrent duplicates and
# retries and checks every answer against the database: no 2xx for work that
# did not commit, no work run twice, one body per key.  The counts of answers
# and errors by kind are notes.
#
# Like the conformance suite (t/056), it runs where CONFORMANCE is not 0, with
# the setups whose toolchains are installed; skips, saying so, without
# PgBouncer (Debian: pgbouncer).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use Cwd qw(abs_path);
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

plan skip_all => 'CONFORMANCE=0: the pooler test runs on the host\'s PostgreSQL (make test)'
  if ($ENV{CONFORMANCE} // '1') eq '0';

# The setup of each driver: package => [setup, ...].
my %drivers = (
	go => [ 'go-libpq', 'go-pgx' ],
	java => ['tomcat10-pgjdbc'],
	node => ['express5'],
	python => [ 'flask-psycopg', 'flask-psycopg2' ]);

my $python = -x '/usr/bin/python3' ? '/usr/bin/python3' : 'python3';
my ($node, %database) = new_orders_database('pooler', conf => ['max_connections = 100']);
my $bouncer = start_pgbouncer($node, 'pooler', $database{PGUSER}, named_statements => 0);
plan skip_all => 'pgbouncer is not installed (Debian: pgbouncer)' unless $bouncer;
ok($bouncer->{up}, "PgBouncer $bouncer->{version} runs in transaction mode, named statements not pooled")
  or diag(slurp_file($bouncer->{log}));
my ($socket_dir) = $bouncer->{connstr} =~ /host=(\S+)/;
my %pooled = (%database, PGHOST => $socket_dir, PGPORT => $bouncer->{port});
# The database itself, not through the pooler, for the duplicates' checks.
my $dsn = "host=$database{PGHOST} port=$database{PGPORT} dbname=$database{PGDATABASE} user=$database{PGUSER}";

for my $package (sort keys %drivers)
{
	my $dir = "middleware/$package";
	my $run = abs_path("$dir/conformance/run");
	my ($listed, $why) = conformance_setups($run, $dir);
	my %listed = map { $_ => 1 } @$listed;
	my @setups = grep { $listed{$_} } @{ $drivers{$package} };
	if (!@setups)
	{
		note "$dir: no setup of its drivers can run here: $why";
		next;
	}
	my $prepared = prepare_conformance($run, $dir) or next;
	run_setup($dir, $run, $prepared, $_) for @setups;
}

$bouncer->{handle}->kill_kill;
done_testing();

# Serves one setup through the pooler and sends it the duplicates.
sub run_setup
{
	my ($dir, $run, $prepared, $setup) = @_;
	my $port = free_tcp_port();
	my $log = "$prepared/$setup.log";
	my $server = IPC::Run::start([ $run, 'serve', $prepared, $setup, $port ],
		'<', \'', '>', $log, '2>&1',
		init => sub {
			chdir $dir or die "chdir $dir: $!";
			@ENV{ keys %pooled } = values %pooled;
		});
	my $up = wait_for_health($port, $server);
	ok($up, "$setup: the server answers GET /health through PgBouncer") or diag(log_tail($log));
	if ($up)
	{
		my ($out, $err) = ('', '');
		IPC::Run::run(
			[ $python, 'test/conformance/duplicates.py', '--url', "http://127.0.0.1:$port", '--dsn', $dsn ],
			'>', \$out, '2>', \$err, IPC::Run::timeout(1800));
		my ($json) = $out =~ /^(\{.*\})$/m;
		my $summary = $json ? eval { decode_json($json) } : undef;
		if (ok($summary && $summary->{requests} > 0, "$setup: the duplicates ran"))
		{
			my %answers = %{ $summary->{answers} };
			note(sprintf('%s through PgBouncer: %d keys, %d requests; %s; %d keys without a 2xx; %d wrong',
				$setup, $summary->{keys}, $summary->{requests},
				join(', ', map { "$_: $answers{$_}" } sort keys %answers),
				$summary->{keys_without_2xx}, $summary->{wrong}));
			is($summary->{wrong}, 0,
				"$setup: no wrong answer (no 2xx for work that did not commit, no work run twice)")
			  or diag(join("\n", $out =~ /^(# wrong: .*)$/mg));
			ok(($answers{first} // 0) > 0, "$setup: requests were served through the pooler")
			  or diag("$out\n$err\n" . log_tail($log));
		}
		else
		{
			diag("$out\n$err\n" . log_tail($log));
		}
	}
	$server->kill_kill(grace => 30);
	return;
}
