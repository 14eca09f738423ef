# Citus: crashes and lost nodes.  With the keys distributed, a coordinator
# crash at either commit point of a request (the claim and the order commit
# together on one worker), then its retry: one order.  A worker lost
# mid-call, for calls Citus delegates (of the API or of a handler, directly
# or through a prepared statement): each fails, the coordinator logs the
# errors without the request, and the request runs after the worker's
# restart; and the error of a delegated call made through a prepared
# statement is logged without the body.  (Was part of test/t/060_citus.pl;
# the cluster and the requests are test/t/CitusTest.pm's.)
# Skipped, visibly, when the citus library is not installed.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use CitusTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

plan skip_all => citus_missing() if citus_missing();

my $db = 'postgres';
my ($coordinator, @workers) = start_orders_cluster();

query(q{SELECT idempotency_distribute('orders')});
# The first nextval of orders' sequence writes its WAL record, which gives the
# transaction an id on the coordinator, and such a transaction commits in two
# phases (test/t/066): the first request below would then be rolled back
# with the crash before the coordinator's commit.  Take that value here, so
# that the requests below write only on the worker, as their test needs.
query(q{SELECT nextval('orders_id_seq')});

# ---------------------------------------------------------------------------
# Coordinator crashes with distributed keys: the claim and the order are on
# one worker and commit there together.
# ---------------------------------------------------------------------------
for my $point (qw(pre_commit post_commit))
{
	crash_at_commit_point($point, 'ten3', "dist-$point");
	retry_once($point, 'ten3', "dist-$point", 'replay');
}

# ---------------------------------------------------------------------------
# A worker lost mid-call: Citus's error on the coordinator is logged without
# the statement, which holds the request (a call Citus delegates, of the API
# or of a handler distributed with the keys)
# ---------------------------------------------------------------------------
{
	query(q{CREATE FUNCTION held_order(p_tenant text, p_key text, p_item text)
	            RETURNS text LANGUAGE plpgsql AS $$
	        BEGIN
	            PERFORM pg_advisory_xact_lock(4242);
	            RETURN (idempotency_begin(p_tenant, p_key, request_hash(p_item))).outcome;
	        END $$;
	        SELECT create_distributed_function('held_order(text, text, text)', 'p_tenant',
	                                           colocate_with => 'orders')});
	my $worker = worker_of('ten7');
	# The handler waits for an advisory lock on the worker, the API's begin
	# for a claim that a transaction through the coordinator holds there.
	my $holder = $worker->background_psql($db);
	$holder->query_safe('SELECT pg_advisory_lock(4242)');
	my $claimer = $coordinator->background_psql($db);
	$claimer->query_safe('BEGIN');
	is($claimer->query_safe('SELECT outcome FROM ' . begin_call('ten7', 'held-api', 'POST /orders')),
		'claimed', 'worker lost: a claim is held on the worker');
	my $marker = 'body-marker-' . int(rand(1_000_000_000));
	my $log_offset = -s $coordinator->logfile;
	# Each call is its psql's last -c; the ones before it go first, each a
	# statement of its own.  The third and fourth are an EXECUTE of a
	# prepared statement, which names no function of the extension but
	# carries the body: of the API's call, and of the handler's.
	my @calls = (
		[ sprintf(q{SELECT held_order('ten7', 'held-handler', %s)}, quote($marker)) ],
		[
			sprintf(q{SELECT outcome FROM idempotency_begin('ten7', 'held-api', request_hash('POST /orders'::text),
			                                                wait => '10 minutes',
			                                                claim_data => jsonb_build_object('body', %s::text))},
				quote($marker))
		],
		[
			q{PREPARE held_begin(text, jsonb) AS
			    SELECT outcome FROM idempotency_begin($1, 'held-api', request_hash('POST /orders'::text),
			                                          wait => '10 minutes', claim_data => $2)},
			sprintf(q{EXECUTE held_begin('ten7', '{"body": "%s"}')}, $marker)
		],
		[
			q{PREPARE held_handler(text, text, text) AS SELECT held_order($1, $2, $3)},
			sprintf(q{EXECUTE held_handler('ten7', 'held-handler-prepared', %s)}, quote($marker))
		]);
	# (Cluster.pm logs every statement; a server that does not is what the
	# check below is about.)
	my (%out, @runs);
	for my $i (0 .. $#calls)
	{
		push @runs, IPC::Run::start(
			[
				'psql', '-XAtq', '-d', $coordinator->connstr($db),
				'-c', 'SET log_statement = none', map { ('-c', $_) } @{ $calls[$i] }
			],
			'>', \$out{"out$i"}, '2>', \$out{"err$i"});
	}
	ok( $worker->poll_query_until(
			$db, sprintf(q{SELECT count(*) = %d FROM pg_stat_activity
			        WHERE state = 'active' AND wait_event IS NOT NULL AND query LIKE '%%held-%%'
			          AND pid <> pg_backend_pid()}, scalar @calls)),
		'worker lost: every call waits on the worker');
	$worker->stop('immediate');
	ok(!$_->finish, 'worker lost: the call fails') for @runs;
	eval { $_->quit } for $claimer, $holder;
	my $log = slurp_file($coordinator->logfile, $log_offset);
	like($out{"err$_"}, qr/ERROR: /, "worker lost: call $_ got an error") for 0 .. $#calls;
	cmp_ok(scalar(() = $log =~ /ERROR: /g), '>=', scalar(@calls), 'worker lost: the coordinator logged the errors')
	  or diag($log);
	unlike($log, qr/\Q$marker\E/, '... without the request in any line');
	$worker->start;
	is(outcome_of('ten7', 'held-handler'), 'claimed', 'worker lost: after its restart, the request runs');
}

# ---------------------------------------------------------------------------
# The error of a delegated call made through a prepared statement, which
# Citus relays from the worker (IK001): the coordinator logs the EXECUTE,
# which names no function of the extension but carries the body; the log
# gate finds the prepared statement's text and keeps the line out.
# ---------------------------------------------------------------------------
{
	my $marker = 'body-marker-' . int(rand(1_000_000_000));
	my $log_offset = -s $coordinator->logfile;
	my $session = $coordinator->background_psql($db, on_error_stop => 0);
	$session->query_safe('SET log_statement = none');
	$session->query_safe(q{PREPARE finish(text, text, jsonb) AS
	                         SELECT idempotency_complete($1, $2, 201, $3)});
	$session->query(sprintf(q{EXECUTE finish('ten8', 'never-claimed', '{"body": "%s"}')}, $marker));
	like($session->{stderr}, qr/"never-claimed" is not claimed|IK001/,
		'a prepared call whose delegated call fails: the error of the worker');
	$session->quit;
	my $log = slurp_file($coordinator->logfile, $log_offset);
	like($log, qr/ERROR: .*never-claimed/, 'a prepared call whose delegated call fails: the coordinator logs it')
	  or diag($log);
	unlike($log, qr/\Q$marker\E/, '... without the request in any line');
}

done_testing();
