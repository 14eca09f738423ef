# Streaming replication: keys live in an ordinary WAL-logged table, so a
# standby can answer lookups, refuses every write with 25006, and after a
# failover the promoted standby replays completed keys and carries in-progress
# two-phase claims (lease, attempt, recovery point) over.
#
# What asynchronous replication can lose: a key completed on the primary whose
# WAL was not yet streamed when the primary failed is missing on the promoted
# standby, so a retry is claimed and the request runs a second time.
# synchronous_commit = on with the standby in synchronous_standby_names closes
# that window (COMMIT returns only once the standby has flushed the WAL);
# remote_apply also makes the key visible to reads on the standby by then.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $db = 'postgres';
my $body = q{'{"order": 7, "customer": "Zoë", "lines": [{"sku": "A-1", "qty": 2}]}'::jsonb};
my $headers = q{'{"Location": "/orders/7"}'::jsonb};

sub new_primary
{
	my ($name) = @_;
	my $node = new_node($name, init => { allows_streaming => 1 });
	$node->safe_psql($db,
		q{CREATE EXTENSION idempotency;
		  CREATE TABLE orders (idem_key text PRIMARY KEY)});
	return $node;
}

# Runs the request for $key on $node: claim, order, response, COMMIT.
sub complete_order
{
	my ($node, $key) = @_;
	is( run_request(
			$node, $db, 'shop', $key, "POST /orders $key", 201,
			body => $body,
			headers => $headers,
			write => sprintf('INSERT INTO orders VALUES (%s)', quote($key))),
		"claimed 1\nt",
		$node->name . ": $key is claimed and completed");
	return;
}

# The retry of $key on $node replays the response complete_order stored.
sub replays_order
{
	my ($node, $key, $when) = @_;
	is( replayed_response($node, $db, [ 'shop', $key, "POST /orders $key" ]),
		$node->safe_psql($db, "SELECT 'replay | 201 | ' || ($body)::text || ' | ' || ($headers)::text"),
		"$when, a retry of $key replays the stored response");
	return;
}

# ---------------------------------------------------------------------------
# A standby answers lookups and refuses writes
# ---------------------------------------------------------------------------
my $primary = new_primary('primary');
complete_order($primary, 'in-backup');
my $standby = new_standby($primary, 'standby');
complete_order($primary, 'streamed');    # reaches the standby only by streaming
$primary->wait_for_catchup($standby);

for my $key ('in-backup', 'streamed')
{
	my $on_standby = lookup_key($standby, $db, 'shop', $key);
	is($on_standby->{status}, 'completed', "the standby's lookup finds $key completed");
	is_deeply($on_standby, lookup_key($primary, $db, 'shop', $key),
		"the standby's lookup of $key equals the primary's (request, response, times)");
}
is(lookup_key($standby, $db, 'shop', 'never-sent'), undef,
	"the standby's lookup of an unknown key returns no row");

my %standby_writes = (
	idempotency_begin => begin_call('shop', 'new', 'POST /orders new'),
	idempotency_complete => complete_call('shop', 'streamed', 201),
	idempotency_checkpoint => q{idempotency_checkpoint('shop', 'streamed', 'p')},
	idempotency_release => q{idempotency_release('shop', 'streamed')});
for my $function (sort keys %standby_writes)
{
	my ($sqlstate, $stderr) =
	  sql_error($standby, $db, "SELECT $standby_writes{$function}");
	is($sqlstate, '25006', "$function on a standby fails with 25006") or diag $stderr;
	like($stderr, qr/cannot call \Q$function\E\(\) during recovery/,
		"$function on a standby says it cannot run during recovery");
	like($stderr, qr/HINT:\s+Call it on the primary; idempotency_lookup\(\) works on a standby\./,
		"$function on a standby hints at the primary and at lookup");
}

# ---------------------------------------------------------------------------
# Failover: the promoted standby replays completed keys and carries an
# in-progress two-phase claim over, lease and fencing included
# ---------------------------------------------------------------------------
my @charge = ('pay', 'charge-1', 'charge 10 EUR');
is(begin_request($primary, $db, @charge, lease => '6s')->{outcome},
	'claimed', 'a two-phase claim commits on the primary');
$primary->safe_psql($db,
	q{SELECT idempotency_checkpoint('pay', 'charge-1', 'provider-called', lease => '6s', attempt => 1)});
$primary->wait_for_catchup($standby);
my $held = lookup_key($standby, $db, 'pay', 'charge-1');
is(fields($held, qw(status attempt recovery_point)),
	'in_progress | 1 | provider-called',
	'the standby sees the claim in progress with its recovery point');

$primary->stop('immediate');
wait_for_promotion($standby);

replays_order($standby, $_, 'after promotion') for ('in-backup', 'streamed');
SKIP:
{
	skip 'the lease ran out during the failover (slow machine)', 1
	  unless lease_running($standby, $db, 'pay', 'charge-1');
	is(begin_request($standby, $db, @charge)->{outcome},
		'in_progress', 'after promotion the carried-over claim answers in_progress while its lease runs');
}
wait_for_lease_end($standby, $db, 'pay', 'charge-1');
my $takeover = begin_request($standby, $db, @charge);
is(fields($takeover, qw(outcome attempt recovery_point)),
	'claimed | 2 | provider-called',
	'after its lease the claim is taken over as attempt 2 with the recovery point');
my ($sqlstate, $stderr) = sql_error($standby, $db,
	'SELECT ' . complete_call('pay', 'charge-1', 200, attempt => 1));
is($sqlstate, 'IK003', "the old primary's holder (attempt 1) is fenced off: IK003") or diag $stderr;
is( $standby->safe_psql($db,
		'SELECT ' . complete_call('pay', 'charge-1', 200, body => q{'{"charged": true}'}, attempt => 2)),
	't',
	'attempt 2 completes on the promoted standby');
complete_order($standby, 'after-failover');

# ---------------------------------------------------------------------------
# Synchronous replication closes the loss window; async replication does not
# ---------------------------------------------------------------------------
my $sync_primary = new_primary('sync_primary');
my $sync_standby = new_standby($sync_primary, 'sync_standby');
my $async_standby = new_standby($sync_primary, 'async_standby');
$sync_primary->append_conf('postgresql.conf', q{synchronous_standby_names = 'sync_standby'});
$sync_primary->reload;
$sync_primary->poll_query_until($db,
	q{SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = 'sync_standby'})
  or die 'sync_standby did not become a synchronous standby';
pass('sync_standby is the synchronous standby, async_standby an asynchronous one');

# remote_apply: once COMMIT returns, the standby has applied it, so a read
# there sees the key without waiting for catchup.
$sync_primary->safe_psql($db, q{ALTER DATABASE postgres SET synchronous_commit = remote_apply});
is($sync_primary->safe_psql($db, 'SHOW synchronous_commit'),
	'remote_apply', 'new sessions on sync_primary commit with remote_apply');
complete_order($sync_primary, 'applied');
is(lookup_key($sync_standby, $db, 'shop', 'applied')->{status},
	'completed', 'with remote_apply the key is visible on the standby as soon as COMMIT returns');

# on: once COMMIT returns, the synchronous standby has the WAL on disk, so a
# failover right after it keeps the key.  The asynchronous standby, down
# (that is, lagging) at the time, misses it.
$sync_primary->safe_psql($db, q{ALTER DATABASE postgres SET synchronous_commit = on});
is($sync_primary->safe_psql($db, 'SHOW synchronous_commit'),
	'on', 'new sessions on sync_primary commit with synchronous_commit = on');
$sync_primary->wait_for_catchup($async_standby);
$async_standby->stop;
complete_order($sync_primary, 'durable');
$sync_primary->stop('immediate');

wait_for_promotion($sync_standby);
replays_order($sync_standby, 'durable', 'on the promoted synchronous standby');
replays_order($sync_standby, 'applied', 'on the promoted synchronous standby');

$async_standby->start;
wait_for_promotion($async_standby);
replays_order($async_standby, 'applied', 'on the promoted asynchronous standby');
is(lookup_key($async_standby, $db, 'shop', 'durable'), undef,
	'the asynchronous standby lost the key completed while it lagged');
is(begin_request($async_standby, $db, 'shop', 'durable', 'POST /orders durable')->{outcome},
	'claimed', 'so there a retry is claimed and would run the request again');

$_->stop for ($standby, $sync_standby, $async_standby);
done_testing();
