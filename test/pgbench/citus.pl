# The Citus throughput comparison (make bench-citus runs it; see
# test/pgbench/citus): on one coordinator and two workers, through the
# coordinator, alternating: a new request and a replay of the one-round-trip
# handler (claim, INSERT, complete in a function distributed by the tenant)
# against the same INSERT without idempotency, as a bare distributed INSERT
# and in a distributed function; a new request in five statements through
# the API against the hand-written table pattern; a replay by a delegated
# idempotency_begin; and, as the floor of a delegated call, a distributed
# function that does nothing.  64 tenants, orders and keys in 4 shards,
# synchronous_commit = off, CITUS_CLIENTS clients (4), CITUS_REPS
# repetitions (3) of CITUS_SECONDS (10) each.  Every script checks its answer
# (the handler's outcome, a row count of 1, a replay's status, a complete
# that fails unless claimed), and the run ends with orders = completed keys.
# Prints the tps and the ratios within each repetition (median, then each),
# and writes them to $CITUS_RESULTS when set.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::RealBin/../t";
use IdempotencyTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

plan skip_all => citus_missing() if citus_missing();

my $clients = $ENV{CITUS_CLIENTS} // 4;
my $reps = $ENV{CITUS_REPS} // 3;
my $seconds = $ENV{CITUS_SECONDS} // 10;
my $db = 'postgres';

my ($coordinator, @workers) = start_citus_cluster(
	conf => [ 'synchronous_commit = off', "shared_buffers = '256MB'", 'log_statement = none' ]);
citus_database($db, $coordinator, @workers);
my $query = sub { return $coordinator->safe_psql($db, shift) };
$query->(
	q{CREATE EXTENSION idempotency;
	  CREATE TABLE orders (tenant text COLLATE "C" NOT NULL, id bigserial,
	                       idem_key text NOT NULL, item text NOT NULL,
	                       PRIMARY KEY (tenant, id));
	  SELECT create_distributed_table('orders', 'tenant', shard_count => 4);
	  SELECT idempotency_distribute('orders');
	  CREATE FUNCTION plain_order(p_tenant text, p_key text, p_item text)
	      RETURNS text LANGUAGE plpgsql AS $$
	  BEGIN
	      INSERT INTO orders (tenant, idem_key, item) VALUES (p_tenant, p_key, p_item);
	      RETURN 'created';
	  END
	  $$;
	  SELECT create_distributed_function('plain_order(text, text, text)', 'p_tenant',
	                                     colocate_with => 'orders');
	  -- The handler; p_expect: the outcome the caller expects, else it fails.
	  CREATE FUNCTION place_order(p_tenant text, p_key text, p_item text, p_expect text)
	      RETURNS text LANGUAGE plpgsql AS $$
	  DECLARE
	      answer idempotency_begin_result;
	  BEGIN
	      answer := idempotency_begin(p_tenant, p_key, request_hash(p_item));
	      IF answer.outcome::text <> p_expect THEN
	          RAISE EXCEPTION 'expected %, got %', p_expect, answer.outcome;
	      END IF;
	      IF answer.outcome <> 'claimed' THEN
	          RETURN answer.outcome;
	      END IF;
	      INSERT INTO orders (tenant, idem_key, item) VALUES (p_tenant, p_key, p_item);
	      PERFORM idempotency_complete(p_tenant, p_key, 201, jsonb_build_object('item', p_item));
	      RETURN answer.outcome;
	  END
	  $$;
	  SELECT create_distributed_function('place_order(text, text, text, text)', 'p_tenant',
	                                     colocate_with => 'orders');
	  -- The floor of a delegated call: a distributed function that does nothing.
	  CREATE FUNCTION noop(p_tenant text) RETURNS text LANGUAGE plpgsql AS $$
	  BEGIN
	      RETURN 'ok';
	  END
	  $$;
	  SELECT create_distributed_function('noop(text)', 'p_tenant', colocate_with => 'orders');
	  -- The hand-written pattern's table, distributed like the keys.
	  CREATE TABLE keys_plain (tenant text COLLATE "C" NOT NULL, key text NOT NULL,
	                           status text NOT NULL, response_status integer,
	                           response_body jsonb, PRIMARY KEY (tenant, key));
	  SELECT create_distributed_table('keys_plain', 'tenant', colocate_with => 'orders');});
# The replays' keys, each through the handler (a set-returning query would
# not be routed).
my $known = 2000;
$query->(join '',
	map { sprintf(qq{SELECT place_order('t%d', 'known-%d', 'book', 'claimed');\n}, $_ % 64, $_) }
	  1 .. $known);

# Each workload fails its transaction when its answer is not the expected
# one: the handler raises, \gset needs exactly one row.  (Only a bare call in
# the select list is delegated: no WHERE around the functions.)
my %scripts = (
	bare_insert => q{INSERT INTO orders (tenant, idem_key, item)
	                 VALUES ('t' || :t, 'bare-' || :k, 'book') RETURNING 1 AS one \gset},
	delegated_noop => q{SELECT noop('t' || :t) AS answer \gset},
	function_insert => q{SELECT plain_order('t' || :t, 'fn-' || :k, 'book') AS answer \gset},
	new_request => q{SELECT place_order('t' || :t, 'new-' || :k, 'book', 'claimed') AS answer \gset},
	replay => q{SELECT place_order('t' || (:g % 64), 'known-' || :g, 'book', 'replay') AS answer \gset},
	# A new request in five statements through the coordinator, as an
	# application that does not use a handler sends it: the API's calls
	# (a complete fails unless the begin claimed), and the hand-written table
	# pattern (RETURNING fails the client on a conflict).
	direct_new => q{BEGIN;
	                SELECT outcome FROM idempotency_begin('t' || :t, 'dn-' || :k,
	                                                      request_hash('book'::text));
	                INSERT INTO orders (tenant, idem_key, item) VALUES ('t' || :t, 'dn-' || :k, 'book');
	                SELECT idempotency_complete('t' || :t, 'dn-' || :k, 201,
	                                            jsonb_build_object('item', 'book'));
	                COMMIT;},
	plain_new => q{BEGIN;
	               INSERT INTO keys_plain (tenant, key, status) VALUES ('t' || :t, 'pn-' || :k, 'started')
	                   ON CONFLICT DO NOTHING RETURNING 1 AS one \gset
	               INSERT INTO orders (tenant, idem_key, item) VALUES ('t' || :t, 'pn-' || :k, 'book');
	               UPDATE keys_plain SET status = 'completed', response_status = 201,
	                                     response_body = jsonb_build_object('item', 'book')
	                WHERE tenant = 't' || :t AND key = 'pn-' || :k;
	               COMMIT;},
	# The replay as an application that calls the API itself sends it: a
	# delegated idempotency_begin; a stored status other than 201 (or none)
	# fails the client.
	direct_replay => q{SELECT response_status AS status
	                     FROM idempotency_begin('t' || (:g % 64), 'known-' || :g,
	                                            request_hash('book'::text)) \gset
	                   \if :status = 201
	                   \else
	                   \set not_a_replay 1 / 0
	                   \endif});
my $dir = PostgreSQL::Test::Utils::tempdir();
# Fresh keys from 10^15 per tenant: a run draws a few hundred thousand, and
# from 4 * 10^9 two of them met about once in 25 runs (the second one
# rightly replayed, failing the new-request check).
for my $workload (keys %scripts)
{
	my $script = $scripts{$workload} =~ s/^\s+//mgr;
	append_to_file("$dir/$workload.sql",
		"\\set t random(0, 63)\n\\set k random(1, 1000000000000000)\n\\set g random(1, $known)\n$script\n");
}

my @order = qw(bare_insert function_insert new_request plain_new direct_new replay direct_replay
  delegated_noop);
my %tps;
for my $rep (1 .. $reps)
{
	for my $workload (@order)
	{
		my ($out, $err) = run_command(
			[
				'pgbench', '-n', '-c', $clients, '-j', 2, '-T', $seconds,
				'-f', "$dir/$workload.sql",
				'-h', $coordinator->host, '-p', $coordinator->port, $db
			]);
		my ($tps) = $out =~ /^tps = ([0-9.]+)/m;
		my ($failed) = $out =~ /^number of failed transactions: (\d+)/m;
		ok(defined $tps && !$failed && $err !~ /ERROR|aborted/,
			"rep $rep, $workload: every transaction ran and checked its answer")
		  or diag($out . $err);
		push @{ $tps{$workload} }, $tps // 0;
	}
}
is($query->(q{SELECT count(*) FROM orders WHERE idem_key NOT LIKE 'bare-%' AND idem_key NOT LIKE 'fn-%'
	                                      AND idem_key NOT LIKE 'pn-%'}),
	$query->(q{SELECT count(*) FROM idempotency.keys WHERE status = 'c'}),
	'orders placed through the API = completed keys');

sub median
{
	my @sorted = sort { $a <=> $b } @_;
	return $sorted[ $#sorted / 2 ];
}
my @report = (sprintf('Citus %s, PostgreSQL %s; coordinator and 2 workers on one machine; '
		  . '%d clients through the coordinator, %d x %d s, alternating; synchronous_commit = off',
		$query->(q{SELECT extversion FROM pg_extension WHERE extname = 'citus'}),
		$query->(q{SHOW server_version}), $clients, $reps, $seconds));
push @report, sprintf('%-16s tps median %.0f (%s)', $_, median(@{ $tps{$_} }),
	join(', ', map { sprintf '%.0f', $_ } @{ $tps{$_} }))
  for @order;
for my $pair ([qw(new_request bare_insert)], [qw(new_request function_insert)],
	[qw(direct_new plain_new)],
	[qw(replay bare_insert)], [qw(replay function_insert)],
	[qw(direct_replay bare_insert)], [qw(direct_replay function_insert)],
	[qw(replay delegated_noop)], [qw(function_insert delegated_noop)])
{
	my @ratios = map { $tps{ $pair->[0] }[$_] / ($tps{ $pair->[1] }[$_] || 1) } 0 .. $reps - 1;
	push @report, sprintf('%s / %s: %.2f (%s)', @$pair, median(@ratios),
		join(', ', map { sprintf '%.2f', $_ } @ratios));
}
note($_) for @report;
append_to_file($ENV{CITUS_RESULTS}, join("\n", @report) . "\n") if $ENV{CITUS_RESULTS};
done_testing();
