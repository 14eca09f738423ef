# The update to 0.5.0 stores every key under its 128-bit digest of (tenant,
# scope, key) (issue 43).  From every earlier version, with keys in every
# state written by this library -- which serves each older layout until
# ALTER EXTENSION UPDATE -- completed, held by a committed claim, released
# with a recovery point, a tenant's, one of a role dropped since, and a few
# hundred more: after the update every key answers as before it (the dropped
# role's is deleted, as the sweep would); each row's digest is
# idempotency.key_digest's, the one way to compute one; the tenant has a
# number; the primary key is the digest alone and passes amcheck; the
# database has one secret; a dump of the updated database restores with its
# secret and numbers, and the keys answer there.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('digest', conf => ['idempotency.worker_enabled = off']);
sub query { my ($db, $sql) = @_; return $node->safe_psql($db, $sql); }
sub as_tenant
{
	my ($db, $sql) = @_;
	return $node->safe_psql($db, $sql, extra_params => [ '-U', 'tenant_a' ]);
}

my ($version) = slurp_file('idempotency.control') =~ /^default_version\s*=\s*'([^']+)'/m;
query('postgres', q{
	CREATE ROLE tenant_a LOGIN;
	ALTER ROLE tenant_a SET idempotency.tenant_isolation = role;
});

# Keys in every state, through the functions every version has (0.1.0's
# signatures), as the library writes them into a table at that version.
my $write_keys = q{
	BEGIN;
	SELECT outcome FROM idempotency_begin('shop', 'done', request_hash('r'::text));
	SELECT idempotency_complete('shop', 'done', 201, '{"n": 1}');
	COMMIT;
	SELECT outcome FROM idempotency_begin('shop', 'held', request_hash('r'::text), lease => '1 hour');
	SELECT outcome FROM idempotency_begin('shop', 'released', request_hash('r'::text), lease => '1 hour');
	SELECT idempotency_checkpoint('shop', 'released', 'step 1') IS NOT NULL;
	SELECT idempotency_release('shop', 'released');
	BEGIN;
	SELECT count(*) FROM generate_series(1, 300) AS g,
	       LATERAL idempotency_begin('bulk', 'b' || g, request_hash(('r' || g)::text)) AS b,
	       LATERAL idempotency_complete('bulk', 'b' || g, 200, jsonb_build_object('n', g)) AS c;
	COMMIT;
};
my $write_tenant_key = q{
	BEGIN;
	SELECT outcome FROM idempotency_begin('shop', 'mine', request_hash('t'::text));
	SELECT idempotency_complete('shop', 'mine', 202, '{"tenant": true}');
	COMMIT;
};

# What each key answers now, in a transaction rolled back: the states above
# and the bulk keys' replays.
my $answers_sql = q{
	BEGIN;
	SELECT k, b.outcome, b.attempt, b.response_status, b.response_body, b.recovery_point
	  FROM unnest(ARRAY['done', 'held', 'released', 'never']) AS k,
	       LATERAL idempotency_begin('shop', k, request_hash('r'::text)) AS b
	 ORDER BY k;
	SELECT count(*) FROM generate_series(1, 300) AS g,
	       LATERAL idempotency_begin('bulk', 'b' || g, request_hash(('r' || g)::text)) AS b
	 WHERE b.outcome = 'replay' AND b.response_body = jsonb_build_object('n', g);
	ROLLBACK;
};
my $tenant_answer_sql = q{
	BEGIN;
	SELECT outcome, response_status, response_body FROM idempotency_begin('shop', 'mine', request_hash('t'::text));
	ROLLBACK;
};

my $expected = join "\n", 'done|replay|1|201|{"n": 1}|', 'held|in_progress|1|||',
	'never|claimed|1|||', 'released|claimed|2|||step 1', '300';
my $expected_tenant = 'replay|202|{"tenant": true}';

for my $from ('0.1.0', '0.2.0', '0.3.0', '0.4.0')
{
	(my $db = "from_$from") =~ s/\./_/g;
	query('postgres', "CREATE DATABASE $db");
	query($db, qq{
		CREATE EXTENSION idempotency VERSION '$from';
		GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO tenant_a;
	});
	query($db, $write_keys);
	as_tenant($db, $write_tenant_key);
	is(query($db, $answers_sql), $expected, "$from: the keys answer before the update");
	# A role that stored a key and was dropped since.
	query('postgres', "CREATE ROLE gone_$db LOGIN; ALTER ROLE gone_$db SET idempotency.tenant_isolation = role");
	query($db, "GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO gone_$db");
	$node->safe_psql($db, $write_tenant_key, extra_params => [ '-U', "gone_$db" ]);
	query($db, "REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA public FROM gone_$db");
	query('postgres', "DROP ROLE gone_$db");
	is(query($db, 'SELECT count(*) FROM idempotency.keys'), '305', "$from: 305 keys, one of a dropped role");
	query($db, 'ALTER EXTENSION idempotency UPDATE');
	is(query($db, q{SELECT extversion FROM pg_extension WHERE extname = 'idempotency'}),
		$version, "$from: updated to $version");
	is(query($db, $answers_sql), $expected, "$from: every key answers after the update as before it");
	is(as_tenant($db, $tenant_answer_sql), $expected_tenant, "$from: and the tenant's key replays for it");
	# (0.1.0 stored a tenant's key under the scope '<role OID>/shop', which
	# the update moves to the tenant column only for a role that exists: the
	# dropped role's stays, untenanted.)
	my $kept = $from eq '0.1.0' ? '305|305' : '304|304';
	is( query($db, q{
			SELECT count(*), count(*) FILTER (WHERE digest = idempotency.key_digest(tenant, scope, key))
			  FROM idempotency.keys}),
		$kept, "$from: the dropped role's key is gone, every other key is stored under idempotency.key_digest's digest");
	is(query($db, q{SELECT string_agg(number || '=' || role::text, ' ') FROM idempotency.tenants}),
		'1=tenant_a', "$from: the tenant with keys is numbered, the dropped role not");
	is( query($db, q{
			SELECT pg_get_indexdef('idempotency.keys_pkey'::regclass) LIKE '%USING btree (digest)',
			       (SELECT count(*) FROM idempotency.digest_secret)}),
		't|1', "$from: the primary key is the digest, and the database has one secret");
	query($db, 'CREATE EXTENSION amcheck');
	is( query($db, q{SELECT bt_index_check('idempotency.keys_pkey', true)}), '',
		"$from: the primary key passes amcheck, every row indexed");
	is(query($db, q{SELECT count(*) FROM idempotency_keys('bulk', max_keys => 1000)}),
		'300', "$from: idempotency_keys lists the scope");
}

# A dump of an updated database keeps the secret with the keys: restored
# into a fresh database, every key answers there.
my $dump = $node->basedir . '/from_0_4_0.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-d', $node->connstr('from_0_4_0'), '-f', $dump ],
	'pg_dump of a database updated from 0.4.0');
query('postgres', 'CREATE DATABASE restored');
$node->command_ok([ 'pg_restore', '-d', $node->connstr('restored'), $dump ], 'pg_restore of it');
is( query('restored', q{SELECT secret FROM idempotency.digest_secret}),
	query('from_0_4_0', q{SELECT secret FROM idempotency.digest_secret}),
	'the restored database has the same secret');
is( query('restored', q{SELECT string_agg(number || '=' || role::text, ' ') FROM idempotency.tenants}),
	'1=tenant_a', 'and the same tenant numbers');
query('restored', 'GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO tenant_a');
is(query('restored', $answers_sql), $expected, 'restored: every key answers as before');
is(as_tenant('restored', $tenant_answer_sql), $expected_tenant, 'restored: the tenant\'s key too');

# doc/operations.md's example of idempotency.key_digest (tested: key_digest.sql)
# finds the row of a key by its digest.
my ($example) = slurp_file('doc/operations.md') =~ /<!-- tested: key_digest\.sql -->\n```sql\n(.*?)```/s;
ok(defined $example, 'doc/operations.md has the example of idempotency.key_digest');
query('restored', q{
	BEGIN;
	SELECT outcome FROM idempotency_begin('shop', 'k-1', request_hash('r'::text));
	SELECT idempotency_complete('shop', 'k-1', 201);
	COMMIT;
});
is(query('restored', $example), 'shop|k-1|c', 'it finds the row of the key by its digest');

# A fresh install makes the secret, and so does the update of an empty
# table (a restore's dumped secret replaces it).
query('postgres', 'CREATE DATABASE fresh; CREATE DATABASE empty_update');
query('fresh', 'CREATE EXTENSION idempotency');
query('empty_update', q{CREATE EXTENSION idempotency VERSION '0.4.0'; ALTER EXTENSION idempotency UPDATE});
is( query('fresh', 'SELECT count(*) FROM idempotency.digest_secret') . ' '
	  . query('empty_update', 'SELECT count(*) FROM idempotency.digest_secret'),
	'1 1', 'CREATE EXTENSION and the update make the secret');

done_testing();
