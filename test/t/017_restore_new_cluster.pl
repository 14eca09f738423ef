# A dump restored into a new cluster, its roles recreated first from
# pg_dumpall --globals-only, as a DBA moves a database: every role gets
# another OID there, yet each tenant's keys replay for that tenant and only
# for it, untenanted keys replay for everyone, and the application's grants
# hold.  (A tenant's key is stored as its role's OID, which pg_dump writes as
# the role's name.)
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $source = new_node('source');
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

done_testing();
