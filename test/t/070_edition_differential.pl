# The cross-edition differential test (doc/sql-edition.md): first the
# surface (every function's arguments, defaults and result, the result rows'
# columns, the outcomes) compared between the editions; then the same random
# sequences of claims, completions, checkpoints, releases, forgets, lookups,
# listings, savepoints, rollbacks, prepared transactions, cancelled waits and
# terminated sessions (test/differential/claims.py) run against the extension
# and against the SQL edition, each on a server of its own: the answers
# and the final tables must agree wherever doc/sql-edition.md's table does
# not say otherwise, and no claimed answer may contradict what the other
# transactions hold or what committed.  Then the same digests, or the same
# SQLSTATE, for random and hostile inputs of every request_hash constructor
# (test/differential/digests.py), and request_hash_body's bytes rule in a
# database that is not UTF8.  DIFFERENTIAL_SECONDS sets how long the
# sequences run (60 by default).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# The extension on a server that preloads it, with no expiry worker (a sweep
# holds key locks for a moment, which the driver would take for a wait of its
# own); the edition on one that does not, as on a managed server.
my $node = new_node('extension',
	conf => [ 'max_prepared_transactions = 10', 'idempotency.worker_enabled = off' ]);
my $edition_node = new_node('edition',
	conf => [ 'max_prepared_transactions = 10', "shared_preload_libraries = ''" ]);
$node->safe_psql('postgres', 'CREATE DATABASE extension');
$edition_node->safe_psql('postgres', 'CREATE DATABASE edition');
$node->safe_psql('extension', 'CREATE EXTENSION idempotency');
$edition_node->safe_psql('edition', 'CREATE EXTENSION idempotency_sql');
sub dsn
{
	my $server = $_[0] eq 'edition' ? $edition_node : $node;
	return sprintf('host=%s port=%d dbname=%s', $server->host, $server->port, $_[0]);
}

# The contract's surface: every function of the extension's schema with its
# argument list (names, defaults), result, volatility and parallel safety,
# the result row types' columns and the outcomes, the same in the edition but
# for the rows of doc/sql-edition.md's table (and the edition's own calls).
my $surface = q{
	SELECT 'function ' || p.proname || '(' || pg_get_function_arguments(p.oid) || ') -> '
	       || coalesce(pg_get_function_result(p.oid), 'procedure') || ' volatile=' || p.provolatile::text
	       || ' parallel=' || p.proparallel::text || ' strict=' || p.proisstrict::text
	  FROM pg_proc AS p WHERE p.pronamespace = 'public'::regnamespace
	UNION ALL
	SELECT 'column ' || t.typname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
	       || ' #' || a.attnum
	  FROM pg_type AS t JOIN pg_attribute AS a ON a.attrelid = t.typrelid
	 WHERE t.typnamespace = 'public'::regnamespace AND t.typtype = 'c' AND a.attnum > 0 AND NOT a.attisdropped
	UNION ALL
	SELECT 'label ' || t.typname || '.' || e.enumlabel || ' #' || e.enumsortorder
	  FROM pg_type AS t JOIN pg_enum AS e ON e.enumtypid = t.oid
	 WHERE t.typnamespace = 'public'::regnamespace
	ORDER BY 1};
my %extension_surface = map { $_ => 1 } split /\n/, $node->safe_psql('extension', $surface);
my %edition_surface = map { $_ => 1 } split /\n/, $edition_node->safe_psql('edition', $surface);
# The table's rows: Citus, the type's support functions and its untyped
# constructor; the edition's tenants and schedule.
my $extension_only = qr/^function (idempotency_distribute|request_hash_(in|out|recv|send|eq|ne|lt|le|gt|ge|cmp|hash|hash_extended))\(|^function request_hash\(unknown\)/;
my $edition_only = qr/^function idempotency_(tenant_isolation|schedule_expiry|unschedule_expiry|expire_batches)\(/;
my @missing = grep { !$edition_surface{$_} && !/$extension_only/ } sort keys %extension_surface;
my @extra = grep { !$extension_surface{$_} && !/$edition_only/ } sort keys %edition_surface;
ok(keys %extension_surface > 40 && !@missing && !@extra,
	'the edition has every function, argument, default, result column and outcome of the extension')
  or diag(join("\n", 'only the extension:', @missing, 'only the edition:', @extra));
for my $call (qw(idempotency_begin idempotency_complete idempotency_checkpoint idempotency_release
	idempotency_forget idempotency_lookup idempotency_keys idempotency_expire idempotency_stats
	idempotency_scope_stats idempotency_key_problem request_hash_jsonb request_hash_body))
{
	ok((grep { /^function \Q$call\E\(/ } keys %edition_surface), "the edition has $call");
}
for my $argument ('text', 'bytea', 'jsonb', 'character varying', 'character', 'VARIADIC text[]')
{
	ok($edition_surface{"function request_hash($argument) -> request_hash volatile=i parallel=s strict=true"},
		"the edition has request_hash($argument)");
}

my $seconds = $ENV{DIFFERENTIAL_SECONDS} // 60;
my ($stdout, $stderr);
my $passed = IPC::Run::run(
	[
		'/usr/bin/python3', 'test/differential/claims.py',
		'--dsn', dsn('extension'), '--edition', dsn('edition'), '--seconds', $seconds
	],
	'>', \$stdout, '2>', \$stderr);
ok($passed, "the editions answer alike, for $seconds s of random sequences") or diag("$stdout\n$stderr");
like($stdout, qr/^[1-9]\d* sequences of \d+ operations .* and on the SQL edition\) .* 0 differences, 0 violations$/m,
	'the driver ran sequences on both editions and found nothing');
# Completions, prepared transactions and newest-state lookups succeeded: an
# operation that always failed would compare equal everywhere.
for my $what ('complete', 'PREPARE', 'COMMIT PREPARED', 'ROLLBACK PREPARED', 'latest=True')
{
	my ($count) = $stdout =~ /^succeeded: .*\b\Q$what\E (\d+)/m;
	ok(($count // 0) > 0, "the sequences ran $what successfully") or diag($stdout);
}
note $stdout;

# Digests: every input, both editions by the fingerprint rules of 0.5.0.
$passed = IPC::Run::run(
	[
		'/usr/bin/python3', 'test/differential/digests.py',
		'--extension', dsn('extension'), '--edition', dsn('edition'), '--count', 3000
	],
	'>', \$stdout, '2>', \$stderr);
ok($passed, 'the editions give the same digest, or the same error, for every input') or diag("$stdout\n$stderr");
like($stdout, qr/^[1-9]\d* inputs gave the same digest/m, 'digests were compared');
note $stdout;

# request_hash_body in a database that is not UTF8: every body by its bytes
# (fingerprint rules of 0.5.0: JSON is UTF-8 text, and read as LATIN1
# distinct bodies would collide), JSON or not, with the reserved prefix kept
# apart as everywhere.
my $latin1_bodies = q{
	SELECT string_agg((request_hash_body(content_type, body)::text
	                   = encode(sha256(CASE WHEN substr(body, 1, 25) = 'idempotency.request_hash.'::bytea
	                                        THEN 'idempotency.request_hash.bytes\000'::bytea || body ELSE body END),
	                            'hex'))::text, ' ' ORDER BY n)
	  FROM (VALUES (1, 'application/json', '{"a": 1}'::bytea), (2, 'application/json', '{"a":1}'::bytea),
	               (3, 'application/vnd.api+json', '[1.50, "x"]'::bytea), (4, 'application/json', '\x22e922'::bytea),
	               (5, 'application/json', '\x22c3a922'::bytea), (6, 'text/plain', '{"a": 1}'::bytea),
	               (7, 'application/json', 'idempotency.request_hash.jsonb.v1'::bytea)) AS b (n, content_type, body)};
my %latin1;
for my $edition ([ $node, 'idempotency' ], [ $edition_node, 'idempotency_sql' ])
{
	my ($server, $extension) = @$edition;
	$server->safe_psql('postgres', "CREATE DATABASE latin1 ENCODING 'LATIN1' LOCALE 'C' TEMPLATE template0");
	$server->safe_psql('latin1', "CREATE EXTENSION $extension");
	$latin1{$extension} = $server->safe_psql('latin1', $latin1_bodies);
}
my $by_bytes = join(' ', ('true') x 7);
is($latin1{idempotency_sql}, $by_bytes, 'the edition hashes every body by its bytes in a LATIN1 database');
is($latin1{idempotency}, $latin1{idempotency_sql}, 'the editions give the same body digests in a LATIN1 database');

done_testing();
