# Backup by pg_dump: idempotency.keys is registered with
# pg_extension_config_dump, so a dump carries CREATE EXTENSION and every key.
# A restore into a new database (custom format through pg_restore, plain
# format through psql) reproduces each key exactly -- request hash, status,
# attempt, lease, timestamps, recovery point, response -- and the restored
# keys behave as before: completed ones replay, a running lease holds,
# an ended one is taken over, another request is a mismatch.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('dump');
$node->command_ok([ 'createdb', 'source' ], 'createdb source');
$node->safe_psql('source',
	q{CREATE EXTENSION idempotency;
	  CREATE TABLE orders (idem_key text PRIMARY KEY, total numeric NOT NULL)});

sub query { my ($db, $sql) = @_; return $node->safe_psql($db, $sql); }

# ---------------------------------------------------------------------------
# Keys in every state, in several scopes
# ---------------------------------------------------------------------------
my $unicode_body = q{'{"customer": "Zoë Ørsted", "note": "日本語 ✓ 🚀", "esc": "tab\tquote\"",
  "lines": [{"sku": "A-1", "qty": 2, "price": 12.50, "tags": ["x", null, true]}],
  "nested": {"a": {"b": [[], {}, [1e3, -0.5]]}}}'::jsonb};
# About 85 kB of barely compressible text: stored out of line (TOAST).
my $large_body = q{(SELECT jsonb_build_object('rows', jsonb_agg(md5(i::text) || md5((-i)::text) ORDER BY i))
  FROM generate_series(1, 1200) AS i)};

# scope, key, request, status, body, headers, begin's named arguments; each
# is run the one-phase way and is completed (4xx included) -- but a 503,
# which is not stored: its claim stays in progress with its lease ended.
my @completed = (
	[ 'shop', 'order-1', 'POST /orders 1', 201, q{'{"order": 1}'}, q{'{"Location": "/orders/1"}'} ],
	[ 'shop', 'order-2', 'POST /orders 2', 200, $unicode_body, 'NULL', { ttl => '2 days' } ],
	[ 'shop', 'no-body', 'DELETE /orders/1', 204, 'NULL', 'NULL' ],
	[ 'shop', 'invalid', 'POST /orders bad', 422, q{'{"error": "invalid"}'}, 'NULL' ],
	[ 'reports', 'monthly', 'GET /reports/monthly', 200, $large_body, q{'{"Content-Type": "application/json"}'} ],
	[ 'other-shop', 'order-1', 'POST /orders 1', 201, q{'{"order": "elsewhere"}'}, 'NULL', { ttl => '1 hour' } ]);
for my $request (@completed)
{
	my ($scope, $key, $text, $status, $body, $headers, $claim) = @$request;
	is( run_request(
			$node, 'source', $scope, $key, $text, $status,
			body => $body,
			headers => $headers,
			claim => $claim // {},
			write => sprintf('INSERT INTO orders VALUES (%s, %d)', quote("$scope/$key"), $status)),
		"claimed 1\nt",
		"source: $scope/$key is completed with $status");
}
is(run_request($node, 'source', 'shop', 'flaky', 'POST /flaky', 503, body => q{'{"error": "down"}'}),
	"claimed 1\nf", 'source: shop/flaky gets a 503, which is not stored');

# Two-phase: pay/charge-1 is running (a lease of an hour, a recovery point);
# pay/charge-2 was released, taken over as attempt 2 and completed by it.
is(begin_request($node, 'source', 'pay', 'charge-1', 'charge 10 EUR', lease => '1 hour')->{outcome},
	'claimed', 'source: pay/charge-1 is claimed with a lease of an hour');
query('source',
	q{SELECT idempotency_checkpoint('pay', 'charge-1', 'provider-called', attempt => 1, lease => '1 hour')});
is(begin_request($node, 'source', 'pay', 'charge-2', 'charge 20 EUR', lease => '1 hour')->{outcome},
	'claimed', 'source: pay/charge-2 is claimed');
query('source', q{SELECT idempotency_release('pay', 'charge-2', attempt => 1)});
is(begin_request($node, 'source', 'pay', 'charge-2', 'charge 20 EUR')->{attempt},
	2, 'source: pay/charge-2 is taken over as attempt 2');
query('source',
	q{SELECT idempotency_checkpoint('pay', 'charge-2', 'captured', attempt => 2);
	  SELECT idempotency_complete('pay', 'charge-2', 200, '{"charged": "20 EUR"}', attempt => 2)});

# A tenant's key (idempotency.tenant_isolation = role): stored under a
# digest made with the tenant's number in idempotency.tenants, which the dump
# carries with the keys, and the sequence that numbers the next tenant.
query('postgres', q{
	CREATE ROLE dump_tenant LOGIN;
	ALTER ROLE dump_tenant SET idempotency.tenant_isolation = role;
	CREATE ROLE dump_tenant_later LOGIN;
	ALTER ROLE dump_tenant_later SET idempotency.tenant_isolation = role});
query('source', 'GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO dump_tenant, dump_tenant_later');
my $tenant_request = q{
	BEGIN;
	SELECT outcome FROM idempotency_begin('shop', 'tenant-order', request_hash('POST /orders 1'::text));
	SELECT idempotency_complete('shop', 'tenant-order', 201, '{"order": "the tenant''s"}');
	COMMIT;};
sub as_role
{
	my ($db, $role, $sql) = @_;
	return $node->safe_psql($db, $sql, extra_params => [ '-U', $role ]);
}
as_role('source', 'dump_tenant', $tenant_request);
my $tenant_replay = q{SELECT outcome || ' ' || response_body
	FROM idempotency_begin('shop', 'tenant-order', request_hash('POST /orders 1'::text))};
is(as_role('source', 'dump_tenant', $tenant_replay), q{replay {"order": "the tenant's"}},
	'source: the tenant replays its own shop/tenant-order');
my $tenant_numbers = q{SELECT string_agg(number || '=' || role::text, ' ' ORDER BY number) FROM idempotency.tenants};
is(query('source', $tenant_numbers), '1=dump_tenant', 'source: the tenant is numbered');

my $source_keys = keys_text($node, 'source');
my $source_orders = query('source', 'SELECT string_agg(o::text, E\'\n\' ORDER BY idem_key) FROM orders AS o');
is( query('source',
		q{SELECT string_agg(status::text || ':' || count, ' ' ORDER BY status)
		  FROM (SELECT status, count(*) FROM idempotency.keys GROUP BY status) AS s}),
	'c:8 p:2',
	'source holds 8 completed keys and 2 in progress');
ok(body_is_toasted($node, 'source'), 'the large body is stored out of line in the TOAST table');

# ---------------------------------------------------------------------------
# A restored database equals the source and behaves like it
# ---------------------------------------------------------------------------

sub check_restored
{
	my ($db, $how) = @_;
	is( query($db, q{SELECT extversion FROM pg_extension WHERE extname = 'idempotency'}),
		query('source', q{SELECT extversion FROM pg_extension WHERE extname = 'idempotency'}),
		"$how: the restore created the extension at the source's version");
	is(keys_text($node, $db), $source_keys,
		"$how: idempotency.keys is identical to the source, row by row");
	is(query($db, 'SELECT string_agg(o::text, E\'\n\' ORDER BY idem_key) FROM orders AS o'),
		$source_orders, "$how: the business table is identical to the source");

	# Retries see the restored state.  Every lookup goes through the primary
	# key index the restore rebuilt.
	for my $request (@completed)
	{
		my ($scope, $key, $text) = @$request;
		is( replayed_response($node, $db, [ $scope, $key, $text ]),
			'replay | ' . stored_response($node, 'source', $scope, $key),
			"$how: a retry of $scope/$key replays the source's response");
	}
	is(begin_request($node, $db, 'shop', 'order-1', 'POST /orders 999')->{outcome},
		'mismatch', "$how: the restored request hash still tells another request apart");
	my $running = begin_request($node, $db, 'pay', 'charge-1', 'charge 10 EUR');
	is(fields($running, qw(outcome attempt)), 'in_progress | 1',
		"$how: the running two-phase claim is still in progress as attempt 1");
	cmp_ok($running->{retry_after_s}, '>', 3000, "$how: its restored lease still runs");
	my $replay = begin_request($node, $db, 'pay', 'charge-2', 'charge 20 EUR');
	is(fields($replay, qw(outcome attempt response_body)),
		'replay | 2 | {"charged": "20 EUR"}',
		"$how: the key completed by attempt 2 replays attempt 2's response");
	my $flaky = begin_request($node, $db, 'shop', 'flaky', 'POST /flaky');
	is(fields($flaky, qw(outcome attempt)), 'claimed | 2',
		"$how: the dropped claim (503) is taken over as attempt 2");
	# The tenant: its number, its key; a tenant numbered after the restore
	# gets the next number, never one the source handed out.
	is(query($db, $tenant_numbers), '1=dump_tenant', "$how: the tenants' numbers are the source's");
	query($db, 'GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO dump_tenant, dump_tenant_later');
	is(as_role($db, 'dump_tenant', $tenant_replay), q{replay {"order": "the tenant's"}},
		"$how: the tenant replays its own shop/tenant-order");
	as_role($db, 'dump_tenant_later', $tenant_request);
	is(query($db, $tenant_numbers), '1=dump_tenant 2=dump_tenant_later',
		"$how: a tenant numbered after the restore gets the next number");
	return;
}

# The database must come from the restore alone: created empty, without the
# extension.
sub create_empty_database
{
	my ($db) = @_;
	$node->command_ok([ 'createdb', $db ], "createdb $db");
	is(query($db, q{SELECT count(*) FROM pg_extension WHERE extname = 'idempotency'}),
		'0', "$db starts without the extension");
	return;
}

# Custom format, pg_restore into a new database.
my $archive = $node->basedir . '/source.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $archive, '-d', 'source' ], 'pg_dump -Fc source');
my ($toc) = run_command([ 'pg_restore', '-l', $archive ]);
like($toc, qr/ EXTENSION - idempotency\b/, 'the archive creates the extension');
like($toc, qr/ TABLE DATA idempotency keys\b/, "the archive holds idempotency.keys's rows");
like($toc, qr/ TABLE DATA idempotency tenants\b/, "and idempotency.tenants's");
like($toc, qr/ SEQUENCE SET idempotency tenant_numbers\b/, 'and the sequence of tenant numbers');
create_empty_database('restored_custom');
my ($stdout, $stderr);
ok( $node->run_log(
		[ 'pg_restore', '--exit-on-error', '-d', 'restored_custom', $archive ],
		'>', \$stdout, '2>', \$stderr),
	'pg_restore into restored_custom succeeds');
is($stderr, '', 'pg_restore reports nothing');
check_restored('restored_custom', 'pg_dump -Fc | pg_restore');

# Plain format piped into psql.
create_empty_database('restored_plain');
ok( $node->run_log(
		[ 'pg_dump', '-Fp', '-d', 'source' ], '|',
		[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', 'restored_plain' ],
		'>', \$stdout, '2>', \$stderr),
	'pg_dump -Fp source | psql restored_plain succeeds');
is($stderr, '', 'the plain restore reports nothing');
check_restored('restored_plain', 'pg_dump -Fp | psql');

is(keys_text($node, 'source'), $source_keys, 'the dumps left the source unchanged');

$node->stop;
done_testing();
