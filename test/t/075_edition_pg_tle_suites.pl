# The SQL edition's pg_regress and isolation suites (test/edition/inputs, as
# test/run runs them against the extension-directory install) against the
# edition installed through pg_tle: pgtle.install_extension by the generated
# idempotency_sql.pgtle.sql, in each suite's database, on a server where the
# extension directory has no idempotency_sql (as on a managed server) and the
# extension's library is not loaded.  pg_tle is not in Debian: without it
# (built by hand from its source and installed into the PostgreSQL under
# test), this test skips, saying so.
use strict;
use warnings;
use File::Basename qw(dirname);
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_pg_tle_node('tle_suites');
plan skip_all => 'pg_tle is not installed in this PostgreSQL (build it by hand to run this test)'
  unless $node;

my $forms = PostgreSQL::Test::Utils::tempdir;
system('perl', 'edition/generate', $forms) == 0 or BAIL_OUT('edition/generate failed');
my $inputs = PostgreSQL::Test::Utils::tempdir;
my %names;
for my $kind ('regress', 'isolation')
{
	my $list = `bash test/edition/inputs '$inputs' $kind`;
	$? == 0 or BAIL_OUT("test/edition/inputs $kind failed");
	$names{$kind} = [ split /\n/, $list ];
}
ok(@{ $names{regress} } > 5 && @{ $names{isolation} } > 5, 'the suites are there');

# Each suite's database: pg_tle, and the edition registered with it.
for my $db ('edition_regression', 'edition_isolation')
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION pg_tle');
	my ($out, $err);
	IPC::Run::run(
		[
			'psql', '-X', '-q', '-h', $node->host, '-p', $node->port, '-d', $db,
			'-f', "$forms/idempotency_sql.pgtle.sql"
		],
		'>', \$out, '2>', \$err)
	  or BAIL_OUT("registering the edition with pg_tle in $db: $err");
	is($node->safe_psql($db, q{SELECT count(*) FROM pgtle.available_extensions() WHERE name = 'idempotency_sql'}),
		'1', "$db: the edition is registered with pg_tle");
}

my $regress = $ENV{PG_REGRESS} or BAIL_OUT('PG_REGRESS is not set');
my $isolation = dirname(dirname($regress)) . '/isolation/pg_isolation_regress';
my %suite = (
	regress => [ $regress, $inputs, 'edition_regression' ],
	isolation => [ $isolation, "$inputs/iso", 'edition_isolation' ]);
mkdir "$inputs/iso";
symlink '../specs', "$inputs/iso/specs";
symlink '../iso-expected', "$inputs/iso/expected";
for my $kind ('regress', 'isolation')
{
	my ($driver, $inputdir, $db) = @{ $suite{$kind} };
	my $outputdir = PostgreSQL::Test::Utils::tempdir;
	my ($out, $err) = ('', '');
	IPC::Run::run(
		[
			$driver, '--use-existing', "--bindir=", '--host=' . $node->host, '--port=' . $node->port,
			"--inputdir=$inputdir", "--outputdir=$outputdir", "--dbname=$db",
			# 16 and later read the expected outputs from the working
			# directory's expected/ (the extension's) unless told.
			($node->pg_version >= 16 ? ("--expecteddir=$inputdir") : ()), @{ $names{$kind} }
		],
		'>', \$out, '2>', \$err);
	for my $name (@{ $names{$kind} })
	{
		# 15 prints "test api ... ok", 16 and later "ok 1 - api".
		my $passed = $out =~ /^(?:test +| +)\Q$name\E +\.\.\. ok |^ok +\d+ +[-+] +\Q$name\E /m;
		ok($passed, "$kind $name through pg_tle")
		  or diag(-e "$outputdir/regression.diffs" ? slurp_file("$outputdir/regression.diffs") : "$out\n$err");
	}
}

done_testing();
