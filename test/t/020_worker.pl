# The background expiry worker: it expires keys in every database that has
# the extension without any call, leaves other databases alone, follows
# reloads, survives termination, errors, DROP EXTENSION and DROP DATABASE,
# does nothing on a standby and starts after promotion; and the statistics
# count what happened.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest qw(wait_for_sweeps reload_with);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = PostgreSQL::Test::Cluster->new('primary');
$node->init(allows_streaming => 1);
$node->append_conf('postgresql.conf', "idempotency.expire_interval = '200ms'");
$node->start;

sub query { my ($db, $sql) = @_; return $node->safe_psql($db, $sql); }

sub create_app_database
{
	my ($db) = @_;
	query('postgres', "CREATE DATABASE $db");
	query($db, 'CREATE EXTENSION idempotency');
}

# $count completed keys that expire one second from now, plus one that stays.
sub add_expiring_keys
{
	my ($db, $count, $prefix) = @_;
	query($db, qq{
		SELECT count(*) FROM generate_series(1, $count) AS g,
		  LATERAL idempotency_begin('s', '$prefix' || g, request_hash('r'::text), ttl => '1 second') AS b,
		  LATERAL idempotency_complete('s', '$prefix' || g, 200, '{"n": 1}') AS c;
		BEGIN;
		SELECT idempotency_begin('s', '$prefix-stays', request_hash('r'::text), ttl => '1 day');
		SELECT idempotency_complete('s', '$prefix-stays', 200);
		COMMIT;
	});
}

sub keys_left
{
	my ($db, $prefix) = @_;
	return query($db, "SELECT count(*) FROM idempotency.keys WHERE key LIKE '$prefix%'");
}

sub expires_by_itself
{
	my ($db, $prefix, $name) = @_;
	ok( $node->poll_query_until($db,
			"SELECT count(*) = 1 FROM idempotency.keys WHERE key LIKE '$prefix%'"),
		$name);
	is(query($db, "SELECT key FROM idempotency.keys WHERE key LIKE '$prefix%'"),
		"$prefix-stays", "$name: the unexpired key is kept");
}

sub launcher_pid
{
	return query('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'idempotency launcher'});
}

sub sweeps { return query('postgres', 'SELECT sweeps FROM idempotency_stats()'); }

query('postgres', 'CREATE EXTENSION idempotency');
ok(launcher_pid() =~ /^\d+$/, 'one launcher runs');

# Expiry happens without any call, in each database with the extension.
create_app_database('app1');
create_app_database('app2');
add_expiring_keys('app1', 1000, 'a');
add_expiring_keys('app2', 1000, 'b');
expires_by_itself('app1', 'a', 'expired keys are deleted without any call');
expires_by_itself('app2', 'b', 'a second database gets its own expiry');

# Nothing indexes the expiry: a sweep reads a share of the heap (at least 1024
# blocks, 8 MB) from where the last one stopped, wrapping around at the end.
# In a table of about 6,000 blocks, keys that expired at its start, its middle
# and its end go within a pass of a few sweeps, and the rest stay.  They are
# far fewer than a batch, so no sweep goes on past its share: a sweep that
# started at block 0 every time would never reach the last ones.
create_app_database('large');
query('large', q{
	INSERT INTO idempotency.keys (scope, key, request, created_at, ttl, expires_at, status,
	    attempt, completed_at, response_status, response_body, digest)
	SELECT 's', 'k' || g, request_hash(g::text), now(), interval '1 day',
	       now() + CASE WHEN g % 25000 < 2 THEN interval '-1 second' ELSE interval '1 day' END,
	       'c', 1, now(), 200, jsonb_build_object('n', g), idempotency.key_digest('-', 's', 'k' || g)
	  FROM generate_series(1, 250000) AS g});
cmp_ok(query('large', q{SELECT pg_relation_size('idempotency.keys') / 8192}), '>', 3 * 1024,
	'the table holds more than three shares');
ok( $node->poll_query_until('large',
		q{SELECT count(*) = 0 FROM idempotency.keys WHERE expires_at < now()}),
	'expired keys anywhere in a large table are deleted by sweeps of a share each');
is(query('large', 'SELECT count(*) FROM idempotency.keys'), '249980', 'the unexpired keys stay');

# A database without the extension is left alone, even with a look-alike table.
query('postgres', 'CREATE DATABASE plain');
query('plain', q{
	CREATE SCHEMA idempotency;
	CREATE TABLE idempotency.keys (scope text, key text, expires_at timestamptz);
	INSERT INTO idempotency.keys SELECT 's', 'k' || g, now() - interval '1 day' FROM generate_series(1, 10) g;
});
wait_for_sweeps($node, 'postgres', 3);
is(query('plain', 'SELECT count(*) FROM idempotency.keys'),
	'10', 'a database without the extension is untouched');
is( query('postgres',
		q{SELECT count(*) FROM pg_stat_activity
		  WHERE backend_type = 'idempotency sweeper' AND datname LIKE 'template%'}),
	'0', 'no sweeper is connected to a template database');

# Template databases stay free: CREATE DATABASE copies template1 and fails if
# anyone is connected to it.
my $created = 0;
for my $i (1 .. 15)
{
	my ($ret) = $node->psql('postgres', "CREATE DATABASE scratch$i");
	$created++ if $ret == 0;
	$node->psql('postgres', "DROP DATABASE scratch$i");
}
is($created, 15, 'CREATE DATABASE never fails while the worker runs');

# Databases dropped while the launcher starts sweepers in them: DROP DATABASE
# waits for a sweep that has begun, and no sweeper ever starts in a database
# that is gone (which would log a FATAL that alerting pages on).
reload_with($node, "idempotency.expire_interval = '10ms'");
my $log_offset = -s $node->logfile;
my $dropped = 0;
for my $i (1 .. 25)
{
	create_app_database("dropped$i");
	my ($ret) = $node->psql('postgres', "DROP DATABASE dropped$i");
	$dropped++ if $ret == 0;
}
is($dropped, 25, 'DROP DATABASE never fails while the launcher sweeps every 10ms');
# (DROP DATABASE ends an autovacuum worker it finds in the database with a
# FATAL of PostgreSQL's own: a slower server, such as make test-cassert's,
# gives autovacuum time to get there.)
my @fatal =
  grep { /FATAL|ERROR/ && !/terminating autovacuum process due to administrator command/ }
  split /\n/, PostgreSQL::Test::Utils::slurp_file($node->logfile, $log_offset);
is(join("\n", @fatal), '', 'no sweeper logs an error or a FATAL for a dropped database');
reload_with($node, "idempotency.expire_interval = '200ms'");

# A reload changes the interval.
reload_with($node, "idempotency.expire_interval = '1h'");
my $settled = sweeps();
sleep 1;
$settled = sweeps();
add_expiring_keys('app1', 100, 'r');
sleep 3;
is(sweeps(), $settled, 'with a one-hour interval no round runs');
is(keys_left('app1', 'r'), '101', 'and expired keys wait');
reload_with($node, "idempotency.expire_interval = '200ms'");
expires_by_itself('app1', 'r', 'after a reload to 200ms they expire');

# idempotency.worker_enabled = off stops it, on restarts it.
reload_with($node, 'idempotency.worker_enabled = off');
sleep 1;
$settled = sweeps();
add_expiring_keys('app1', 10, 'o');
sleep 2;
is(keys_left('app1', 'o'), '11', 'worker_enabled = off expires nothing');
reload_with($node, 'idempotency.worker_enabled = on');
expires_by_itself('app1', 'o', 'worker_enabled = on expires again');

# pg_terminate_backend of the launcher: the postmaster starts a new one.
my $old_pid = launcher_pid();
query('postgres', "SELECT pg_terminate_backend($old_pid)");
ok( $node->poll_query_until('postgres',
		qq{SELECT count(*) = 1 FROM pg_stat_activity
		   WHERE backend_type = 'idempotency launcher' AND pid <> $old_pid}),
	'a terminated launcher is restarted');
add_expiring_keys('app1', 100, 't');
expires_by_itself('app1', 't', 'the restarted launcher expires keys');

# An error inside a sweep is logged, kept in the statistics, and the next
# round tries again.
# A trigger on the table fires for the sweep's deletes, as for any DELETE:
# a BEFORE trigger raises its error inside a row's delete, an AFTER trigger
# once the batch's deletes are done.  Either way the sweeper handles an error
# raised by PostgreSQL (on a server with assertions, a mistake there stops
# it with a TRAP and, as Cluster.pm turns restart_after_crash off, the server).
for my $when ('BEFORE', 'AFTER')
{
	my $prefix = lc($when) . '-e';
	add_expiring_keys('app1', 10, $prefix);
	query('app1', qq{
		CREATE FUNCTION refuse_deletes() RETURNS trigger LANGUAGE plpgsql AS
		  \$\$ BEGIN RAISE EXCEPTION 'deletes refused by a trigger ($when)'; END \$\$;
		CREATE TRIGGER refuse_deletes $when DELETE ON idempotency.keys
		  FOR EACH ROW EXECUTE FUNCTION refuse_deletes();
	});
	ok( $node->poll_query_until('postgres',
			qq{SELECT last_error LIKE '%deletes refused by a trigger ($when)%' FROM idempotency_stats()}),
		"a sweep error is reported in idempotency_stats() ($when trigger)");
	query('app1', 'DROP TRIGGER refuse_deletes ON idempotency.keys; DROP FUNCTION refuse_deletes()');
	expires_by_itself('app1', $prefix, "after the error the next rounds expire again ($when trigger)");
}

# DROP EXTENSION and DROP DATABASE while the worker is busy there neither
# block for long nor fail.
add_expiring_keys('app2', 50000, 'd');
sleep 1.2;
my $start = time;
my ($ret, $stdout, $stderr) = $node->psql('app2', 'DROP EXTENSION idempotency');
is($ret, 0, 'DROP EXTENSION succeeds while keys are being expired');
cmp_ok(time - $start, '<', 5, 'DROP EXTENSION does not wait for the worker');
add_expiring_keys('app1', 50000, 'x');
sleep 1.2;
$start = time;
($ret, $stdout, $stderr) = $node->psql('postgres', 'DROP DATABASE app1');
is($ret, 0, 'DROP DATABASE succeeds while keys are being expired') or diag($stderr);
cmp_ok(time - $start, '<', 5, 'DROP DATABASE does not wait long for the worker');

# Statistics: each answer and call is counted once.
create_app_database('app3');
my @counted = qw(claims replays mismatches in_progress waits completes server_errors_dropped checkpoints releases);
my $list = join(', ', @counted);
my $before = query('postgres', "SELECT $list FROM idempotency_stats()");
query('app3', q{
	BEGIN;
	SELECT idempotency_begin('s', 'k1', request_hash('r'::text));
	SELECT idempotency_complete('s', 'k1', 200);
	COMMIT;
	SELECT idempotency_begin('s', 'k1', request_hash('r'::text));
	SELECT idempotency_begin('s', 'k1', request_hash('other'::text));
	SELECT idempotency_begin('s', 'k2', request_hash('r'::text), lease => '1 hour');
	SELECT idempotency_begin('s', 'k2', request_hash('r'::text), wait => '100ms');
	SELECT idempotency_checkpoint('s', 'k2', 'p');
	SELECT idempotency_release('s', 'k2');
	SELECT idempotency_begin('s', 'k2', request_hash('r'::text), lease => '1 hour');
	SELECT idempotency_complete('s', 'k2', 503);
});
my $after = query('postgres', "SELECT $list FROM idempotency_stats()");
my @delta = map { (split /\|/, $after)[$_] - (split /\|/, $before)[$_] } 0 .. $#counted;
is_deeply(
	{ map { $counted[$_] => $delta[$_] } 0 .. $#counted },
	{
		claims => 3, replays => 1, mismatches => 1, in_progress => 1, waits => 1,
		completes => 1, server_errors_dropped => 1, checkpoints => 1, releases => 1
	},
	'idempotency_stats() counts each answer and call');
ok(query('postgres', q{SELECT wait_seconds >= 0.1 AND keys_expired >= 2000 AND last_sweep_time IS NOT NULL FROM idempotency_stats()}),
	'wait time, expired keys and the last sweep are reported');
query('app3', 'SELECT idempotency_scope_stats_refresh()');
is(query('app3', q{SELECT scope || ':' || in_progress || ':' || completed FROM idempotency_scope_stats()}),
	's:1:1', 'idempotency_scope_stats() summarises the table per scope');

# A standby does nothing; after promotion it starts expiring.
$node->backup('backup');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($node, 'backup', has_streaming => 1);
$standby->append_conf('postgresql.conf', "idempotency.expire_interval = '200ms'");
$standby->start;
reload_with($node, 'idempotency.worker_enabled = off');
add_expiring_keys('app3', 100, 's');
$node->wait_for_catchup($standby);
sleep 2;
is($standby->safe_psql('app3', q{SELECT count(*) FROM idempotency.keys WHERE key LIKE 's%'}),
	'101', 'a standby expires nothing');
is( $standby->safe_psql('postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'idempotency%'}),
	'0', 'no idempotency worker runs on a standby');
$node->stop;
$standby->promote;
ok( $standby->poll_query_until('app3',
		q{SELECT count(*) = 1 FROM idempotency.keys WHERE key LIKE 's%'}),
	'after promotion the new primary expires keys');

# (Its walreceiver's complaints about the stopped primary are expected.)
my $log = slurp_file($standby->logfile);
unlike($log, qr/ERROR|PANIC/, 'the standby logged no error');

done_testing();
