# The move from the SQL edition to the C++ extension on the same database
# (doc/sql-edition.md, "Moving to the extension";
# idempotency_sql.move-to-extension.sql, which edition/generate writes), from
# the extension-directory install, the plain one and pg_tle's (skipped,
# saying so, where pg_tle is not installed): every key moves
# with its record and answers -- a stored response (jsonb, bytes, omitted),
# a claim whose lease runs (attempt, recovery point, claim data), one whose
# lease ended, an expired one, a tenant's -- and so do the tenants and the
# grants, each key under the extension's digest (idempotency.key_digest); the
# key of a tenant role dropped since stays behind.  Every lookup is the same before and after, byte for byte; the
# replays are the same; the running claim still holds, the ended one is taken
# over with the next attempt and its recovery point, the expired key is new.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# The edition is used where the extension's library is not loaded, as on a
# managed server; the move starts once the library is installed and loaded
# (preload).
my $node = new_node('move', conf => ["shared_preload_libraries = ''", 'idempotency.worker_enabled = off']);
sub preload
{
	my ($libraries) = @_;
	$node->append_conf('postgresql.conf', "shared_preload_libraries = '$libraries'");
	$node->restart;
}
my $forms = PostgreSQL::Test::Utils::tempdir;
system('perl', 'edition/generate', $forms) == 0 or BAIL_OUT('edition/generate failed');
$node->safe_psql('postgres', q{
	CREATE ROLE app LOGIN;
	CREATE ROLE tenant_a LOGIN IN ROLE app;
});

sub as_role
{
	my ($role, $db, $sql) = @_;
	return $node->safe_psql($db, $sql, extra_params => [ '-U', $role ]);
}

sub run_file
{
	my ($db, $file, @vars) = @_;
	my ($out, $err);
	my $ok = IPC::Run::run(
		[ 'psql', '-X', '-q', @vars, '-h', $node->host, '-p', $node->port, '-d', $db, '-f', $file ],
		'>', \$out, '2>', \$err);
	diag($err) unless $ok;
	return ($ok, $out);
}

# Every key as each role sees it through idempotency_lookup, the same
# function in both editions.
my @keys = ([ 'app', 'shop', 'done' ], [ 'app', 'shop', 'bytes' ], [ 'app', 'shop', 'big' ],
	[ 'app', 'pay', 'leased' ], [ 'app', 'pay', 'ended' ], [ 'app', 'shop', 'expired' ],
	[ 'tenant_a', 'orders', 'k' ], [ 'app', 'orders', 'k' ]);
sub lookups
{
	my ($db) = @_;
	return join "\n", map {
		my ($role, $scope, $key) = @$_;
		"$role $scope/$key: "
		  . as_role($role, $db, "SELECT l::text FROM idempotency_lookup('$scope', '$key') AS l")
	} @keys;
}

my $replays = q{
	SELECT b.outcome || ' ' || b.attempt || ' ' || b.response_status || ' ' || COALESCE(b.response_body::text, '-')
	       || ' ' || COALESCE(b.response_headers::text, '-') || ' ' || COALESCE(encode(b.response_body_bytes, 'hex'), '-')
	       || ' ' || b.response_body_omitted
	  FROM (VALUES ('done'), ('bytes'), ('big')) AS k(key),
	       idempotency_begin('shop', k.key, request_hash('GET ' || k.key), lease => '1 minute') AS b
	 ORDER BY k.key};

for my $form ('directory', 'plain', 'pg_tle')
{
  SKIP:
  {
	my $db = "move_$form";
	if ($form eq 'pg_tle')
	{
		my $tle_node = new_pg_tle_node('move_tle', conf => ['idempotency.worker_enabled = off']);
		skip 'pg_tle is not installed in this PostgreSQL (build it by hand to run this part)', 13
		  unless $tle_node;
		$node->stop;
		$node = $tle_node;
		$node->safe_psql('postgres', q{
			CREATE ROLE app LOGIN;
			CREATE ROLE tenant_a LOGIN IN ROLE app;
		});
	}
	preload($form eq 'pg_tle' ? 'pg_tle' : '');
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	if ($form eq 'directory')
	{
		$node->safe_psql($db, 'CREATE EXTENSION idempotency_sql');
	}
	elsif ($form eq 'plain')
	{
		ok((run_file($db, "$forms/idempotency_sql.plain.sql", '-v', 'schema=public'))[0], "$form: installed");
	}
	else
	{
		$node->safe_psql($db, 'CREATE EXTENSION pg_tle');
		ok((run_file($db, "$forms/idempotency_sql.pgtle.sql"))[0], "$form: registered");
		$node->safe_psql($db, 'CREATE EXTENSION idempotency_sql');
	}
	$node->safe_psql($db, q{
		GRANT EXECUTE ON FUNCTION idempotency_begin, idempotency_complete, idempotency_checkpoint,
		                          idempotency_release, idempotency_lookup, idempotency_forget,
		                          idempotency_keys TO app;
		SELECT idempotency_tenant_isolation('tenant_a');
	});
	as_role('app', $db, q{
		BEGIN;
		SELECT idempotency_begin('shop', 'done', request_hash('GET done'::text));
		SELECT idempotency_complete('shop', 'done', 201, '{"order": 1, "name": "Zoë"}', '{"Location": "/orders/1"}');
		COMMIT;
		BEGIN;
		SELECT idempotency_begin('shop', 'bytes', request_hash('GET bytes'::text));
		SELECT idempotency_complete('shop', 'bytes', 200, response_body_bytes => '\x00ff10',
		                            response_headers => '{"Content-Type": "application/octet-stream"}');
		COMMIT;
		BEGIN;
		SELECT idempotency_begin('shop', 'expired', request_hash('GET expired'::text), ttl => '1 second');
		SELECT idempotency_complete('shop', 'expired', 200);
		COMMIT;
		SELECT idempotency_begin('pay', 'leased', request_hash('charge'::text), lease => '1 hour',
		                         claim_data => '{"worker": "w1"}');
		SELECT idempotency_checkpoint('pay', 'leased', 'provider-called', attempt => 1);
		SELECT idempotency_begin('pay', 'ended', request_hash('charge'::text), lease => '1 hour');
		SELECT idempotency_checkpoint('pay', 'ended', 'step 1', attempt => 1);
		SELECT idempotency_release('pay', 'ended', attempt => 1);
	});
	# A response over the owner's limit: completed without its body.
	$node->safe_psql($db, q{INSERT INTO idempotency.settings (max_response_bytes) VALUES (30)});
	as_role('app', $db, q{
		BEGIN;
		SELECT idempotency_begin('shop', 'big', request_hash('GET big'::text));
		SELECT idempotency_complete('shop', 'big', 200, jsonb_build_object('pad', repeat('x', 50)), '{"h": "v"}');
		COMMIT;
	});
	$node->safe_psql($db, q{DELETE FROM idempotency.settings});
	as_role('tenant_a', $db, q{
		BEGIN;
		SELECT idempotency_begin('orders', 'k', request_hash('POST /orders'::text));
		SELECT idempotency_complete('orders', 'k', 201, '{"tenant": "a"}');
		COMMIT;
	});
	# A tenant dropped since its key was stored, before an expiry deleted it.
	$node->safe_psql($db, q{
		CREATE ROLE tenant_gone LOGIN IN ROLE app;
		SELECT idempotency_tenant_isolation('tenant_gone');
	});
	as_role('tenant_gone', $db, q{
		BEGIN;
		SELECT idempotency_begin('orders', 'gone', request_hash('POST /orders'::text));
		SELECT idempotency_complete('orders', 'gone', 201);
		COMMIT;
	});
	$node->safe_psql($db, q{DROP ROLE tenant_gone});
	$node->safe_psql($db, q{UPDATE idempotency.keys SET expires_at = now() - interval '1 hour' WHERE key = 'expired'});
	my $before = lookups($db);
	my $replayed = as_role('app', $db, $replays);
	like($replayed, qr/^replay 1 200 - \{"h": "v"\} - true\nreplay 1 200 - .* 00ff10 false\nreplay 1 201 .*Zoë/,
		"$form: the edition replays the three responses");

	preload($form eq 'pg_tle' ? 'idempotency, pg_tle' : 'idempotency');
	my ($moved, $out) = run_file($db, "$forms/idempotency_sql.move-to-extension.sql", '-v', 'schema=public');
	ok($moved, "$form: the move runs");
	like($out, qr/move-to-extension: 7 keys now in the extension idempotency/,
		"$form: it moves every row, but the dropped tenant's");
	is($node->safe_psql($db, q{SELECT string_agg(extname, ' ' ORDER BY extname) FROM pg_extension
	                          WHERE extname LIKE 'idempotency%'}),
		'idempotency', "$form: the extension is installed, the edition gone");
	is($node->safe_psql($db, q{SELECT string_agg(role::text, ' ') || ': '
	                                  || (SELECT bool_and(digest = idempotency.key_digest(tenant, scope, key))
	                                        FROM idempotency.keys)
	                             FROM idempotency.tenants}),
		'tenant_a: true', "$form: the tenant numbered, and every key under the extension's digest");
	is(lookups($db), $before, "$form: every lookup is the same after the move");
	is(as_role('app', $db, $replays), $replayed, "$form: and so is every replay");
	is(as_role('app', $db,
			q{SELECT outcome || ' ' || attempt || ' ' || retry_after_seconds FROM idempotency_begin('pay', 'leased',
			  request_hash('charge'::text), lease => '1 hour')}) =~ s/ \d+$//r,
		'in_progress 1', "$form: the running claim still holds its lease");
	is(as_role('app', $db,
			q{SELECT outcome || ' ' || attempt || ' ' || recovery_point FROM idempotency_begin('pay', 'ended',
			  request_hash('charge'::text), lease => '1 hour')}),
		'claimed 2 step 1', "$form: the ended claim is taken over, with its recovery point");
	is(as_role('app', $db,
			q{SELECT outcome || ' ' || attempt FROM idempotency_begin('shop', 'expired',
			  request_hash('GET expired'::text), lease => '1 minute')}),
		'claimed 1', "$form: the expired key is new");
	is(as_role('tenant_a', $db,
			q{SELECT outcome || ' ' || response_body::text FROM idempotency_begin('orders', 'k',
			  request_hash('POST /orders'::text))}),
		'replay {"tenant": "a"}', "$form: the tenant's key replays for the tenant");
	is(as_role('app', $db, q{SELECT count(*) FROM idempotency_lookup('orders', 'k')}),
		'0', "$form: and for no one else");
	$node->safe_psql('postgres', "DROP DATABASE $db");
	$node->safe_psql('postgres', 'ALTER ROLE tenant_a RESET ALL');
  }
}

done_testing();
