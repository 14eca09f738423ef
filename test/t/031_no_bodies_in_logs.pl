# No response body, header or recovery point ever reaches an error message or
# the server log.  Every error path of the API is hit with a distinctive marker
# inside the body, the headers and the recovery point, under the default log
# settings of a test node (which log every statement, and the statement of
# every error); then neither the messages the client got nor the server log
# may contain the marker.
#
# A client that writes a body into its SQL text has it logged by PostgreSQL
# itself when the DBA asks for every statement (log_statement), whatever the
# extension does; applications pass bodies as bind parameters.  psql 15
# cannot bind, so here the values are built on the server from hex, and the
# statements only refer to them: no statement text contains the marker --
# but for the section below, whose statements spell the marker in and run
# without log_statement: there no STATEMENT or CONTEXT line of any message
# logged while a statement calls the extension may show it.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use IPC::Run;
use Time::HiRes ();
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
	       idempotency.key_digest('-', 'old', 'k' || g)
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
# extension -- its own, or PostgreSQL's -- must leave it out; so must every
# message logged while a statement that calls the extension runs (the log
# gate, below).
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
# a division by zero) gets the statement's text as CONTEXT: with EXECUTE ...
# USING, as doc/handlers.md says, the text holds $1, $2 ... and never the
# body (and the log gate keeps the line out of the log anyway: format's %L
# below).  The control, a statement that calls nothing of the extension,
# shows that such a line would be caught.
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
# composite type dropped under it): the log gate's cases below.
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
# ---------------------------------------------------------------------------
# The log gate (src/log_gate.cpp): no message logged while a statement that
# calls the extension runs shows that statement or a CONTEXT line, wherever
# it is raised -- in PostgreSQL's parser before any code of the extension
# runs, in an EXECUTE of a prepared statement whose text is elsewhere, in
# PL/pgSQL around a call, by PostgreSQL itself while a call waits -- and an
# unrelated statement's error keeps its statement.  Each case reads the log
# its statements wrote: their messages are there, the marker is not.
# ---------------------------------------------------------------------------

# The log written since $offset shows $message (a regex), never the marker.
sub logged_without_marker
{
	my ($offset, $message, $what) = @_;
	my $written = slurp_file($node->logfile, $offset);
	like($written, $message, "$what: logged");
	unlike($written, qr/\Q$marker\E/, "$what: ... without request data");
	return;
}

# A session's *first* begin or lookup that waits for DROP EXTENSION fails in
# PostgreSQL's parser, which reads the result row type the drop removes
# (doc/operations.md): with XX000 once the drop commits, or with
# lock_timeout's or statement_timeout's error while it waits.  No code of the
# extension has run in that statement.  The session names itself, so that
# test/run's log gate lets this one documented XX000 through.
my @drop_races = (
	[ 'a first begin', $entry_points{begin}, undef, qr/could not open relation with OID \d+/ ],
	[ 'a first lookup', $entry_points{lookup}, undef, qr/could not open relation with OID \d+/ ],
	[ 'a first begin past lock_timeout', $entry_points{begin}, q{SET lock_timeout = '200ms'},
		qr/canceling statement due to lock timeout/ ],
	[ 'a first begin past statement_timeout', $entry_points{begin},
		q{SET statement_timeout = '500ms'}, qr/canceling statement due to statement timeout/ ]);
for my $race (@drop_races)
{
	my ($what, $call, $timeout, $error) = @$race;
	$node->safe_psql('dropped', 'DROP EXTENSION IF EXISTS idempotency; CREATE EXTENSION idempotency');
	my $offset = -s $node->logfile;
	my $caller = $node->background_psql('dropped', on_error_stop => 0);
	$caller->query_safe(q{SET application_name = 'documented_drop_race'});
	$caller->query_safe($timeout) if $timeout;
	my $dropper = $node->background_psql('dropped');
	$dropper->query_safe('BEGIN; DROP EXTENSION idempotency');
	$caller->query_until(qr/waiting/, "\\echo waiting\n$call;\n");
	if (!$timeout)
	{
		$node->poll_query_until('dropped',
			"SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%$marker%'")
		  or die "$what never waited";
		$dropper->query_safe('COMMIT');
	}
	$caller->query('SELECT 1');    # the call has failed by now
	like($caller->{stderr}, $error, "$what, waiting for DROP EXTENSION: fails in the parser");
	$dropper->query_safe('ROLLBACK') if $timeout;
	$_->quit for ($dropper, $caller);
	logged_without_marker($offset, $error, "$what, waiting for DROP EXTENSION");
}

# EXECUTE of a prepared statement: the statement PostgreSQL logs is the
# EXECUTE, which carries the body but names no function of the extension.
# An error in an argument of the EXECUTE, before the call, and one after the
# call in the same statement; the names as PostgreSQL reads them (folded to
# lower case, or quoted).
{
	my $session = $node->background_psql($db, on_error_stop => 0);
	$session->query_safe(q{PREPARE charge(text, jsonb, integer) AS
		SELECT idempotency_complete('s', $1, $3, $2)});
	$session->query_safe(q{PREPARE "Claim As Number"(jsonb) AS
		SELECT (idempotency_begin('s', 'prepared', request_hash($1), claim_data => $1)).outcome::text::integer});
	my $offset = -s $node->logfile;
	$session->query(qq{EXECUTE Charge('nobody', $literal_body, 'two hundred')});
	like($session->{stderr}, qr/invalid input syntax for type integer: "two hundred"/,
		'EXECUTE of a prepared call, failing in its argument: 22P02');
	logged_without_marker($offset, qr/"two hundred"/, 'EXECUTE of a prepared call, failing in its argument');
	$session->{stderr} = '';
	$offset = -s $node->logfile;
	$session->query(qq{execute /* the claim */ "Claim As Number"($literal_body)});
	like($session->{stderr}, qr/invalid input syntax for type integer: "claimed"/,
		'EXECUTE of a prepared call, failing after the call: 22P02');
	logged_without_marker($offset, qr/"claimed"/, 'EXECUTE of a prepared call, failing after the call');
	$session->quit;
}

# Bound parameters (the extended protocol, as drivers send a body): with
# log_parameter_max_length_on_error set, PostgreSQL logs the parameters of
# a statement that fails as a CONTEXT line.  pgbench -M extended binds its
# variables; the error comes before the call, in the same statement.
{
	my $script = $node->basedir . '/bound.sql';
	append_to_file($script,
		"SELECT 1 / :zero, idempotency_complete('s', 'nobody', 200, :body::jsonb);\n");
	my $offset = -s $node->logfile;
	local $ENV{PGOPTIONS} = '-c log_parameter_max_length_on_error=-1';
	my ($stdout, $stderr) = ('', '');
	IPC::Run::run(
		[
			'pgbench', '-n', '-t', 1, '-M', 'extended', '-f', $script,
			'-D', 'zero=0', '-D', qq{body={"card": "$marker"}},
			'-h', $node->host, '-p', $node->port, $db
		],
		'>', \$stdout, '2>', \$stderr);
	like($stderr, qr/division by zero/, 'a statement with bound parameters failing before the call: 22012');
	logged_without_marker($offset, qr/division by zero/,
		'a statement with bound parameters failing before the call, with log_parameter_max_length_on_error');
}

# PL/pgSQL: an application's function that fails after its call (the
# statement names only that function), and a DO block whose EXECUTEd text
# spells the body in (format's %L) and fails outside the call: PostgreSQL
# quotes that text in a CONTEXT line (the client still gets it: its own
# text).
query(q{CREATE FUNCTION place_order(request jsonb) RETURNS void LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM idempotency_begin('s', 'order', request_hash(request));
		RAISE EXCEPTION 'out of stock';
	END $$});
{
	my $offset = -s $node->logfile;
	error_path('P0001', "SELECT place_order($literal_body)",
		"an application's PL/pgSQL function failing after its call");
	logged_without_marker($offset, qr/out of stock/,
		"an application's PL/pgSQL function failing after its call");
	$offset = -s $node->logfile;
	my ($state) = sql_error($node, $db,
		executed(q{'SELECT idempotency_begin(%L, %L, request_hash(%L::jsonb)), 1 / 0', 's', 'executed', body}));
	is($state, '22012', 'a DO block whose EXECUTEd text spells the body in, failing outside the call');
	logged_without_marker($offset, qr/division by zero/,
		'a DO block whose EXECUTEd text spells the body in, failing outside the call');
	# An error in the parser that points into the EXECUTEd text: PostgreSQL
	# logs that text as the error's QUERY as well.
	$offset = -s $node->logfile;
	($state) = sql_error($node, $db,
		executed(q{'SELECT idempotency_begin(%L, %L, request_hash(%L::jsonb)) FROM no_such_table', 's', 'executed', body}));
	is($state, '42P01', 'a DO block whose EXECUTEd text spells the body in, failing in the parser');
	logged_without_marker($offset, qr/relation "no_such_table" does not exist/,
		'a DO block whose EXECUTEd text spells the body in, failing in the parser');
}

# PostgreSQL's own messages while a call waits for the holder of a key: the
# LOG lines of log_lock_waits, and the FATAL of pg_terminate_backend, which
# ends the session without unwinding through the call.
{
	my $holder = $node->background_psql($db);
	my $waiter = $node->background_psql($db, on_error_stop => 0);
	$waiter->query_safe(q{SET log_lock_waits = on; SET deadlock_timeout = '100ms'});
	my $wait = sub {
		my ($key) = @_;
		$holder->query_safe('BEGIN');
		$holder->query_safe(qq{SELECT idempotency_begin('s', '$key', request_hash('r'::text))});
		$holder->query_safe(complete_sql(qq{'$key'}, 201));
		$waiter->query_until(qr/waiting/, qq{\\echo waiting
			SELECT outcome FROM idempotency_begin('s', '$key', request_hash('r'::text),
			    wait => '1 min', lease => '1 min', claim_data => $literal_body);\n});
	};

	my $offset = -s $node->logfile;
	$wait->('lock-logged');
	$node->wait_for_log(qr/still waiting for ShareLock on transaction/, $offset);
	$holder->query_safe('ROLLBACK');
	$waiter->query_safe('SELECT 1');    # the begin has its answer
	logged_without_marker($offset, qr/still waiting for ShareLock.*acquired ShareLock/s,
		'a wait that log_lock_waits logs');

	$offset = -s $node->logfile;
	$wait->('terminated');
	my $waiting = qq{SELECT pid FROM pg_stat_activity
		WHERE wait_event_type = 'Lock' AND query LIKE '%terminated%$marker%'};
	$node->poll_query_until($db, "SELECT count(*) = 1 FROM ($waiting) AS w")
	  or die 'the begin never waited';
	query("SELECT pg_terminate_backend(pid) FROM ($waiting) AS w");
	$node->poll_query_until($db, "SELECT count(*) = 0 FROM ($waiting) AS w")
	  or die 'the waiting session was not terminated';
	$holder->query_safe('ROLLBACK');
	$holder->quit;
	eval { $waiter->quit };    # psql has exited with its connection
	logged_without_marker($offset, qr/FATAL:  terminating connection due to administrator command/,
		'a wait ended by pg_terminate_backend');
}

# The detail of PostgreSQL's own errors: jsonb's input function quotes what
# it rejects (`Expected "," or "}", but found ""..."".`, `Token ""..." is
# invalid.` -- a whole string token; a bare word is cut at its first "-"),
# for a body spelled into the statement and for one bound as a parameter
# alike, cast in the statement or inside a call.  The client gets
# the detail; the log shows a fixed sentence instead.  The extension's own
# messages keep their details in the log (they never show request data).
my $detail_control = "$marker-detail";
{
	my $offset = -s $node->logfile;
	my ($state, $stderr) = sql_error($node, $db,
		qq{SELECT request_hash('{"card": "4111111111111111" "$marker": "123"}'::jsonb)});
	is($state, '22P02', 'a body missing a comma, cast in the statement: 22P02');
	like($stderr, qr/but found "\Q"$marker"\E"/, '... the client gets the detail');
	($state, $stderr) = sql_error($node, $db, qq(SELECT request_hash('{"card": "$marker'::jsonb)));
	is($state, '22P02', 'a body with an unterminated string, cast in the statement: 22P02');
	like($stderr, qr/Token "\Q"$marker\E" is invalid/, '... the client gets the detail');
	($state) = sql_error($node, $db,
		qq{SELECT idempotency_begin('s', 'json-detail', request_hash_jsonb('{"card": "1" "$marker"}'::text))});
	is($state, '22P02', 'a body that is not JSON, read inside request_hash_jsonb: 22P02');
	logged_without_marker($offset,
		qr/(?:DETAIL:  The detail is not logged: it may contain request data .*){3}/s,
		'the detail of jsonb\'s error on a body in the statement');

	# The extension's own detail, and an unrelated statement's (a control).
	$offset = -s $node->logfile;
	($state) = sql_error($node, $db, q{SELECT request_hash('zz')});
	is($state, '42P18', "the extension's own error, with a detail");
	my $written = slurp_file($node->logfile, $offset);
	like($written, qr/DETAIL:  An argument of unknown type is read as a digest/,
		"the extension's own detail is logged");
	($state) = sql_error($node, $db, qq{SELECT '{"card": "1" "$detail_control"}'::jsonb});
	is($state, '22P02', 'a statement failing outside the extension with a detail');

	# Bound parameters (pgbench -M extended binds its variables): cast in
	# the statement, and read inside a call.
	$offset = -s $node->logfile;
	for my $statement ('SELECT request_hash(:body::jsonb)',
		q{SELECT idempotency_begin('s', 'bound-json', request_hash_jsonb(:body::text))})
	{
		my $script = $node->basedir . '/bound_json.sql';
		open my $out, '>', $script or die "$script: $!";
		print $out "$statement;\n";
		close $out;
		my ($stdout, $stderr) = ('', '');
		IPC::Run::run(
			[
				'pgbench', '-n', '-t', 1, '-M', 'extended', '-f', $script,
				'-D', qq{body={"card": "1" "$marker"}},
				'-h', $node->host, '-p', $node->port, $db
			],
			'>', \$stdout, '2>', \$stderr);
		like($stderr, qr/invalid input syntax for type json/, "$statement, the body bound: 22P02")
		  or diag $stderr;
	}
	logged_without_marker($offset,
		qr/(?:DETAIL:  The detail is not logged: it may contain request data .*){2}/s,
		'the detail of jsonb\'s error on a bound body');
}

# A parallel worker runs part of a statement that called the extension in
# the leader: here an application's function, whose EXECUTEd query spells
# the body in and fails in the workers only (parallel_leader_participation
# off).  Each worker's ERROR, and the FATAL of a worker stopped by the
# leader's error, is logged by the worker with the leader's text as its
# statement; the leader raises the workers' error again and logs it too.
{
	query(q{
		CREATE TABLE big AS SELECT x, 'n' || x AS note FROM generate_series(1, 200000) AS x;
		ANALYZE big;
		CREATE FUNCTION create_order_parallel(b text) RETURNS bigint LANGUAGE plpgsql AS $$
		DECLARE n bigint;
		BEGIN
			PERFORM idempotency_begin('s', md5(b), request_hash(b::jsonb));
			EXECUTE format('SELECT count(*) FROM big WHERE note <> %L AND 1 / (x - 1000) > 0', b)
			   INTO n;
			RETURN n;
		END $$});
	my $offset = -s $node->logfile;
	my ($state, $stderr) = sql_error($node, $db,
		qq{SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0;
		   SET min_parallel_table_scan_size = 0; SET parallel_leader_participation = off;
		   SELECT create_order_parallel('{"card": "$marker-parallel"}')});
	is($state, '22012', 'a query of a function that called the extension, failing in parallel workers');
	like($stderr, qr/CONTEXT:  parallel worker/, '... raised in a parallel worker');
	my $written = slurp_file($node->logfile, $offset);
	my $errors = () = $written =~ /ERROR:  division by zero/g;
	cmp_ok($errors, '>=', 2, 'the worker and the leader log the error');
	logged_without_marker($offset, qr/division by zero/, 'an error in parallel workers');
}

# The gate reads a statement's text in time linear in its length, inside
# error reporting where a cancel cannot reach it: a 1 MB statement of
# EXECUTE words in nested comments (the name after each word lies past the
# comments that follow it) or in line comments took 0.5.0 before this check
# 12 s for 560 kB, quadratic in the text, holding the backend's locks.  Each
# statement must fail with its 22012 within a small multiple of the time the
# same statement takes without the error (when the gate does not run), on
# a loaded machine: the best of a few tries.
{
	my %shapes = (
		'nested comments' => sub {
			my ($op) = @_;
			my $n = int(2**20 / length('execute /*  */'));
			return "SELECT 1 / $op /* " . ('execute /* ' x $n) . ' */' . (' */' x $n) . ";\n";
		},
		'line comments' => sub {
			my ($op) = @_;
			my $n = int(2**20 / length('-- execute '));
			return "SELECT 1 / $op " . ('-- execute ' x $n) . "\n;\n";
		});
	for my $shape (sort keys %shapes)
	{
		my %file;
		for my $op (0, 1)
		{
			my $text = $shapes{$shape}->($op);
			$file{$op} = $node->basedir . "/long_$op.sql";
			open my $out, '>', $file{$op} or die "$file{$op}: $!";
			print $out $text;
			close $out;
		}
		my $run = sub {
			my ($op) = @_;
			my ($stdout, $stderr) = ('', '');
			my $started = Time::HiRes::time();
			IPC::Run::run(
				[ 'psql', '-X', '-q', '-h', $node->host, '-p', $node->port, '-d', $db, '-f', $file{$op} ],
				'>', \$stdout, '2>', \$stderr);
			return (Time::HiRes::time() - $started, $stderr);
		};
		my ($failing, $passing, $stderr, $fast);
		for my $try (1 .. 3)
		{
			($passing) = $run->(1);
			($failing, $stderr) = $run->(0);
			$fast = $failing <= 5 * $passing + 1;
			last if $fast;
		}
		like($stderr, qr/division by zero/, "a 1 MB statement of EXECUTE words in $shape: 22012");
		ok($fast, "... within 5 times (+ 1 s) the time it takes without the error")
		  or diag(sprintf('%.2f s failing, %.2f s without the error', $failing, $passing));
	}
}

# Unrelated statements keep their STATEMENT lines: in a session that has
# just called the extension, and an EXECUTE of a prepared statement that
# calls nothing of it (both checked below, with the log).
my $after_call_control = "$marker-after-call";
my $prepared_control = "$marker-prepared";
{
	my $session = $node->background_psql($db, on_error_stop => 0);
	$session->query_safe(q{PREPARE plain(text) AS SELECT 1 / 0, $1});
	$session->query_safe(q{SELECT idempotency_begin('s', 'then-unrelated', request_hash('r'::text), lease => '1 min')});
	$session->query(qq{SELECT 1 / 0, '$after_call_control'});
	$session->query(qq{EXECUTE plain('$prepared_control')});
	$session->quit;
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
like($log, qr/STATEMENT:  SELECT 1 \/ 0, '\Q$after_call_control\E'/,
	'the statement of an error right after a call, in the same session, is logged');
like($log, qr/STATEMENT:  EXECUTE plain\('\Q$prepared_control\E'\)/,
	'the EXECUTE of a prepared statement that calls nothing of the extension is logged');
like($log, qr/DETAIL:  Expected "," or "}", but found "\Q"$detail_control"\E"/,
	'the detail of an error outside the extension is logged, marker and all');
$log =~ s/\Q$_\E//g for ($after_call_control, $prepared_control, $detail_control);
$log =~ s/\Q$execute_control\E//g;
$log =~ s/\Q$statement_control\E//g;
$log =~ s/\Q$control\E//g;
my $leaks = () = $log =~ /\Q$marker\E/g;
is($leaks, 0, 'the server log never contains a response body, header or recovery point');

done_testing();
