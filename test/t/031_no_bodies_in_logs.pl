# No response body, header or recovery point ever reaches an error message or
# the server log.  Every error path of the API is hit with a distinctive marker
# inside the body, the headers and the recovery point, under the default log
# settings of a test node (which log every statement, and the statement of
# every error); then neither the messages the client got nor the server log
# may contain the marker.
#
# A client that writes a body into its SQL text has it logged by PostgreSQL
# itself (log_statement, and the STATEMENT line of an error), whatever the
# extension does; applications pass bodies as bind parameters.  psql 15
# cannot bind, so here the values are built on the server from hex, and the
# statements only refer to them: no statement text contains the marker.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('logs', conf => ["idempotency.expire_interval = '100ms'"]);
my $db = 'postgres';

sub query { return $node->safe_psql($db, shift); }

# Random, so that nothing else in the log can contain it by chance.
my $marker = sprintf('BODY-MARKER-%08x%08x', int(rand(2**32)), int(rand(2**32)));

# SQL that yields $text without spelling it out.
sub hidden
{
	my ($text) = @_;
	return sprintf(q{convert_from(decode('%s', 'hex'), 'UTF8')}, unpack('H*', $text));
}

my $secret = hidden($marker);
query(qq{
	CREATE EXTENSION idempotency;
	CREATE ROLE outsider LOGIN;
	CREATE TABLE payload AS SELECT
	    jsonb_build_object('card', $secret, 'pad', repeat('x', 100)) AS body,
	    jsonb_build_object('Set-Cookie', $secret) AS headers,
	    'charged with ' || $secret AS point,
	    jsonb_build_object('card', $secret, 'pad', repeat('x', 2000000)) AS big_body,
	    repeat('0', 100) || $secret AS hex_input;
	GRANT SELECT ON payload TO outsider;
});

# The payload's columns, as SQL.
my $body = '(SELECT body FROM payload)';
my $headers = '(SELECT headers FROM payload)';
my $point = '(SELECT point FROM payload)';

# Keys in each state: completed with the payload, held (a committed claim
# with a running lease and a recovery point), and expired with the payload.
query(qq{
	BEGIN;
	SELECT idempotency_begin('s', 'done', request_hash('r'::text));
	SELECT idempotency_complete('s', 'done', 200, $body, $headers);
	COMMIT;
	SELECT idempotency_begin('s', 'held', request_hash('r'::text), lease => '1 hour');
	SELECT idempotency_checkpoint('s', 'held', $point);
});
is(query(qq{SELECT count(*) FROM idempotency.keys
	WHERE strpos(response_body::text || response_headers::text, $secret) > 0
	   OR strpos(recovery_point, $secret) > 0}),
	'2', 'the stored responses and recovery points carry the marker');

# Runs $sql (as $role when given), which must fail with $sqlstate; the
# client's message, detail, hint and context must not show the marker.
sub error_path
{
	my ($sqlstate, $sql, $what, $role) = @_;
	$sql = "SET ROLE $role; $sql" if $role;
	my ($got, $stderr) = sql_error($node, $db, $sql);
	is($got, $sqlstate, "$what: $sqlstate") or diag $stderr;
	unlike($stderr, qr/\Q$marker\E/, "$what: the client's message does not show the marker");
	return;
}

# ---------------------------------------------------------------------------
# Every error of idempotency_complete and idempotency_checkpoint, each given
# the payload
# ---------------------------------------------------------------------------
my $complete = "idempotency_complete('s', %s, %s, $body, $headers%s)";
sub complete_sql
{
	my ($key, $status, $extra) = @_;
	return 'SELECT ' . sprintf($complete, $key, $status, $extra // '');
}
my $checkpoint = "idempotency_checkpoint('s', %s, $point%s)";
sub checkpoint_sql
{
	my ($key, $extra) = @_;
	return 'SELECT ' . sprintf($checkpoint, $key, $extra // '');
}

error_path('22004', complete_sql('NULL', 200), 'complete without a key');
error_path('22023', complete_sql(q{'held'}, 99), 'complete with an invalid status');
error_path('IK006', complete_sql(q{repeat('k', 1100)}, 200), 'complete with an over-long key');
{
	# A response over max_response_bytes completes without its body, with a
	# WARNING that shows none of it.
	my ($ret, $stdout, $stderr) = $node->psql($db,
		"BEGIN; SELECT idempotency_complete('s', 'held', 200, (SELECT big_body FROM payload)); ROLLBACK;");
	like($stderr, qr/WARNING:  the response body of idempotency key "held" is not stored/,
		'complete with a response over max_response_bytes: a WARNING');
	unlike($stderr, qr/\Q$marker\E/,
		'complete with a response over max_response_bytes: the WARNING does not show the marker');
}
error_path('IK001', complete_sql(q{'nobody'}, 200), 'complete of an unclaimed key');
error_path('IK002', complete_sql(q{'done'}, 200), 'complete of a completed key');
error_path('IK003', complete_sql(q{'held'}, 200, ', attempt => 7'), 'complete with a stale attempt');
error_path('25006', 'SET default_transaction_read_only = on; ' . complete_sql(q{'held'}, 200),
	'complete in a read-only transaction');
error_path('IK000', q{SET idempotency.inject_fault = 'exception'; } . complete_sql(q{'held'}, 200),
	'complete when C++ throws');
error_path('42501', complete_sql(q{'held'}, 200), 'complete without the privilege', 'outsider');

error_path('54000', "SELECT idempotency_checkpoint('s', 'held', $point || repeat('x', 2000000))",
	'checkpoint with a recovery point over max_response_bytes');
error_path('22023', checkpoint_sql(q{'held'}, q{, lease => '-1 hour'}), 'checkpoint with an invalid lease');
error_path('IK001', checkpoint_sql(q{'nobody'}), 'checkpoint of an unclaimed key');
error_path('IK002', checkpoint_sql(q{'done'}), 'checkpoint of a completed key');
error_path('IK003', checkpoint_sql(q{'held'}, ', attempt => 7'), 'checkpoint with a stale attempt');

# A body mistaken for a request_hash literal: the message quotes only the
# first 64 bytes of the input, and the marker comes after them.
error_path('22P02', 'SELECT (SELECT hex_input FROM payload)::request_hash',
	'a long text read as a request_hash');

# A retry that waits for an uncommitted completion carrying the payload and
# runs out of time.
{
	my $holder = $node->background_psql($db);
	$holder->query_safe('BEGIN');
	$holder->query_safe(q{SELECT idempotency_begin('s', 'pending', request_hash('r'::text))});
	$holder->query_safe(complete_sql(q{'pending'}, 201));
	error_path('57014',
		q{SET statement_timeout = '300ms';
		  SELECT idempotency_begin('s', 'pending', request_hash('r'::text), wait => '10s')},
		'a retry waiting on an uncommitted completion times out');
	$holder->query_safe('ROLLBACK');
	$holder->quit;
}

# ---------------------------------------------------------------------------
# The expiry worker failing on expired keys that carry the payload
# ---------------------------------------------------------------------------
# (The trigger that makes the sweep fail comes first: the worker runs every
# 100ms and would otherwise expire the keys before it exists.)
query(qq{
	CREATE FUNCTION refuse_deletes() RETURNS trigger LANGUAGE plpgsql AS
	  \$\$ BEGIN RAISE EXCEPTION 'deletes refused'; END \$\$;
	CREATE TRIGGER refuse_deletes BEFORE DELETE ON idempotency.keys
	  FOR EACH ROW EXECUTE FUNCTION refuse_deletes();
	INSERT INTO idempotency.keys (scope, key, request, created_at, ttl, expires_at, status,
	    attempt, completed_at, response_status, recovery_point, response_body, response_headers,
	    digest)
	SELECT 'old', 'k' || g, request_hash(g::text), now() - interval '2 days', interval '1 day',
	       now() - interval '1 day', 'c', 1, now() - interval '2 days', 200, $point, $body, $headers,
	       idempotency.key_digest('old', 'k' || g)
	  FROM generate_series(1, 100) AS g});
ok($node->poll_query_until($db, q{SELECT last_error IS NOT NULL FROM idempotency_stats()}),
	'the sweep fails while the expired keys carry the payload');
query('DROP TRIGGER refuse_deletes ON idempotency.keys; DROP FUNCTION refuse_deletes()');
ok($node->poll_query_until($db, q{SELECT count(*) = 0 FROM idempotency.keys WHERE scope = 'old'}),
	'once repaired, the sweep deletes them');

# ---------------------------------------------------------------------------
# Statements that carry the payload in their text, as with client-side
# binding, at the default log settings (no log_statement): PostgreSQL logs
# the statement of an error, and every error raised inside a call of the
# extension -- its own, or PostgreSQL's -- must leave it out.
# ---------------------------------------------------------------------------
query(q{ALTER SYSTEM SET log_statement = 'none'; SELECT pg_reload_conf()});
my $literal_body = qq{'{"card": "$marker"}'};
my $literal_request = "request_hash(${literal_body}::jsonb)";

# A control: PostgreSQL's own error logs the statement, marker and all.
my $statement_control = "$marker-statement";
my ($control_state) = sql_error($node, $db, qq{SELECT 1 / 0, '$statement_control'});
is($control_state, '22012', 'a statement failing outside the extension');

error_path('IK001', qq{SELECT idempotency_complete('s', 'nobody', 200, $literal_body)},
	'complete of an unclaimed key, the body in the statement');
# (A timeout long enough to run out in the wait, not while the statement is
# parsed and planned on a loaded machine: there PostgreSQL would log it.)
error_path('57014',
	qq{SET statement_timeout = '2s';
	   SELECT idempotency_begin('s', 'held', request_hash('r'::text), wait => '10s', claim_data => $literal_body)},
	'a wait cancelled by statement_timeout, the payload in the statement');

# A deadlock between two waits: each session holds a key the other waits
# for.  The victim's error would quote both statements in the log.
{
	my @sessions = map { $node->background_psql($db, on_error_stop => 0) } 0 .. 1;
	for my $n (0, 1)
	{
		$sessions[$n]->query_safe('BEGIN');
		$sessions[$n]->query_safe(
			"SELECT outcome FROM idempotency_begin('s', 'dead$n', request_hash('r'::text), claim_data => $literal_body)");
	}
	for my $n (0, 1)
	{
		my $other = 1 - $n;
		$sessions[$n]->query_until(qr/waiting/, qq{\\echo waiting
			SELECT outcome FROM idempotency_begin('s', 'dead$other', request_hash('r'::text),
			    wait => '1 min', claim_data => $literal_body);\n});
	}
	# The deadlock detector ends one wait; the other then ends too.
	$node->poll_query_until($db,
		q{SELECT count(*) = 0 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%dead%'})
	  or die 'the sessions still wait';
	my $errors = join '', map { $_->query('SELECT 1'); $_->{stderr} } @sessions;
	like($errors, qr/deadlock detected/, 'one of the waits is a deadlock victim');
	unlike($errors, qr/\Q$marker\E/, 'the deadlock error shows no request data to the client');
	$_->quit for @sessions;
}

# PL/pgSQL's EXECUTE of a query text with the body spelled in it (format's
# %L): PostgreSQL adds the text to an error's CONTEXT line, and an error or
# warning raised inside a call must get none.  (EXECUTE ... USING, which
# doc/handlers.md shows, keeps the body out of the text in the first place.)
sub executed
{
	my ($call) = @_;
	return qq{DO \$\$ DECLARE body jsonb := (SELECT body FROM payload);
		big_body jsonb := (SELECT big_body FROM payload);
		BEGIN EXECUTE format($call); END \$\$};
}
error_path('IK001',
	executed(q{'SELECT idempotency_complete(%L, %L, 200, %L::jsonb)', 's', 'nobody', body}),
	'complete of an unclaimed key, the body in an EXECUTEd text');
error_path('IK002',
	executed(q{'SELECT idempotency_complete(%L, %L, 200, %L::jsonb)', 's', 'done', body}),
	'complete of a completed key, the body in an EXECUTEd text');
{
	# A completion that waits for the holder of the key and runs into
	# lock_timeout: PostgreSQL's own 55P03, raised inside the call.
	my $holder = $node->background_psql($db);
	$holder->query_safe('BEGIN');
	$holder->query_safe(q{SELECT idempotency_begin('s', 'locked', request_hash('r'::text))});
	error_path('55P03',
		q{SET lock_timeout = '100ms'; }
		  . executed(q{'SELECT idempotency_complete(%L, %L, 200, %L::jsonb)', 's', 'locked', body}),
		'a completion waiting past lock_timeout, the body in an EXECUTEd text');
	$holder->query_safe('ROLLBACK');
	$holder->quit;
}
{
	# The WARNING of a response over max_response_bytes.
	my ($ret, $stdout, $stderr) = $node->psql($db,
		"BEGIN; SELECT idempotency_begin('s', 'oversized', request_hash('r'::text)); "
		  . executed(q{'SELECT idempotency_complete(%L, %L, 200, %L::jsonb)', 's', 'oversized', big_body})
		  . '; ROLLBACK;');
	like($stderr, qr/WARNING:  the response body of idempotency key "oversized" is not stored/,
		'an oversized response in an EXECUTEd text: the WARNING');
	unlike($stderr, qr/\Q$marker\E/, '... shows no body to the client');
}

# An error PostgreSQL raises in the same statement but outside any call (here
# a division by zero) gets the statement's text as CONTEXT, which the
# extension cannot change: with EXECUTE ... USING, as doc/handlers.md says,
# the text holds $1, $2 ... and never the body.  The control, with format's
# %L, shows that such a line would be caught.
my $execute_control = "$marker-execute";
my ($execute_control_state) = sql_error($node, $db,
	sprintf(q{DO $$ BEGIN EXECUTE format('SELECT %%L::text, 1 / 0', %s); END $$},
		hidden($execute_control)));
is($execute_control_state, '22012', 'an EXECUTEd statement failing outside the extension');
error_path('22012',
	q{DO $$ DECLARE body jsonb := (SELECT body FROM payload);
	  BEGIN EXECUTE 'SELECT idempotency_begin($1, $2, request_hash($3)), 1 / 0'
	      USING 's', 'executed', body; END $$},
	'an EXECUTEd statement with the body passed by USING, failing outside the call');

# DROP EXTENSION commits while a call waits for the table: every entry
# point fails with 42P01, its statement (with the payload) kept out of the
# log -- all find the table through one routine, which looks it up again
# after the lock.  In another database, so that the rest stays.  Each caller
# has called the extension before, so that its backend knows the result row
# types: a backend's first statement that names a function returning one
# (begin, lookup) waits for DROP EXTENSION in PostgreSQL's parser, before any
# code of the extension runs, and then fails there (XX000, as for any
# composite type dropped under it).
query('CREATE DATABASE dropped');
my %entry_points = (
	begin => "SELECT * FROM idempotency_begin('s', 'k', request_hash(${literal_body}::jsonb), claim_data => $literal_body)",
	lookup => "SELECT * FROM idempotency_lookup('s', 'k $marker'::text)",
	complete => "SELECT idempotency_complete('s', 'k', 200, $literal_body)",
	checkpoint => "SELECT idempotency_checkpoint('s', 'k', 'step $marker')",
	release => "SELECT idempotency_release('s', 'k $marker'::text)",
	forget => "SELECT idempotency_forget('s', 'k $marker'::text)",
	keys => "SELECT * FROM idempotency_keys('s $marker'::text)",
	expire => "SELECT idempotency_expire() /* $marker */");
for my $entry (sort keys %entry_points)
{
	$node->safe_psql('dropped', 'CREATE EXTENSION idempotency');
	my $caller = $node->background_psql('dropped', on_error_stop => 0);
	$caller->query_safe(q{SELECT * FROM idempotency_begin('s', 'warm', request_hash('r'::text), lease => '1 minute')});
	$caller->query_safe(q{SELECT * FROM idempotency_lookup('s', 'warm')});
	my $dropper = $node->background_psql('dropped');
	$dropper->query_safe('BEGIN; DROP EXTENSION idempotency');
	$caller->query_until(qr/waiting/, "\\echo waiting\n$entry_points{$entry};\n");
	$node->poll_query_until('dropped',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%$marker%'")
	  or die "the $entry call never waited";
	$dropper->query_safe('COMMIT');
	$caller->query('SELECT 1');    # the call has failed by now
	like($caller->{stderr}, qr/relation "idempotency.keys" does not exist/,
		"$entry, waiting for DROP EXTENSION: 42P01");
	unlike($caller->{stderr}, qr/\Q$marker\E/, "$entry: ... showing no request data to the client");
	$_->quit for ($dropper, $caller);
}
query(q{ALTER SYSTEM RESET log_statement; SELECT pg_reload_conf()});

# ---------------------------------------------------------------------------
# The log
# ---------------------------------------------------------------------------

# A control: a marker that is logged on purpose is found, so a zero count
# below means something.
my $control = "$marker-control";
query(sprintf(q{DO $$ BEGIN RAISE LOG '%%', %s; END $$}, hidden($control)));
$node->stop;
my $log = slurp_file($node->logfile);
like($log, qr/\Q$control\E/, 'a marker logged on purpose is found in the log');
like($log, qr/STATEMENT:  SELECT 1 \/ 0, '\Q$statement_control\E'/,
	'the statement of an error outside the extension is logged, marker and all');
like($log, qr/CONTEXT:  SQL statement "SELECT '\Q$execute_control\E'::text, 1 \/ 0"/,
	'the EXECUTEd text of an error outside the extension is logged as CONTEXT, marker and all');
$log =~ s/\Q$execute_control\E//g;
$log =~ s/\Q$statement_control\E//g;
$log =~ s/\Q$control\E//g;
my $leaks = () = $log =~ /\Q$marker\E/g;
is($leaks, 0, 'the server log never contains a response body, header or recovery point');

done_testing();
