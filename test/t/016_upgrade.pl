# Upgrading from 0.1.0: keys in every state written under 0.1.0 -- by this
# library, which serves a table still at 0.1.0 until ALTER EXTENSION UPDATE,
# as it must between a package upgrade and that command -- keep replaying,
# holding and taking over after the update; a tenant's keys move from 0.1.0's
# '<oid>/scope' form to the tenant column; the roles granted EXECUTE keep it,
# also through a dump; the upgraded objects equal a fresh install's; and a
# dump taken under 0.1.0 restores under 0.2.0 by the documented procedure.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# The expiry worker stays off: the test keeps an expired key (shop/old-key)
# and checks that the update moves it, which a sweep every 10 seconds would
# race on a slow machine.  Expiry has its own tests (013, 020).
my $node = new_node('upgrade', conf => ['idempotency.worker_enabled = off']);
sub query { my ($db, $sql) = @_; return $node->safe_psql($db, $sql); }
sub as_role { my ($role, $sql) = @_; return "SET ROLE $role; $sql"; }

my ($version) = slurp_file('idempotency.control') =~ /^default_version\s*=\s*'([^']+)'/m;

# ---------------------------------------------------------------------------
# 0.1.0, as its users set it up: grants by signature, a tenant per role
# ---------------------------------------------------------------------------
query('postgres', q{
	CREATE ROLE app LOGIN;
	CREATE ROLE admin LOGIN;
	CREATE ROLE tenant_a LOGIN;
	ALTER ROLE tenant_a SET idempotency.tenant_isolation = role;
	CREATE DATABASE old;
});
query('old', q{
	CREATE EXTENSION idempotency VERSION '0.1.0';
	GRANT EXECUTE ON FUNCTION
	    idempotency_begin(text, text, request_hash, interval, interval, interval),
	    idempotency_complete(text, text, integer, jsonb, jsonb, integer),
	    idempotency_checkpoint(text, text, text, interval, integer),
	    idempotency_release(text, text, integer),
	    idempotency_lookup(text, text)
	    TO app, tenant_a;
	GRANT EXECUTE ON FUNCTION idempotency_complete(text, text, integer, jsonb, jsonb, integer)
	    TO admin WITH GRANT OPTION;
	CREATE TABLE orders (id serial PRIMARY KEY, idem_key text);
	GRANT INSERT ON orders TO app;
	GRANT USAGE ON SEQUENCE orders_id_seq TO app;
});
is(query('old', q{SELECT extversion FROM pg_extension WHERE extname = 'idempotency'}),
	'0.1.0', 'installed at 0.1.0');

# A tenant's session: the role's setting applies from login, as in production.
sub as_tenant
{
	my ($db, $sql) = @_;
	return $node->safe_psql($db, $sql, extra_params => [ '-U', 'tenant_a' ]);
}
sub as_app
{
	my ($db, $sql) = @_;
	return $node->safe_psql($db, $sql, extra_params => [ '-U', 'app' ]);
}

# Keys in every state, written through 0.1.0's functions by this library.
as_app('old', q{
	BEGIN;
	SELECT idempotency_begin('shop', 'done', request_hash('POST /orders'::text));
	INSERT INTO orders (idem_key) VALUES ('done');
	SELECT idempotency_complete('shop', 'done', 201, '{"order": 1, "price": 10.10}', '{"Location": "/orders/1"}');
	COMMIT;
	SELECT idempotency_begin('pay', 'held', request_hash('charge'::text), lease => '1 hour');
	SELECT idempotency_checkpoint('pay', 'held', 'provider-called', attempt => 1);
	SELECT idempotency_begin('pay', 'released', request_hash('charge'::text), lease => '1 hour');
	SELECT idempotency_checkpoint('pay', 'released', 'step 1');
	SELECT idempotency_release('pay', 'released');
	BEGIN;
	SELECT idempotency_begin('shop', 'flaky', request_hash('POST /orders'::text));
	SELECT idempotency_complete('shop', 'flaky', 503);
	COMMIT;
	BEGIN;
	SELECT idempotency_begin('shop', 'old-key', request_hash('POST /orders'::text), ttl => '1 second');
	SELECT idempotency_complete('shop', 'old-key', 200);
	COMMIT;
});
as_tenant('old', q{
	BEGIN;
	SELECT idempotency_begin('shop', 'done', request_hash('tenant request'::text));
	SELECT idempotency_complete('shop', 'done', 201, '{"tenant": "a"}');
	COMMIT;
});
query('old', q{UPDATE idempotency.keys SET expires_at = now() - interval '1 hour' WHERE key = 'old-key'});
my $tenant_a = query('postgres', q{SELECT oid FROM pg_roles WHERE rolname = 'tenant_a'});
is(query('old', q{SELECT string_agg(scope || '/' || key, ', ' ORDER BY scope, key) FROM idempotency.keys}),
	"$tenant_a/shop/done, pay/held, pay/released, shop/done, shop/flaky, shop/old-key",
	'0.1.0 stores a tenant\'s keys under "<oid>/scope"');

# The dump a 0.1.0 user has, for the restore test at the end.
my $old_dump = PostgreSQL::Test::Utils::tempdir . '/old.sql';
$node->command_ok([ 'pg_dump', '-d', $node->connstr('old'), '-f', $old_dump ],
	'pg_dump of the 0.1.0 database');

# Every key as the API answers it, for the same request.
my $answers_sql = q{
	SELECT string_agg(format('%s/%s: %s %s %s %s %s', scope, key, b.outcome, b.attempt,
	                         b.response_status, b.response_body, b.recovery_point), E'\n'
	                  ORDER BY scope, key)
	  FROM (VALUES ('shop', 'done', 'POST /orders'), ('pay', 'held', 'charge'),
	               ('shop', 'flaky', 'POST /orders'), ('shop', 'old-key', 'POST /orders'))
	       AS r(scope, key, request),
	       LATERAL idempotency_begin(scope, key, request_hash(request::text)) AS b};
my $answers_before = as_app('old', "BEGIN; $answers_sql; ROLLBACK;");
is( $answers_before,
	join("\n",
		'pay/held: in_progress 1   ',
		'shop/done: replay 1 201 {"order": 1, "price": 10.10} ',
		'shop/flaky: claimed 2   ',
		'shop/old-key: claimed 1   '),
	'before the update: replay, in progress, takeover and a fresh claim over an expired key');

# 0.1.0's idempotency_stats() declares other columns: until the update, the
# library refuses it with an error (it must not answer in the wrong types).
my ($stats_rc, $stats_out, $stats_err) =
  $node->psql('old', 'SELECT * FROM idempotency_stats()', on_error_stop => 1);
like($stats_err, qr/idempotency_stats\(\) is declared by an older version.*\n.*ALTER EXTENSION idempotency UPDATE/,
	'before the update, idempotency_stats() asks for the update');

# ---------------------------------------------------------------------------
# ALTER EXTENSION UPDATE
# ---------------------------------------------------------------------------
query('old', 'ALTER EXTENSION idempotency UPDATE');
ok(query('old', 'SELECT claims >= 0 FROM idempotency_stats()') eq 't',
	'after the update, idempotency_stats() answers');
is(query('old', q{SELECT extversion FROM pg_extension WHERE extname = 'idempotency'}),
	$version, "updated to $version");
is(as_app('old', "BEGIN; $answers_sql; ROLLBACK;"), $answers_before,
	'after the update every key answers as before');
is( as_app('old', q{
		BEGIN;
		SELECT outcome || ' ' || attempt || ' ' || recovery_point
		  FROM idempotency_begin('pay', 'released', request_hash('charge'::text), lease => '1 hour');
		ROLLBACK;}),
	'claimed 2 step 1', 'a released claim is taken over with its recovery point');
is(query('old', q{SELECT string_agg(tenant || ' ' || scope || '/' || key, ', ' ORDER BY tenant::text, scope, key)
	FROM idempotency.keys}),
	'- pay/held, - pay/released, - shop/done, - shop/flaky, - shop/old-key, tenant_a shop/done',
	"the tenant's key moved to the tenant column");
is( as_tenant('old',
		q{SELECT outcome || ' ' || response_body FROM idempotency_begin('shop', 'done', request_hash('tenant request'::text))}),
	'replay {"tenant": "a"}', 'the tenant replays its key after the update');
is( as_app('old', qq{SELECT count(*) FROM idempotency_lookup('$tenant_a/shop', 'done')}),
	'0', 'and no other role reaches it through the old scope');

# Privileges: the roles that could call 0.1.0's functions can call 0.2.0's.
as_app('old', q{
	BEGIN;
	SELECT idempotency_begin('shop', 'after', request_hash('r'::text));
	SELECT idempotency_complete('shop', 'after', 201, response_body_bytes => '\x7b7d');
	COMMIT;});
is( as_app('old', q{SELECT outcome || ' ' || encode(response_body_bytes, 'escape')
		  FROM idempotency_begin('shop', 'after', request_hash('r'::text))}),
	'replay {}', 'the application role calls the new complete');
is( query('old', q{
		SELECT string_agg(a.grantee::regrole || CASE WHEN a.is_grantable THEN ' (grantable)' ELSE '' END,
		                  ', ' ORDER BY a.grantee::regrole::text)
		  FROM pg_proc AS p, aclexplode(p.proacl) AS a
		 WHERE p.proname = 'idempotency_complete' AND a.grantee <> p.proowner}),
	'admin (grantable), app, tenant_a', 'EXECUTE on the replaced function went to the same roles');

# ---------------------------------------------------------------------------
# The upgraded objects equal a fresh install's
# ---------------------------------------------------------------------------
my $objects_sql = q{
	WITH ext AS (SELECT oid FROM pg_extension WHERE extname = 'idempotency'),
	members AS (SELECT classid, objid, objsubid FROM pg_depend, ext
	             WHERE refclassid = 'pg_extension'::regclass AND refobjid = ext.oid AND deptype = 'e')
	SELECT string_agg(line, E'\n' ORDER BY line) FROM (
	    SELECT 'member ' || pg_describe_object(classid, objid, objsubid) || ': '
	           || coalesce(obj_description(objid, classid::regclass::name), '(no comment)') AS line
	      FROM members
	    UNION ALL
	    SELECT 'function ' || pg_get_functiondef(objid) FROM members
	     WHERE classid = 'pg_proc'::regclass AND (SELECT prokind FROM pg_proc WHERE oid = objid) = 'f'
	    UNION ALL
	    SELECT format('column %s.%s %s %s %s %s: %s', c.relname, a.attnum, a.attname,
	                  format_type(a.atttypid, a.atttypmod), a.attnotnull,
	                  pg_get_expr(d.adbin, d.adrelid), coalesce(col_description(c.oid, a.attnum), ''))
	      FROM members AS m JOIN pg_class AS c ON m.classid = 'pg_class'::regclass AND c.oid = m.objid
	      JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
	      LEFT JOIN pg_attrdef AS d ON d.adrelid = c.oid AND d.adnum = a.attnum
	    UNION ALL
	    SELECT format('type %s attribute %s %s %s', t.typname, a.attnum, a.attname,
	                  format_type(a.atttypid, a.atttypmod))
	      FROM members AS m JOIN pg_type AS t ON m.classid = 'pg_type'::regclass AND t.oid = m.objid
	      JOIN pg_attribute AS a ON a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped
	    UNION ALL
	    SELECT 'index ' || pg_get_indexdef(indexrelid) FROM pg_index
	     WHERE indrelid = 'idempotency.keys'::regclass
	    UNION ALL
	    SELECT 'constraint ' || conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint
	     WHERE conrelid = 'idempotency.keys'::regclass
	    UNION ALL
	    SELECT 'initial privileges ' || pg_describe_object(i.classoid, i.objoid, i.objsubid) || ' '
	           || i.initprivs::text
	      FROM pg_init_privs AS i JOIN members AS m ON m.classid = i.classoid AND m.objid = i.objoid
	) AS lines};
query('postgres', 'CREATE DATABASE fresh');
query('fresh', 'CREATE EXTENSION idempotency');
my $fresh_objects = query('fresh', $objects_sql);
is(query('old', $objects_sql), $fresh_objects,
	'the upgraded objects, comments, columns, indexes and initial privileges equal a fresh install');

# A dump of the upgraded database keeps the application's grants: they are
# not mistaken for the extension's initial privileges.
my $dump = PostgreSQL::Test::Utils::tempdir . '/upgraded.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-d', $node->connstr('old'), '-f', $dump ],
	'pg_dump of the upgraded database');
query('postgres', 'CREATE DATABASE upgraded_copy');
$node->command_ok([ 'pg_restore', '-d', $node->connstr('upgraded_copy'), $dump ],
	'pg_restore of it');
is( as_app('upgraded_copy',
		q{SELECT outcome || ' ' || response_body FROM idempotency_begin('shop', 'done', request_hash('POST /orders'::text))}),
	'replay {"order": 1, "price": 10.10}', 'the application role calls the restored functions');

# ---------------------------------------------------------------------------
# A dump taken under 0.1.0, restored where 0.2.0 is installed: create the
# extension at 0.1.0, restore into it, then update (doc/install.md, "Upgrading").
# ---------------------------------------------------------------------------
query('postgres', 'CREATE DATABASE restored');
query('restored', q{CREATE EXTENSION idempotency VERSION '0.1.0'});
my ($ret, $stdout, $stderr) = $node->psql('restored', slurp_file($old_dump));
my @errors = grep { /ERROR/ } split /\n/, $stderr;
is_deeply(\@errors, [ grep { /extension "idempotency" already exists/ } @errors ],
	'the 0.1.0 dump restores; its only error is the extension that exists already');
query('restored', 'ALTER EXTENSION idempotency UPDATE');
is(as_app('restored', "BEGIN; $answers_sql; ROLLBACK;"), $answers_before,
	'restored and updated, every key answers as it did under 0.1.0');
is( as_tenant('restored',
		q{SELECT outcome || ' ' || response_body FROM idempotency_begin('shop', 'done', request_hash('tenant request'::text))}),
	'replay {"tenant": "a"}', 'and the tenant replays its key');
is(query('restored', $objects_sql), $fresh_objects, 'its objects equal a fresh install');

done_testing();
