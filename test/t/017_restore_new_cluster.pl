# A dump restored into a new cluster, its roles recreated first from
# pg_dumpall --globals-only, as a DBA moves a database: every role gets
# another OID there, yet each tenant's keys replay for that tenant and only
# for it, untenanted keys replay for everyone, and the application's grants
# hold.  (A tenant's key is stored with its role's OID, which pg_dump writes
# as the role's name, under a digest made with the tenant's number in
# idempotency.tenants, whose role column is dumped by name too: the numbers,
# and so the digests, hold in the new cluster.)  A role dropped before the
# dump has no number in it; a role new to the target gets a number of its
# own, after the restored ones.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# (No expiry worker on the source: the dropped role's number below must
# still be there when the dump is taken.)
my $source = new_node('source', conf => ['idempotency.worker_enabled = off']);
my $target = new_node('target');

# Roles the target has already, so that its OIDs differ from the source's.
$target->safe_psql('postgres', 'CREATE ROLE unrelated_1; CREATE ROLE unrelated_2; CREATE ROLE unrelated_3');

$source->safe_psql('postgres', q{
	CREATE ROLE app LOGIN;
	CREATE ROLE tenant_a LOGIN;
	CREATE ROLE tenant_b LOGIN;
	ALTER ROLE tenant_a SET idempotency.tenant_isolation = role;
	ALTER ROLE tenant_b SET idempotency.tenant_isolation = role;
	CREATE DATABASE shop;
});
$source->safe_psql('shop', q{
	CREATE EXTENSION idempotency;
	GRANT EXECUTE ON FUNCTION idempotency_begin, idempotency_complete, idempotency_lookup
	    TO app, tenant_a, tenant_b;
});

sub call
{
	my ($node, $role, $sql) = @_;
	return $node->safe_psql('shop', $sql, extra_params => [ '-U', $role ]);
}
sub complete_as
{
	my ($role, $body) = @_;
	call($source, $role, qq{
		BEGIN;
		SELECT idempotency_begin('orders', 'k', request_hash('POST /orders'::text));
		SELECT idempotency_complete('orders', 'k', 201, '$body');
		COMMIT;});
}
complete_as('tenant_a', '{"for": "a"}');
complete_as('tenant_b', '{"for": "b"}');
complete_as('app', '{"for": "nobody in particular"}');
# A tenant numbered, then dropped before the dump: its number's row stays
# until a sweep, and the dump leaves it out.  (Its key, which a sweep would
# delete too, is deleted here: restored, it would name whichever role has
# its OID in the target.)
$source->safe_psql('postgres', q{
	CREATE ROLE tenant_gone LOGIN;
	ALTER ROLE tenant_gone SET idempotency.tenant_isolation = role});
$source->safe_psql('shop', 'GRANT EXECUTE ON FUNCTION idempotency_begin, idempotency_complete TO tenant_gone');
complete_as('tenant_gone', '{"for": "gone"}');
$source->safe_psql('shop', 'REVOKE EXECUTE ON FUNCTION idempotency_begin, idempotency_complete FROM tenant_gone');
my $gone = $source->safe_psql('postgres', q{SELECT 'tenant_gone'::regrole::oid});
$source->safe_psql('postgres', 'DROP ROLE tenant_gone');
$source->safe_psql('shop', "DELETE FROM idempotency.keys WHERE tenant::oid = $gone");
is($source->safe_psql('shop', "SELECT number FROM idempotency.tenants WHERE role::oid = $gone"), '3',
	'the dropped role\'s number is still in the table');
my $numbers = q{SELECT string_agg(number || '=' || role::text, ' ' ORDER BY number) FROM idempotency.tenants
	WHERE role::text IN ('tenant_a', 'tenant_b')};
my $source_numbers = $source->safe_psql('shop', $numbers);
is($source_numbers, '1=tenant_a 2=tenant_b', 'the source numbered its tenants');

sub replay_sql
{
	return q{SELECT outcome || ' ' || response_body FROM idempotency_begin('orders', 'k', request_hash('POST /orders'::text))};
}

# Move the roles, then the database.
my $dir = PostgreSQL::Test::Utils::tempdir;
$source->command_ok([ 'pg_dumpall', '--globals-only', '-d', $source->connstr('postgres'), '-f', "$dir/globals.sql" ],
	'pg_dumpall --globals-only');
$source->command_ok([ 'pg_dump', '-Fc', '-d', $source->connstr('shop'), '-f', "$dir/shop.dump" ],
	'pg_dump of the database');
# The bootstrap superuser exists already on the target; everything else is new.
my ($ret, $stdout, $stderr) =
  $target->psql('postgres', slurp_file("$dir/globals.sql"), on_error_stop => 0);
unlike($stderr, qr/ERROR:(?!.*role "\w+" already exists)/, 'the roles are recreated on the target')
  or diag($stderr);
$target->safe_psql('postgres', 'CREATE DATABASE shop');
$target->command_ok([ 'pg_restore', '-d', $target->connstr('shop'), "$dir/shop.dump" ],
	'pg_restore into the new cluster');

my $oids = q{SELECT string_agg(rolname || '=' || oid, ' ' ORDER BY rolname) FROM pg_roles
	WHERE rolname IN ('tenant_a', 'tenant_b')};
isnt($target->safe_psql('postgres', $oids), $source->safe_psql('postgres', $oids),
	'the tenants have other OIDs in the new cluster');
is($target->safe_psql('shop', 'SELECT string_agg(tenant::text, \' \' ORDER BY tenant::text) FROM idempotency.keys'),
	'- tenant_a tenant_b', 'the restored keys name their tenants');
is($target->safe_psql('shop', $numbers), $source_numbers, 'the tenants have the same numbers there');
is($target->safe_psql('shop', 'SELECT count(*) FROM idempotency.tenants'), '2',
	'the dropped role\'s number was left out of the dump');
is( $target->safe_psql('shop', q{SELECT count(*) FILTER (WHERE digest = idempotency.key_digest(tenant, scope, key))
		FROM idempotency.keys}),
	'3', 'each restored key is stored under the digest the new cluster computes for it');

is(call($target, 'tenant_a', replay_sql()), 'replay {"for": "a"}', "tenant a replays its own key");
is(call($target, 'tenant_b', replay_sql()), 'replay {"for": "b"}', "tenant b replays its own key");
is(call($target, 'app', replay_sql()), 'replay {"for": "nobody in particular"}',
	'an untenanted key replays for the application role');

# The roles' grants came with the dump: the application can claim and complete.
call($target, 'app', q{
	BEGIN;
	SELECT idempotency_begin('orders', 'new', request_hash('POST /orders'::text));
	SELECT idempotency_complete('orders', 'new', 201, '{"restored": true}');
	COMMIT;});
is( call($target, 'app',
		q{SELECT outcome FROM idempotency_begin('orders', 'new', request_hash('POST /orders'::text))}),
	'replay', 'the application role works in the restored database');

# A tenant new to the target gets the next number, after the restored ones
# (the sequence came with the dump), and its key is its own.
$target->safe_psql('postgres', q{
	CREATE ROLE tenant_c LOGIN;
	ALTER ROLE tenant_c SET idempotency.tenant_isolation = role});
$target->safe_psql('shop', 'GRANT EXECUTE ON FUNCTION idempotency_begin, idempotency_complete TO tenant_c');
call($target, 'tenant_c', q{
	BEGIN;
	SELECT idempotency_begin('orders', 'k', request_hash('POST /orders'::text));
	SELECT idempotency_complete('orders', 'k', 201, '{"for": "c"}');
	COMMIT;});
is(call($target, 'tenant_c', replay_sql()), 'replay {"for": "c"}', 'a new tenant replays its own key');
is($target->safe_psql('shop', q{SELECT number FROM idempotency.tenants WHERE role = 'tenant_c'::regrole}),
	'4', 'with the number after the last one the source handed out');
is(call($target, 'tenant_a', replay_sql()), 'replay {"for": "a"}', "and tenant a still replays its own");

done_testing();
