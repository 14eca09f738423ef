# The harness works and the library loads at server start: its settings exist
# before any of its functions is called, and the extension installs and drops
# cleanly.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('main');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'idempotency'");
ok($node->start(fail_ok => 1), 'a server preloading idempotency starts')
  or BAIL_OUT('the server did not start; see its log');

sub query { return $node->safe_psql('postgres', shift); }

is(query('SHOW idempotency.default_ttl'),
	'1d', 'idempotency.default_ttl exists before the extension is created');

my ($ret, $stdout, $stderr) = $node->psql('postgres', 'CREATE EXTENSION idempotency');
is($ret, 0, 'CREATE EXTENSION idempotency succeeds');
is($stderr, '', 'CREATE EXTENSION idempotency says nothing on stderr');

my ($default_version) = slurp_file('idempotency.control') =~ /^default_version\s*=\s*'([^']+)'/m;
is(query(q{SELECT extversion FROM pg_extension WHERE extname = 'idempotency'}),
	$default_version, 'the extension is installed at its default version');
is(query(q{SELECT count(*) FROM pg_namespace WHERE nspname = 'idempotency'}),
	'1', 'schema idempotency exists');
is(query(q{SELECT to_regclass('idempotency.keys') IS NOT NULL}),
	't', 'table idempotency.keys exists');

($ret, $stdout, $stderr) = $node->psql('postgres', 'DROP EXTENSION idempotency');
is($ret, 0, 'DROP EXTENSION idempotency succeeds');

is(query(q{SELECT count(*) FROM pg_namespace WHERE nspname = 'idempotency'}),
	'0', 'no schema idempotency is left');
is( query(
		q{SELECT count(*) FROM pg_type
		  WHERE typname IN ('request_hash', '_request_hash', 'idempotency_outcome', '_idempotency_outcome')}
	),
	'0',
	'no type request_hash or idempotency_outcome is left');
is( query(
		q{SELECT count(*) FROM pg_proc
		  WHERE proname LIKE 'idempotency\_%' OR proname LIKE 'request\_hash%'}),
	'0',
	'no function idempotency_* or request_hash* is left');

$node->stop;
unlike(slurp_file($node->logfile), qr/\b(?:ERROR|FATAL|PANIC):/,
	'the server log has no ERROR, FATAL or PANIC line');

# Without shared_preload_libraries the functions work, but nothing expires
# keys and nothing counts: CREATE EXTENSION warns, and so does
# idempotency_stats().
my $plain = PostgreSQL::Test::Cluster->new('not_preloaded');
$plain->init;
$plain->append_conf('postgresql.conf', "shared_preload_libraries = ''");
$plain->start;
($ret, $stdout, $stderr) = $plain->psql('postgres', 'CREATE EXTENSION idempotency');
is($ret, 0, 'CREATE EXTENSION succeeds without preloading');
like($stderr, qr/WARNING:  idempotency is not in shared_preload_libraries: keys will not expire/,
	'CREATE EXTENSION warns that the library is not preloaded');
is($plain->safe_psql('postgres', 'SELECT preloaded FROM idempotency_stats()'),
	'f', 'idempotency_stats() says it is not preloaded');
$plain->stop;

done_testing();
