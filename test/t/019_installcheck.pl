# The PGXS test targets, as a user runs them after make install:
#  * make installcheck against a server that preloads the library runs the
#    pg_regress suite (sql/) and the isolation specs (test/specs/), every one
#    of each, and they pass;
#  * against a server that does not preload it, make installcheck stops at
#    once, saying why and what to do, before any suite runs (the isolation
#    specs need the preload), and make installcheck ISOLATION= runs the
#    pg_regress suite alone, which passes there too: without the preload there
#    are no deferred claims and no statistics, and the tests whose output
#    depends on that compare with the answer the server's configuration calls
#    for, so that one expected file holds for both;
#  * make prove_installcheck runs a TAP script on nodes of its own, in a copy
#    of the tree (it empties tmp_check/, where this script's nodes live), with
#    the Makefile's TEMP_CONFIG and what the project's scripts rely on.
# make is run from the repository root (prove's working directory under
# test/run), with the PostgreSQL whose bin directory comes first in PATH, as
# make test's.
use strict;
use warnings;
use File::Basename qw(basename dirname);
use File::Copy qw(copy);
use File::Path qw(make_path);
use File::Temp qw(tempdir);
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# Runs make with ARGS in DIR, connected to NODE (if any), in an environment
# without test/run's settings for its own TAP run; returns (passed, stdout,
# stderr).
sub run_make
{
	my ($dir, $node, @args) = @_;
	my ($stdout, $stderr) = ('', '');
	my $passed = IPC::Run::run(
		[ 'make', '--no-print-directory', '-C', $dir, @args ],
		'>', \$stdout, '2>', \$stderr,
		init => sub {
			delete @ENV{qw(PGUSER TEMP_CONFIG TESTDIR TESTDATADIR TESTLOGDIR PG_REGRESS)};
			@ENV{qw(PGHOST PGPORT)} = ($node->host, $node->port) if $node;
		});
	return ($passed, $stdout, $stderr);
}

# The tests a pg_regress-style driver reported as passed, by suite ("regress"
# or "isolation", from PGXS's "+++ regress install-check" header): 15 prints
# "test api ... ok" ("     api ... ok" inside a parallel group), 16 and
# later "ok 1 - api" ("+" inside a parallel group).
sub passed_tests
{
	my ($stdout) = @_;
	my (%passed, $suite);
	for my $line (split /\n/, $stdout)
	{
		if ($line =~ /\+\+\+ (\w+) install-check/) { $suite = $1; }
		elsif (defined $suite
			&& $line =~ /^(?:test +| +)(\S+) +\.\.\. ok |^ok +\d+ +[-+] +(\S+)/)
		{
			push @{ $passed{$suite} }, $1 // $2;
		}
	}
	return \%passed;
}

my @regress = sort map { basename($_, '.sql') } grep { !m{/idempotency--} } glob('sql/*.sql');
my @specs = sort map { basename($_, '.spec') } glob('test/specs/*.spec');
ok(@regress >= 10 && @specs >= 10, 'the tree has pg_regress tests and isolation specs');

# A server that preloads the library (test/idempotency.conf), without the
# expiry worker, as test/run's cluster runs the suites.
my $preloaded = new_node('preloaded', conf => ['idempotency.worker_enabled = off']);
my ($passed, $stdout, $stderr) = run_make('.', $preloaded, 'installcheck');
note $stdout;
ok($passed, 'make installcheck passes against a server that preloads the library')
  or diag($stderr
	  . (-e 'regression.diffs' ? slurp_file('regression.diffs') : '')
	  . (-e 'output_iso/regression.diffs' ? slurp_file('output_iso/regression.diffs') : ''));
my $ran = passed_tests($stdout);
is(join(' ', sort @{ $ran->{regress} // [] }), join(' ', @regress),
	'make installcheck ran every pg_regress test, and each passed');
is(join(' ', sort @{ $ran->{isolation} // [] }), join(' ', @specs),
	'make installcheck ran every isolation spec, and each passed');

my $unpreloaded = new_node('unpreloaded', conf => ["shared_preload_libraries = ''"]);
is($unpreloaded->safe_psql('postgres', 'SHOW shared_preload_libraries'),
	'', 'the server does not preload the library');
($passed, $stdout, $stderr) = run_make('.', $unpreloaded, 'installcheck');
ok(!$passed, 'make installcheck fails against a server that does not preload the library');
like($stderr, qr/does not preload the library.*shared_preload_libraries.*make installcheck ISOLATION=/s,
	'it says why, and how to run the pg_regress suite alone');
unlike($stdout, qr/install-check/, 'it stops before any suite runs');

($passed, $stdout, $stderr) = run_make('.', $unpreloaded, 'installcheck', 'ISOLATION=');
note $stdout;
ok($passed, 'make installcheck ISOLATION= passes against a server that does not preload the library')
  or diag($stderr . (-e 'regression.diffs' ? slurp_file('regression.diffs') : ''));
$ran = passed_tests($stdout);
is(join(' ', sort @{ $ran->{regress} // [] }), join(' ', @regress),
	'it ran every pg_regress test, and each passed');
ok(!exists $ran->{isolation}, 'it ran no isolation spec');

# make prove_installcheck in a copy of what a TAP script needs, with a script
# that shows what the target gives it: the working directory (the tree's
# root), test/t/ as the library path, the PostgreSQL of PATH where make
# install put the extension, and test/idempotency.conf in every node.
my $copy = tempdir(CLEANUP => 1);
for my $file (qw(Makefile idempotency.control test/idempotency.conf test/t/IdempotencyTest.pm))
{
	make_path("$copy/" . dirname($file));
	copy($file, "$copy/$file") or die "copy $file: $!";
}
my $probe = 'test/t/900_probe.pl';
open my $script, '>', "$copy/$probe" or die "$probe: $!";
print $script <<'PROBE';
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use PostgreSQL::Test::Utils;
use Test::More;
ok(-f 'idempotency.control', 'the working directory is the root of the tree');
my $node = new_node('probe');
is($node->safe_psql('postgres', 'SHOW shared_preload_libraries'), 'idempotency',
	'the node preloads the library');
$node->safe_psql('postgres', 'CREATE EXTENSION idempotency');
is($node->safe_psql('postgres', q{SELECT outcome FROM idempotency_begin('s', 'k', request_hash('r'::text), lease => '1 minute')}),
	'claimed', 'the extension works');
done_testing();
PROBE
close $script or die "$probe: $!";
($passed, $stdout, $stderr) = run_make($copy, undef, 'prove_installcheck', "PROVE_TESTS=$probe");
note $stdout;
ok($passed, 'make prove_installcheck runs a TAP script, which passes') or diag("$stdout\n$stderr");
like($stdout, qr{^\Q$probe\E \.+ ok$}m, 'prove ran the script that PROVE_TESTS names');
my @logs = glob("$copy/tmp_check/log/900_probe_*.log");
ok(@logs == 1, 'its node logged in tmp_check/log of the tree it ran in');
# Into this script's log directory, so that test/run's log gate reads it too.
copy($_, "$PostgreSQL::Test::Utils::log_path/019_prove_" . basename($_)) for @logs;

done_testing();
