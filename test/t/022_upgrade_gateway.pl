# Upgrading from 0.1.0 when tenants are isolated through a gateway role: the
# gateway logs in with idempotency.tenant_isolation = role and does SET ROLE
# to each tenant, so 0.1.0 kept the tenant's keys under '<tenant oid>/scope'
# although the tenant role carries no setting.  ALTER EXTENSION UPDATE moves
# them to the tenant column with the rest: every key, in every state, answers
# the tenant as before, and a role without isolation no longer reaches it by
# typing the prefixed scope.  A database that went to 0.2.0 before this was
# fixed gets a WARNING on its update to 0.3.0, and the documented migration
# moves the keys it left behind.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# No expiry worker: the keys here must stay as written until the update.
my $node = new_node('gateway', conf => ['idempotency.worker_enabled = off']);
sub query { my ($db, $sql) = @_; return $node->safe_psql($db, $sql); }

query('postgres', q{
	CREATE ROLE gateway LOGIN;
	ALTER ROLE gateway SET idempotency.tenant_isolation = role;
	CREATE ROLE tenant_g NOLOGIN;
	GRANT tenant_g TO gateway;
	CREATE ROLE app LOGIN;
	CREATE DATABASE chained;
	CREATE DATABASE stepwise;
});
my $tenant = query('postgres', q{SELECT oid FROM pg_roles WHERE rolname = 'tenant_g'});

# The gateway's session as the tenant, and the application's (no isolation).
sub as_tenant
{
	my ($db, $sql) = @_;
	return $node->safe_psql($db, "SET ROLE tenant_g; $sql", extra_params => [ '-U', 'gateway' ]);
}
sub as_app
{
	my ($db, $sql) = @_;
	return $node->safe_psql($db, $sql, extra_params => [ '-U', 'app' ]);
}

# Every key as the tenant's retries see it.
my $answers_sql = q{
	SELECT string_agg(format('%s/%s: %s %s %s %s', r.scope, r.key, b.outcome, b.attempt,
	                         b.response_body, b.recovery_point), E'\n' ORDER BY r.scope, r.key)
	  FROM (VALUES ('shop', 'done', 'POST /orders'), ('pay', 'held', 'charge'),
	               ('pay', 'released', 'charge'), ('shop', 'flaky', 'POST /orders'),
	               ('shop', 'other', 'POST /orders')) AS r(scope, key, request),
	       LATERAL idempotency_begin(r.scope, r.key, request_hash(r.request::text), lease => '1 hour') AS b};
my $expected_answers = join("\n",
	'pay/held: in_progress 1  ',
	'pay/released: claimed 2  step 1',
	'shop/done: replay 1 {"order": 1} ',
	'shop/flaky: claimed 2  ',
	'shop/other: mismatch 1  ');

for my $db ('chained', 'stepwise')
{
	query($db, q{
		CREATE EXTENSION idempotency VERSION '0.1.0';
		GRANT EXECUTE ON FUNCTION
		    idempotency_begin(text, text, request_hash, interval, interval, interval),
		    idempotency_complete(text, text, integer, jsonb, jsonb, integer),
		    idempotency_checkpoint(text, text, text, interval, integer),
		    idempotency_release(text, text, integer),
		    idempotency_lookup(text, text)
		    TO app, tenant_g;
	});
	# Keys in every state, written by the tenant through the gateway.
	as_tenant($db, q{
		BEGIN;
		SELECT idempotency_begin('shop', 'done', request_hash('POST /orders'::text));
		SELECT idempotency_complete('shop', 'done', 201, '{"order": 1}');
		COMMIT;
		SELECT idempotency_begin('pay', 'held', request_hash('charge'::text), lease => '1 hour');
		SELECT idempotency_begin('pay', 'released', request_hash('charge'::text), lease => '1 hour');
		SELECT idempotency_checkpoint('pay', 'released', 'step 1');
		SELECT idempotency_release('pay', 'released');
		BEGIN;
		SELECT idempotency_begin('shop', 'flaky', request_hash('POST /orders'::text));
		SELECT idempotency_complete('shop', 'flaky', 503);
		COMMIT;
		BEGIN;
		SELECT idempotency_begin('shop', 'other', request_hash('DELETE /orders'::text));
		SELECT idempotency_complete('shop', 'other', 200);
		COMMIT;
	});
	is(query($db, q{SELECT count(*) FROM idempotency.keys WHERE scope LIKE '%/%'}),
		'5', "$db: 0.1.0 keeps the gateway tenant's keys under '<oid>/scope'");
	is(as_tenant($db, "BEGIN; $answers_sql; ROLLBACK;"), $expected_answers,
		"$db: under 0.1.0 the tenant's retries replay, wait, take over and mismatch");
}

# ---------------------------------------------------------------------------
# From 0.1.0 in one ALTER EXTENSION UPDATE
# ---------------------------------------------------------------------------
my ($ret, $stdout, $stderr) = $node->psql('chained', 'ALTER EXTENSION idempotency UPDATE');
is($ret, 0, 'chained: ALTER EXTENSION UPDATE from 0.1.0');
is($stderr, '', 'chained: without a warning');
is(query('chained', q{SELECT string_agg(tenant || ' ' || scope || '/' || key, ', ' ORDER BY scope, key) FROM idempotency.keys}),
	'tenant_g pay/held, tenant_g pay/released, tenant_g shop/done, tenant_g shop/flaky, tenant_g shop/other',
	"chained: the gateway tenant's keys moved to the tenant column");
is(as_tenant('chained', "BEGIN; $answers_sql; ROLLBACK;"), $expected_answers,
	'chained: every key answers the tenant as before the update');
is(as_app('chained', qq{SELECT count(*) FROM idempotency_lookup('$tenant/shop', 'done')}),
	'0', 'chained: a role without isolation no longer reads it through the old scope');

# ---------------------------------------------------------------------------
# Through 0.2.0 first, as before this fix: the keys stay behind, the update
# to 0.3.0 warns, and the documented migration moves them
# ---------------------------------------------------------------------------
query('stepwise', q{ALTER EXTENSION idempotency UPDATE TO '0.2.0'});
is(query('stepwise', q{SELECT count(*) FROM idempotency.keys WHERE tenant = 0 AND scope LIKE '%/%'}),
	'5', 'stepwise: the update to 0.2.0 leaves the keys without a tenant');
($ret, $stdout, $stderr) = $node->psql('stepwise', 'ALTER EXTENSION idempotency UPDATE');
is($ret, 0, 'stepwise: the update to the current version succeeds');
like($stderr, qr/WARNING:  5 keys without a tenant have a scope that starts with the OID of an isolated tenant/,
	'stepwise: and warns about the keys left behind');

# The migration in doc/install.md's "Upgrading" section, as written there.
my ($migration) = slurp_file('doc/install.md') =~ /<!-- gateway-migration -->\n```sql\n(.*?)```/s;
ok(defined $migration, 'doc/install.md has the migration');
query('stepwise', $migration =~ s/\btenant_a\b/tenant_g/gr);
is(query('stepwise', q{SELECT string_agg(tenant || ' ' || scope || '/' || key, ', ' ORDER BY scope, key) FROM idempotency.keys}),
	'tenant_g pay/held, tenant_g pay/released, tenant_g shop/done, tenant_g shop/flaky, tenant_g shop/other',
	'stepwise: the migration moved them to the tenant column');
is(as_tenant('stepwise', "BEGIN; $answers_sql; ROLLBACK;"), $expected_answers,
	'stepwise: every key answers the tenant as under 0.1.0');

done_testing();
