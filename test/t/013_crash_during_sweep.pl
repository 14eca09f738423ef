# A crash in the middle of an expiry sweep.  The sweep deletes in short
# transactions with synchronous_commit off, so a crash may undo its last
# batches -- which only means they are deleted again later.  What must hold:
# no unexpired key is touched (completed responses stay byte for byte,
# unfinished claims keep their state, attempt and lease, even those past
# their expiry time whose lease still runs), and after the restart the sweep
# resumes and deletes the whole expired backlog.
#
# Two crashes: kill -9 of a sweeper while it deletes, and an immediate stop
# of the server while sweeps run.  The test does not race the sweep: a
# BEFORE DELETE trigger makes the sweeper wait, in the middle of a batch, on
# an advisory lock the test holds, and the crash comes once it waits there.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# Expired keys added per round; the sweep deletes them in key order (see
# add_backlog) and batches of $batch.
my $backlog = 1_000_000;
my $batch = 2000;
# The backlog key at which a round's sweep waits: two batches are committed
# by then, and the third has deleted 999 keys it has not committed.
my $held_at = 2 * $batch + 1000;
# Cluster.pm turns restart_after_crash off; a killed sweeper must make the
# postmaster reinitialise and run crash recovery, as in production.
my $node = new_node('sweep',
	conf => [
		'restart_after_crash = on', "idempotency.expire_interval = '100ms'",
		"idempotency.expire_batch_size = $batch"
	]);
my $db = 'postgres';

sub query { return $node->safe_psql($db, shift); }

# Scopes whose keys must come through every crash and sweep unchanged.
my @kept_scopes = qw(completed claims leased);

sub kept_keys { return keys_text($node, $db, scopes => \@kept_scopes); }

# The expired keys of one backlog round still stored.
sub backlog_left
{
	my ($round) = @_;
	return query(
		"SELECT count(*) FROM idempotency.keys WHERE scope = 'backlog' AND key LIKE '$round-%'");
}

# ---------------------------------------------------------------------------
# The keys
# ---------------------------------------------------------------------------
query('CREATE EXTENSION idempotency');

# Completed keys that expire tomorrow, each with its own response.
query(q{
	SELECT count(*) FROM generate_series(1, 1000) AS g,
	  LATERAL idempotency_begin('completed', 'key-' || g, request_hash(g::text), ttl => '1 day'),
	  LATERAL idempotency_complete('completed', 'key-' || g, 200 + g % 3,
	      jsonb_build_object('order', g, 'note', repeat('é', g % 50)),
	      jsonb_build_object('Location', '/orders/' || g))});

# Unfinished two-phase claims with an hour of lease: every other one has a
# recovery point, and every tenth was released and taken over (attempt 2).
query(q{
	SELECT count(*) FROM generate_series(1, 100) AS g,
	  LATERAL idempotency_begin('claims', 'claim-' || g, request_hash(g::text), lease => '1 hour')});
query(q{
	SELECT count(*) FROM generate_series(2, 100, 2) AS g,
	  LATERAL idempotency_checkpoint('claims', 'claim-' || g, 'step-' || g, lease => '1 hour')});
query(q{
	SELECT count(*) FROM generate_series(10, 100, 10) AS g,
	  LATERAL idempotency_release('claims', 'claim-' || g)});
query(q{
	SELECT count(*) FROM generate_series(10, 100, 10) AS g,
	  LATERAL idempotency_begin('claims', 'claim-' || g, request_hash(g::text), lease => '1 hour')});

# Claims past their expiry time whose lease still runs: a sweep must skip them.
query(q{
	INSERT INTO idempotency.keys (scope, key, request, created_at, ttl, expires_at, status,
	    attempt, lease_expires_at, digest)
	SELECT 'leased', 'leased-' || g, request_hash(g::text), now() - interval '2 days',
	       interval '1 day', now() - interval '1 day', 'p', 3, now() + interval '1 hour',
	       idempotency.key_digest('-', 'leased', 'leased-' || g)
	  FROM generate_series(1, 10) AS g});

my $kept = kept_keys();
is(scalar(split /\n/, $kept), 1110, '1000 completed keys and 110 unfinished claims are laid out');
is( query(
		q{SELECT string_agg(attempt || ':' || count, ' ' ORDER BY attempt) FROM (
		    SELECT attempt, count(*) FROM idempotency.keys WHERE scope = 'claims'
		     AND status = 'p' GROUP BY attempt) AS a}),
	'1:90 2:10',
	'the claims are in progress, 90 as attempt 1 and 10 as attempt 2');

# ---------------------------------------------------------------------------
# Crash helpers
# ---------------------------------------------------------------------------

# Adds an expired backlog, written directly in one transaction: keys
# completed a day past their expiry.  The sweep sees them all at once, and
# reads the heap in block order, which is key order here (one INSERT writes
# them in order, after the kept keys), so the test knows which key each batch
# reaches.  The table is locked against sweeps (which skip a busy table)
# while the rows are written: a sweep meanwhile would read their blocks,
# still invisible, and go on from past them, so that the next sweep started
# inside the backlog rather than at its first key (one CI run held the
# sweeper at key $held_at with one batch committed, not two).
sub add_backlog
{
	my ($round) = @_;
	query(qq{
		BEGIN;
		LOCK TABLE idempotency.keys IN SHARE MODE;
		INSERT INTO idempotency.keys (scope, key, request, created_at, ttl, expires_at, status,
		    attempt, lease_expires_at, completed_at, response_status, recovery_point,
		    response_body, response_headers, digest)
		SELECT 'backlog', '$round-' || g, request_hash(g::text), now() - interval '2 days',
		       interval '1 day', now() - interval '1 day', 'c', 1, NULL, now() - interval '2 days',
		       200, NULL, jsonb_build_object('n', g), NULL,
		       idempotency.key_digest('-', 'backlog', '$round-' || g)
		  FROM generate_series(1, $backlog) AS g;
		COMMIT});
	return;
}

# Deleting backlog key $round-$held_at makes the deleting transaction wait
# for a shared advisory lock on 13013 -- in the middle of a sweep batch, since
# the sweep deletes through the executor, which fires row triggers.
query(q{
	CREATE FUNCTION wait_for_test() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM pg_catalog.pg_advisory_xact_lock_shared(13013);
		RETURN OLD;
	END $$});

# Adds a backlog while the test holds the advisory lock, waits until a
# sweeper is stuck on it at key $round-$held_at, and runs $crash->($pid) on
# that sweeper.  Returns the backlog left, as committed, at the crash.
sub crash_mid_sweep
{
	my ($round, $crash) = @_;
	my $holder = $node->background_psql($db);
	$holder->query_safe('SELECT pg_advisory_lock(13013)');
	query(qq{
		CREATE TRIGGER hold_sweep BEFORE DELETE ON idempotency.keys FOR EACH ROW
		  WHEN (OLD.scope = 'backlog' AND OLD.key = '$round-$held_at')
		  EXECUTE FUNCTION wait_for_test()});
	add_backlog($round);
	my $waiting = q{
		SELECT a.pid FROM pg_stat_activity AS a JOIN pg_locks AS l USING (pid)
		 WHERE a.backend_type = 'idempotency sweeper' AND a.datname = current_database()
		   AND l.locktype = 'advisory' AND l.objid = 13013 AND NOT l.granted};
	$node->poll_query_until($db, "SELECT EXISTS ($waiting)")
	  or die "no sweeper reached key $round-$held_at";
	my $pid = query($waiting);
	ok(query("SELECT backend_xid IS NOT NULL FROM pg_stat_activity WHERE pid = $pid") eq 't',
		"round $round: the waiting sweeper has deletions of its batch in progress");
	my $left = backlog_left($round);
	note "$left of $backlog expired keys were left at the crash";
	$crash->($pid);
	# The crash ends the holder's session (and so frees the lock) as well.
	$holder->quit;
	return $left;
}

# After each crash: every kept key is exactly as before, the claims are
# still in progress, and the sweep resumes until the backlog is gone.
sub check_after_crash
{
	my ($when) = @_;
	is(kept_keys(), $kept, "$when: every unexpired key and claim is byte-identical");
	is( query(
			q{SELECT count(*) FROM generate_series(1, 100) AS g,
			    LATERAL idempotency_lookup('claims', 'claim-' || g) AS l
			  WHERE l.status = 'in_progress' AND l.attempt = CASE WHEN g % 10 = 0 THEN 2 ELSE 1 END
			    AND l.lease_expires_at > now()}),
		'100',
		"$when: the claims are in progress with their attempt and a running lease");
	return;
}

# ---------------------------------------------------------------------------
# (a) kill -9 of a sweeper in the middle of a batch
# ---------------------------------------------------------------------------
my $log_offset = -s $node->logfile;
my $left = crash_mid_sweep('a', sub { kill 'KILL', shift });
cmp_ok($left, '<=', $backlog - 2 * $batch, 'the sweep had committed two batches before the kill');
cmp_ok($left, '>', 0, 'the sweep was not finished at the kill');
wait_for_crash_restart($node, $log_offset);
query('DROP TRIGGER hold_sweep ON idempotency.keys');
ok($node->log_contains(qr/"idempotency sweeper" \(PID \d+\) was terminated by signal 9/, $log_offset),
	'the postmaster saw the sweeper die of SIGKILL and restarted the cluster');
check_after_crash('after kill -9 of a sweeper');

# ---------------------------------------------------------------------------
# (b) immediate stop while sweeps run
# ---------------------------------------------------------------------------
$left = crash_mid_sweep('b', sub { $node->stop('immediate') });
cmp_ok($left, '>', 0, 'the sweep was not finished at the immediate stop');
$node->start;
query('DROP TRIGGER hold_sweep ON idempotency.keys');
check_after_crash('after an immediate stop');

# ---------------------------------------------------------------------------
# The sweep resumes and finishes; it never deleted anything else.
# ---------------------------------------------------------------------------
ok($node->poll_query_until($db,
		q{SELECT count(*) = 0 FROM idempotency.keys WHERE scope = 'backlog'}),
	'after the restarts the sweep deleted the whole expired backlog');
is(kept_keys(), $kept, 'after the sweep every unexpired key and claim is still byte-identical');

$node->stop;
done_testing();
