# Deferred claims (idempotency.defer_claims, idempotency.max_deferred_claims):
# a fresh claim lives in shared memory until its transaction completes it or
# ends.  What the isolation spec cannot reach is checked here: PREPARE
# TRANSACTION writes the claim before the transaction leaves the backend; a
# terminated holder's claim is gone for the waiter, not left behind in shared
# memory; databases do not share keys; a full table of deferred claims falls
# back to writing at once -- counted, and still correct.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('deferred',
	conf => [ 'max_prepared_transactions = 4', 'idempotency.max_deferred_claims = 2' ]);
my $db = 'postgres';

sub query { return $node->safe_psql($db, shift); }

sub counters
{
	return query(
		'SELECT deferred_claims || \' \' || deferred_fallbacks FROM idempotency_stats()');
}

# Rows this session's transaction inserted into the keys table so far.
my $inserted_in_transaction = q{SELECT coalesce(sum(n_tup_ins), 0) FROM pg_stat_xact_all_tables
	WHERE relid = 'idempotency.keys'::regclass};

query(q{CREATE EXTENSION idempotency});
is(query('SHOW idempotency.max_deferred_claims'), '2', 'the slot count is set');

# -- PREPARE TRANSACTION: the claim is written before the transaction is handed
#    over, so the prepared transaction holds a row like any other writer.
#    lookup(latest) and a retry answer it as any claim another transaction
#    holds, the same whether the claim was deferred (its row written at once
#    completed by the completion) or not (its row's first version is the
#    claim): in progress, none of the uncommitted response.
my $held_answer = q{SELECT l.status, l.attempt, l.response_status, l.response_body,
	    l.lease_expires_at, l.expires_at, l.completed_at, l.committed,
	    b.outcome, b.status, b.attempt, b.lease_expires_at, b.expires_at, b.retry_after_seconds
	  FROM idempotency_lookup('shop', '%s', latest => true) AS l, }
  . begin_call('shop', '%s', 'POST /orders', lease => '1 minute') . ' AS b';
for my $defer (qw(off on))
{
	query(qq{SET idempotency.defer_claims = $defer; BEGIN;
		SELECT outcome FROM } . begin_call('shop', "prepared_$defer", 'POST /orders') . q{;
		SELECT } . complete_call('shop', "prepared_$defer", 201, body => q{'{"order": 1}'})
		  . qq{; PREPARE TRANSACTION 'p_$defer'});
	is(query(sprintf($held_answer, ("prepared_$defer") x 2)),
		'in_progress|1||||||f|in_progress|in_progress|1|||1',
		"defer_claims $defer: a prepared completion is in progress to lookup(latest) and a retry");
}
query(q{ROLLBACK PREPARED 'p_off'});
query(q{BEGIN;
	SELECT outcome FROM } . begin_call('shop', 'prepared', 'POST /orders') . q{;
	SELECT } . complete_call('shop', 'prepared', 201, body => q{'{"order": 1}'}) . q{;
	PREPARE TRANSACTION 'p1'});
query(q{COMMIT PREPARED 'p1'});
query(q{ROLLBACK PREPARED 'p_on'});
my $replay = begin_request($node, $db, 'shop', 'prepared', 'POST /orders');
is(fields($replay, qw(outcome response_status response_body)),
	'replay | 201 | {"order": 1}',
	'after COMMIT PREPARED the retry replays the stored response');

query(q{BEGIN;
	SELECT outcome FROM } . begin_call('shop', 'aborted', 'POST /orders', lease => '1 minute') . q{;
	PREPARE TRANSACTION 'p2'});
is(begin_request($node, $db, 'shop', 'aborted', 'POST /orders')->{outcome},
	'in_progress', 'a prepared, uncompleted claim is in_progress');
query(q{ROLLBACK PREPARED 'p2'});
is(begin_request($node, $db, 'shop', 'aborted', 'POST /orders')->{outcome},
	'claimed', 'after ROLLBACK PREPARED the key is claimed afresh');

# -- A terminated holder: its waiter wakes and claims; the slot is free again.
my $holder = $node->background_psql($db);
my $holder_pid = $holder->query_safe('SELECT pg_backend_pid()');
$holder->query_safe('BEGIN');
is($holder->query_safe('SELECT outcome FROM ' . begin_call('shop', 'terminated', 'POST /orders')),
	'claimed', 'the holder claims');
is($holder->query_safe($inserted_in_transaction), '0', 'the claim is deferred: no row yet');
my $waiter = $node->background_psql($db);
$waiter->query_until(qr/waiting/, q{\echo waiting
	SELECT outcome FROM } . begin_call('shop', 'terminated', 'POST /orders', wait => '5min',
		lease => '1 minute') . qq{;\n});
$node->poll_query_until($db,
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'
	  AND query LIKE '%terminated%'})
  or die 'the waiter never waited';
query("SELECT pg_terminate_backend($holder_pid)");
$holder->quit;
$waiter->query_safe('SELECT 1');    # the blocked statement has finished
is(query(q{SELECT status || ' ' || attempt FROM idempotency_lookup('shop', 'terminated')}),
	'in_progress 1', 'the waiter claimed the key of the terminated holder');
$waiter->quit;

# -- Databases share the slots, not the keys: the same scope and key in flight
#    in one database is free in another.
query('CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION idempotency');
my $first_db = $node->background_psql($db);
$first_db->query_safe('BEGIN');
is($first_db->query_safe('SELECT outcome FROM ' . begin_call('shop', 'same', 'POST /orders')),
	'claimed', 'a claim in flight in the first database');
is(begin_request($node, 'other', 'shop', 'same', 'POST /orders')->{outcome},
	'claimed', 'the same scope and key is claimed in another database');
is(begin_request($node, 'other', 'shop', 'same', 'DELETE /orders')->{outcome},
	'mismatch', 'where only its own claim answers');
$first_db->query_safe('ROLLBACK');
$first_db->quit;

# -- Two slots: a third concurrent claim is written at once, and counted.
my ($claims_before, $fallbacks_before) = split / /, counters();
my @sessions;
for my $n (1 .. 3)
{
	my $session = $node->background_psql($db);
	$session->query_safe('BEGIN');
	$session->query_safe('SELECT outcome FROM ' . begin_call('shop', "slot$n", 'POST /orders'));
	push @sessions, $session;
}
is(join(',', map { $_->query_safe($inserted_in_transaction) } @sessions),
	'0,0,1', 'with both slots taken the third claim is written at once');
for my $n (1 .. 3)
{
	$sessions[ $n - 1 ]->query_safe('SELECT ' . complete_call('shop', "slot$n", 201));
	$sessions[ $n - 1 ]->query_safe('COMMIT');
	$sessions[ $n - 1 ]->quit;
}
my ($claims_after, $fallbacks_after) = split / /, counters();
is($claims_after - $claims_before, 2, 'two claims were deferred');
is($fallbacks_after - $fallbacks_before, 1, 'one fallback was counted');
is(query(q{SELECT string_agg(k || ':' || l.status, ',' ORDER BY k)
	FROM unnest(ARRAY['slot1', 'slot2', 'slot3']) k, idempotency_lookup('shop', k) l}),
	'slot1:completed,slot2:completed,slot3:completed', 'all three are stored completed');

# Slots are given back at commit: two more deferred claims fit.
query(q{BEGIN;
	SELECT outcome FROM } . begin_call('shop', 'again1', 'POST /orders') . q{;
	SELECT outcome FROM } . begin_call('shop', 'again2', 'POST /orders') . q{;
	SELECT } . complete_call('shop', 'again1', 201) . q{;
	SELECT } . complete_call('shop', 'again2', 201) . q{;
	COMMIT});
my ($claims_final, $fallbacks_final) = split / /, counters();
is(($claims_final - $claims_after) . ' ' . ($fallbacks_final - $fallbacks_after),
	'2 0', 'the slots were given back by the committed and the terminated transactions');

# -- defer_claims off: written at once, nothing counted.
my $direct = $node->background_psql($db);
$direct->query_safe('BEGIN');
$direct->query_safe('SET LOCAL idempotency.defer_claims = off');
$direct->query_safe('SELECT outcome FROM ' . begin_call('shop', 'direct', 'POST /orders'));
is($direct->query_safe($inserted_in_transaction), '1', 'defer_claims = off writes the claim at once');
$direct->query_safe('ROLLBACK');
$direct->quit;
is(counters(), "$claims_final $fallbacks_final", 'and neither defers nor counts a fallback');

ok(!$node->log_contains(qr/PANIC|terminated by signal/), 'no backend crashed');
$node->stop;
done_testing();
