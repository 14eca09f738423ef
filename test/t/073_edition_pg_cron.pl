# The SQL edition's expiry, scheduled with pg_cron (doc/sql-edition.md,
# "Expiry"): idempotency_schedule_expiry(), called by an operator role that
# is no superuser, makes one job that runs idempotency_expire_batches() as
# that role every minute; it deletes every expired key in batches and no
# key inside its window, and refreshes the per-scope summary; and
# idempotency_unschedule_expiry() removes the job, as it must before DROP
# EXTENSION (pg_cron would keep it and fail every minute).  Needs Debian's
# postgresql-N-cron (test/run installs it); skips, saying so, without it.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $pkglibdir = `pg_config --pkglibdir`;
chomp $pkglibdir;
plan skip_all => "pg_cron is not installed (no pg_cron library in $pkglibdir)" unless -e "$pkglibdir/pg_cron.so";

# pg_cron lives in one database (cron.database_name); a cluster that listens
# on a socket only is reached through background workers.  The extension's
# library is not loaded, as on a managed server.
my $node = new_node('cron',
	conf => [
		"shared_preload_libraries = 'pg_cron'", "cron.database_name = 'shop'",
		'cron.use_background_workers = on', 'max_worker_processes = 20'
	]);
$node->safe_psql('postgres', 'CREATE DATABASE shop');
$node->safe_psql('shop', q{
	CREATE EXTENSION pg_cron;
	CREATE EXTENSION idempotency_sql;
	CREATE ROLE ops LOGIN;
	GRANT USAGE ON SCHEMA cron TO ops;
	GRANT EXECUTE ON FUNCTION idempotency_schedule_expiry, idempotency_unschedule_expiry,
	                          idempotency_expire, idempotency_scope_stats_refresh TO ops;
	GRANT EXECUTE ON PROCEDURE idempotency_expire_batches TO ops;
});
# Keys to expire (aged by hand: the test owns the server), and keys in their
# window, which must stay: 7 expired, in batches of 2; 3 live.
$node->safe_psql('shop', q{
	BEGIN;
	SELECT count(*) FROM generate_series(1, 10) AS n,
	       idempotency_begin('gc', 'k' || n, request_hash('r'::text), lease => '1 minute');
	SELECT count(*) FROM generate_series(1, 7) AS n, idempotency_complete('gc', 'k' || n, 200);
	UPDATE idempotency.keys SET expires_at = now() - interval '1 second' WHERE key IN ('k1', 'k2', 'k3', 'k4', 'k5', 'k6', 'k7');
	COMMIT;
});

my $job = $node->safe_psql('shop', 'SELECT idempotency_schedule_expiry(batch_size => 2)',
	extra_params => [ '-U', 'ops' ]);
like($job, qr/^\d+$/, 'the operator schedules the expiry');
is($node->safe_psql('shop', q{SELECT schedule || ' ' || command || ' ' || username || ' ' || database
                               FROM cron.job WHERE jobid = } . $job),
	"* * * * * CALL public.idempotency_expire_batches(2) ops shop", 'one job, every minute, as the operator');
is($node->safe_psql('shop', 'SELECT idempotency_schedule_expiry(batch_size => 2)', extra_params => [ '-U', 'ops' ]),
	$job, 'scheduling again replaces the job');

# pg_cron starts jobs at the top of a minute: up to a minute and a bit.
ok( $node->poll_query_until('shop',
		q{SELECT count(*) = 0 FROM idempotency.keys WHERE key IN ('k1', 'k2', 'k3', 'k4', 'k5', 'k6', 'k7')}),
	'the scheduled job deleted every expired key');
is($node->safe_psql('shop', q{SELECT string_agg(key, ' ' ORDER BY key) FROM idempotency.keys}),
	'k10 k8 k9', 'and no key inside its window');
ok($node->poll_query_until('shop', q{SELECT count(*) > 0 FROM idempotency_scope_stats() WHERE scope = 'gc'}),
	'and refreshed the per-scope summary');
ok( $node->poll_query_until('shop',
		qq{SELECT count(*) > 0 FROM cron.job_run_details WHERE jobid = $job AND status = 'succeeded'}),
	'pg_cron recorded the run as succeeded');

is($node->safe_psql('shop', 'SELECT idempotency_unschedule_expiry()', extra_params => [ '-U', 'ops' ]),
	't', 'the operator unschedules the expiry');
is($node->safe_psql('shop', 'SELECT count(*) FROM cron.job'), '0', 'no job is left');
is($node->safe_psql('shop', 'SELECT idempotency_unschedule_expiry()', extra_params => [ '-U', 'ops' ]),
	'f', 'unscheduling again finds nothing');

done_testing();
