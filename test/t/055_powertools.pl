# AWS Lambda Powertools (Python) over the extension: the persistence layer in
# middleware/python/pg_idempotency/powertools.py passes Powertools' own
# idempotency end-to-end suites (DynamoDB and Redis, 13 tests), run here by
# middleware/python/tests/powertools_lambda.py instead of on AWS, and its own
# cases (middleware/python/tests/powertools_cases.py).  Powertools is in
# neither Debian nor this repository: set POWERTOOLS_SRC to a checkout of
# aws-powertools/powertools-lambda-python (its tests/e2e are used, unchanged;
# PYTHONPATH may add what its imports need).  Skips, saying so, without it.
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
my $source = $ENV{POWERTOOLS_SRC} // '';
plan skip_all => 'POWERTOOLS_SRC does not name a checkout of powertools-lambda-python'
  unless $source && -d "$source/tests/e2e/idempotency";
local $ENV{PYTHONPATH} = join ':', grep { length } $ENV{PYTHONPATH} // '', $source;
plan skip_all => 'python3 cannot import Powertools, psycopg and pytest (Debian: python3-psycopg python3-pytest '
  . 'python3-jmespath python3-typing-extensions)'
  unless system($python, '-c',
	'import aws_lambda_powertools.utilities.idempotency, psycopg, pytest') == 0;

my $node = new_node('powertools');
$node->safe_psql('postgres', 'CREATE DATABASE powertools');
$node->safe_psql('powertools', 'CREATE EXTENSION idempotency');
my $user = getpwuid($<);

my @suites = map { "$source/tests/e2e/$_" }
  qw(idempotency/test_idempotency_dynamodb.py idempotency_redis/test_idempotency_redis.py);
my ($out, $err) = ('', '');
my $ran = IPC::Run::run(
	[
		$python, '-m', 'pytest', '-rA', '-p', 'no:cacheprovider', '-p', 'powertools_lambda',
		'--noconftest', '-c', '/dev/null', "--rootdir=$source",
		'-W', 'ignore::pytest.PytestUnknownMarkWarning',
		@suites, 'middleware/python/tests/powertools_cases.py'
	],
	'>', \$out, '2>', \$err,
	init => sub {
		$ENV{PYTHONPATH} .= ':middleware/python/tests';
		@ENV{qw(PGHOST PGPORT PGDATABASE PGUSER POWERTOOLS_SRC)} =
		  ($node->host, $node->port, 'powertools', $user, $source);
	});
my @results = $out =~ /^((?:PASSED|FAILED|ERROR) \S+)/mg;
is(scalar(grep { m{/tests/e2e/} || m{^\w+ tests/e2e/} } @results), 13,
	"Powertools' 13 end-to-end idempotency tests ran")
  or diag("$out\n$err");
for my $result (@results)
{
	my ($status, $name) = split / /, $result, 2;
	is($status, 'PASSED', $name) or diag($out);
}
ok($ran, 'pytest exits 0') or diag("$out\n$err");

# The records are the extension's: completed keys of the Powertools scope.
ok($node->safe_psql('powertools',
		q{SELECT count(*) FROM idempotency.keys WHERE scope = 'powertools' AND status = 'c'}) > 0,
	'the suites stored their results as completed keys');

done_testing();
