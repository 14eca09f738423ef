# Citus with tenant columns of type bigint, integer and uuid, each in a
# database of its own (the keys are distributed once per database):
# idempotency_distribute() makes shard_key the tenant's type and distributes
# the keys by it, co-located with the tenant's rows, moving the keys stored
# before; a stored scope that is not a tenant value stops it, with nothing
# changed.  Calls through the coordinator with the scope as a bigint (for
# bigint and integer tenants) or a uuid are delegated by it, and the
# functions on the node find the same shard (a router query by shard_key
# finds every key); a text scope from the coordinator is forwarded; a distributed
# handler passes its typed tenant as text; a scope that is not a tenant value
# fails before Citus plans the call, without the statement in the log; a
# NULL one with 22004; a shard move under load keeps orders = completed
# keys; and requests through the coordinator wait out a block_writes move,
# a logical move, a split, a drain and a rebalance under load, and requests
# through the handler are forwarded to the new node, beside plain
# distributed INSERTs, without IK005 or a failed request.  And an update
# from 0.2.0 of keys distributed by a text scope.
# Skipped, visibly, when the citus library is not installed.
use strict;
use warnings;
use Digest::MD5 qw(md5_hex);
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

plan skip_all => citus_missing() if citus_missing();
# From PostgreSQL 16, Citus refuses keys on the coordinator and forwarded
# calls (doc/citus.md, Limits; t/065 and t/066 check the refusals): the keys stored
# before the distribution are inserted as a restored dump would store them,
# and the forwarded cases are left out.
my $without_exports = citus_without_exports();
note($without_exports) if $without_exports;

my ($coordinator, @workers) = start_citus_cluster();

# The tenants of each type, as text: spread over the whole range, and for
# bigint beyond integer's.
my %tenants = (
	bigint => [ map { $_ * 230_584_300_921_369_395 - 4_611_686_018_427_387_904 } 1 .. 40 ],
	integer => [ map { $_ * 53_687_091 - 1_073_741_824 } 1 .. 40 ],
	uuid => [
		map {
			my $h = md5_hex("tenant-$_");
			join '-', substr($h, 0, 8), substr($h, 8, 4), substr($h, 12, 4), substr($h, 16, 4),
			  substr($h, 20, 12)
		} 1 .. 40
	]);
# A stored scope that is not a value of the type, and its SQLSTATE.
my %not_a_tenant = (
	bigint => [ 'tenant-x', '22P02' ],
	integer => [ '99999999999', '22003' ],
	uuid => [ 'tenant-x', '22P02' ]);
# The type of the scope of the functions the coordinator delegates.
my %scope_type = (bigint => 'bigint', integer => 'bigint', uuid => 'uuid');

for my $type (qw(bigint integer uuid))
{
	my $db = "tenants_$type";
	$_->safe_psql('postgres', "CREATE DATABASE $db") for $coordinator, @workers;
	citus_database($db, $coordinator, @workers);
	my $query = sub { return $coordinator->safe_psql($db, shift) };
	my $order_sql = sub {
		my ($tenant, $key) = @_;
		return sprintf(
			q{INSERT INTO orders (tenant_id, idem_key, item) VALUES (%s, %s, 'book')},
			quote($tenant), quote($key));
	};
	# Whether the keys are distributed (0 or 1), and shard_key's type.
	my $distribution_state = sub {
		return $query->(
			q{SELECT count(*)::text FROM pg_dist_partition
			   WHERE logicalrelid = 'idempotency.keys'::regclass
			  UNION ALL
			  SELECT format_type(atttypid, atttypmod) FROM pg_attribute
			   WHERE attrelid = 'idempotency.keys'::regclass AND attname = 'shard_key'});
	};
	my @tenant = @{ $tenants{$type} };
	# The scope as the delegated functions take it.
	my $typed = sub { my ($tenant) = @_; return \(quote($tenant) . "::$scope_type{$type}") };
	# Another spelling of a tenant's value, as a text scope: zeros after
	# the sign, a uuid in upper case.
	my $spelled = sub {
		my ($tenant) = @_;
		return $type eq 'uuid' ? uc $tenant : $tenant =~ s/^(-?)/${1}00/r;
	};
	$query->(
		qq{CREATE EXTENSION idempotency;
		   CREATE TABLE orders (tenant_id $type NOT NULL, id bigserial,
		                        idem_key text NOT NULL, item text NOT NULL,
		                        PRIMARY KEY (tenant_id, id));
		   SELECT create_distributed_table('orders', 'tenant_id', shard_count => 4)});

	# Keys stored before the distribution, on the coordinator: one of a
	# tenant, one of a scope that is not a tenant value, one under another
	# spelling of a tenant, and a key stored under two spellings of one.
	my ($bad_scope, $bad_state) = @{ $not_a_tenant{$type} };
	my @stored = ([ $tenant[0], 'before' ], [ $bad_scope, 'k' ], [ $spelled->($tenant[0]), 'spelled-before' ],
		[ $tenant[0], 'twin' ], [ $spelled->($tenant[0]), 'twin' ]);
	if ($without_exports)
	{
		$query->(
			join ';', $order_sql->($tenant[0], 'before'), $order_sql->($spelled->($tenant[0]), 'spelled-before'),
			map {
				sprintf(q{INSERT INTO idempotency.keys (scope, key, request, created_at, ttl, expires_at,
				                                        status, attempt, completed_at, response_status, digest)
				          VALUES (%1$s, %2$s, request_hash('POST /orders'::text), now(), '1 day',
				                  now() + '1 day', 'c', 1, now(), 201, idempotency.key_digest('-', %1$s, %2$s))},
					quote($_->[0]), quote($_->[1]))
			} @stored);
	}
	else
	{
		is( run_request($coordinator, $db, $tenant[0], 'before', 'POST /orders', 201,
				write => $order_sql->($tenant[0], 'before')),
			"claimed 1\nt", "$type: a request before the keys are distributed");
		is(run_request($coordinator, $db, $bad_scope, 'k', 'POST /orders', 201),
			"claimed 1\nt", "$type: a key of a scope that is not a $type");
		is( run_request($coordinator, $db, $spelled->($tenant[0]), 'spelled-before', 'POST /orders', 201,
				write => $order_sql->($spelled->($tenant[0]), 'spelled-before')),
			"claimed 1\nt", "$type: a key under another spelling of a tenant");
		is(run_request($coordinator, $db, $_->[0], $_->[1], 'POST /orders', 201),
			"claimed 1\nt", "$type: a key under the spelling $_->[0]") for @stored[ 3, 4 ];
	}
	my ($sqlstate, $stderr) =
	  sql_error($coordinator, $db, q{SELECT idempotency_distribute('orders')});
	is($sqlstate, $bad_state, "$type: idempotency_distribute refuses such a key ($bad_state)");
	like(
		$stderr,
		qr/the scope of a stored key is not a value of type $type, the type of the distribution column tenant_id of table (public\.)?orders/,
		"$type: ... and says why");
	is($distribution_state->(), "0\ntext", "$type: ... with nothing changed");
	$query->(sprintf(q{DELETE FROM idempotency.keys WHERE scope = %s}, quote($bad_scope)));
	# Once distributed, a scope names the tenant's value as its type prints
	# it: two keys that would become one stop it, with nothing changed.
	($sqlstate, $stderr) = sql_error($coordinator, $db, q{SELECT idempotency_distribute('orders')});
	is($sqlstate, '23505', "$type: a key stored under two spellings of one tenant stops it (23505)");
	like($stderr, qr/two stored keys have the same key and scopes that spell one value of type $type/,
		"$type: ... and says why");
	is($distribution_state->(), "0\ntext", "$type: ... with nothing changed");
	$query->(q{DELETE FROM idempotency.keys WHERE key = 'twin'});
	if ($type eq 'bigint')
	{
		# A worker's own table (unused, but changed with the coordinator's)
		# that cannot take the change stops it too, with nothing changed on
		# the coordinator.
		my $insert_bad_row =
		  q{INSERT INTO idempotency.keys (scope, key, request, created_at, ttl, expires_at,
		                                  status, attempt, digest)
		    VALUES ('tenant-x', 'k', request_hash('r'::text), now(), '1 day', now() + '1 day',
		            'c', 1, idempotency.key_digest('-', 'tenant-x', 'k'))};
		$workers[1]->safe_psql($db, $insert_bad_row);
		($sqlstate, $stderr) =
		  sql_error($coordinator, $db, q{SELECT idempotency_distribute('orders')});
		is($sqlstate, '55000', "$type: a worker's table that cannot change stops it (55000)");
		like($stderr, qr/could not change the tables of the extension on node .*:@{[ $workers[1]->port ]}/,
			"$type: ... naming the node");
		is($distribution_state->(), "0\ntext", "$type: ... with nothing changed on the coordinator");
		$workers[1]->safe_psql($db, q{DELETE FROM idempotency.keys});
	}

	$query->(q{SELECT idempotency_distribute('orders')});
	is( $query->(
			q{SELECT column_to_column_name(logicalrelid, partkey),
			         colocationid = (SELECT colocationid FROM pg_dist_partition
			                          WHERE logicalrelid = 'orders'::regclass)
			    FROM pg_dist_partition WHERE logicalrelid = 'idempotency.keys'::regclass}),
		'shard_key|t', "$type: the keys are distributed by shard_key, co-located with orders");
	is( $query->(
			sprintf(q{BEGIN; SELECT outcome FROM %s; COMMIT},
				begin_call($typed->($tenant[0]), 'before', 'POST /orders'))),
		'replay',
		"$type: the key stored before replays from its shard");
	is( $query->(
			sprintf(q{BEGIN; SELECT outcome FROM %s; COMMIT},
				begin_call($tenant[0], 'before', 'POST /orders'))),
		'replay',
		"$type: a text scope is not delegated, and is forwarded from the coordinator to its shard")
	  unless $without_exports;
	is( $query->(
			sprintf(q{SELECT scope = %s FROM idempotency.keys WHERE key = 'spelled-before';
			          BEGIN; SELECT outcome FROM %s; COMMIT},
				quote($tenant[0]), begin_call($typed->($tenant[0]), 'spelled-before', 'POST /orders'))),
		"t\nreplay",
		"$type: a key stored under another spelling moved to the tenant's, and replays");

	# Every tenant through the coordinator: Citus delegates each call by the
	# scope read as $type, and the functions on the node must pick the
	# same shard, else they answer IK005 (another node) or store the key
	# where a router query by shard_key does not look (another shard of the
	# node).
	my @answers = map {
		run_request($coordinator, $db, $typed->($_), 'k', 'POST /orders', 201,
			write => $order_sql->($_, 'k'))
	} @tenant;
	is_deeply(\@answers, [ ("claimed 1\nt") x @tenant ],
		"$type: a request of each of " . @tenant . ' tenants claims and completes');
	is( $query->(
			join ';',
			map {
				sprintf(q{SELECT count(*) FROM idempotency.keys
				           WHERE shard_key = %s AND scope = %s AND key = 'k'},
					quote($_), quote($_))
			} @tenant),
		join("\n", ('1') x @tenant),
		"$type: a router query by shard_key finds each tenant's key");
	is( $query->(
			sprintf(q{BEGIN; SELECT outcome FROM %s; COMMIT},
				begin_call($typed->($tenant[1]), 'k', 'POST /orders'))),
		'replay', "$type: a retry replays");
	is( $query->(
			sprintf(q{SELECT status FROM idempotency_lookup(%s, 'k')}, ${ $typed->($tenant[1]) })),
		'completed', "$type: a lookup is delegated too");
	# Every spelling of the tenant names the same key: on the node of its
	# shard, and forwarded there from the coordinator.
	my $spelling = $spelled->($tenant[1]);
	my ($shard_node) = grep {
		$_->port == $query->(
			sprintf(q{SELECT nodeport FROM pg_dist_shard_placement
			           WHERE shardid = get_shard_id_for_distribution_column('orders', %s)},
				quote($tenant[1])))
	} @workers;
	for my $node ($shard_node, $without_exports ? () : $coordinator)
	{
		my $where = $node == $coordinator ? 'forwarded from the coordinator' : 'on the node of its shard';
		is( $node->safe_psql(
				$db,
				sprintf(q{BEGIN; SELECT outcome FROM %s; COMMIT;
				          SELECT status FROM idempotency_lookup(%s, 'k');
				          SELECT string_agg(key, ',' ORDER BY key) FROM idempotency_keys(%s)},
					begin_call($spelling, 'k', 'POST /orders'), quote($spelling), quote($spelling))),
			"replay\ncompleted\nk",
			"$type: the scope $spelling replays, looks up and lists the key of $tenant[1], $where");
	}

	# A distributed handler with the typed tenant, which it passes as text.
	$query->(typed_tenant_handler_sql($type));
	my $handler_call = sprintf(q{SELECT place_order(%s, 'handled', 'book')}, quote($tenant[3]));
	is($query->($handler_call), 'claimed', "$type: the distributed handler claims");
	is($query->($handler_call), 'replay', "$type: ... and replays");
	is( $query->(
			sprintf(q{SELECT count(*) FROM orders WHERE tenant_id = %s AND idem_key = 'handled'},
				quote($tenant[3]))),
		'1', "$type: ... one order");

	# A scope that is not a tenant value fails before Citus plans the call,
	# and the statement, which holds the request, stays out of the log.
	# (An integer tenant's is a bigint beyond its range: Citus would convert
	# it in planning.)
	my $bad_call = $type eq 'integer' ? \'99999999999::bigint' : 'tenant-x';
	my $log_offset = -s $coordinator->logfile;
	($sqlstate, $stderr) = sql_error($coordinator, $db,
		sprintf(q{SELECT * FROM %s}, begin_call($bad_call, 'k', 'secret-request-body')));
	is($sqlstate, $bad_state, "$type: a call with a scope that is no $type fails ($bad_state)");
	like($stderr, qr/reading the scope as a value of the distributed keys' tenant type, $type/,
		"$type: ... saying what it read the scope as");
	unlike(slurp_file($coordinator->logfile, $log_offset), qr/STATEMENT:.*secret-request-body/,
		"$type: ... and the log does not show the statement");
	($sqlstate) = sql_error($coordinator, $db,
		sprintf(q{SELECT * FROM %s}, begin_call(\"NULL::$scope_type{$type}", 'k', 'POST /orders')));
	is($sqlstate, '22004', "$type: a NULL scope fails with 22004 before Citus delegates it");

	is($query->(q{SELECT count(*) FROM orders}),
		$query->(q{SELECT count(*) FROM idempotency.keys WHERE status = 'c'}),
		"$type: orders = completed keys");

	next unless $type eq 'bigint';

	# A logical shard move under load, through the handler.
	my $script = PostgreSQL::Test::Utils::tempdir() . '/place_order.sql';
	append_to_file($script,
		    qq{\\set t random(1, 40)\n\\set key random(1, 100000)\n}
		  . qq{SELECT place_order((:t)::bigint * 230584300921369395 - 4611686018427387904, }
		  . qq{'load-' || :key, 'book');\n});
	my ($out, $err) = ('', '');
	my $before = $query->(q{SELECT count(*) FROM orders});
	my $run = IPC::Run::start(
		[
			'pgbench', '-n', '-c', 4, '-j', 4, '-t', 400, '-f', $script,
			'-h', $coordinator->host, '-p', $coordinator->port, $db
		],
		'>', \$out, '2>', \$err);
	$coordinator->poll_query_until($db, "SELECT count(*) >= $before + 50 FROM orders")
	  or die 'no load';
	my ($shard, $from) = split /\|/, $query->(
		sprintf(q{SELECT shardid, nodeport FROM pg_dist_shard_placement
		           WHERE shardid = get_shard_id_for_distribution_column('orders', %s)},
			quote($tenant[0])));
	my ($source) = grep { $_->port == $from } @workers;
	my ($target) = grep { $_->port != $from } @workers;
	$query->(
		sprintf(q{SELECT citus_move_shard_placement(%d, %s, %d, %s, %d, 'force_logical')},
			$shard, quote($source->host), $source->port, quote($target->host), $target->port));
	$run->finish;
	like($out, qr/number of transactions actually processed: [1-9]/, "$type move: requests ran")
	  or diag($err);
	unlike($err, qr/ERROR/, "$type move: no error (a call that reached the old node is forwarded)");
	is( $query->(
			sprintf(q{SELECT nodeport FROM pg_dist_shard_placement
			           WHERE shardid = get_shard_id_for_distribution_column('idempotency.keys', %s)},
				quote($tenant[0]))),
		$target->port,
		"$type move: the keys of tenant $tenant[0] moved with its orders");
	is($query->(q{SELECT count(*) FROM orders}),
		$query->(q{SELECT count(*) FROM idempotency.keys WHERE status = 'c'}),
		"$type move: orders = completed keys");
	is( $query->(
			sprintf(q{BEGIN; SELECT outcome FROM %s; COMMIT},
				begin_call($typed->($tenant[0]), 'before', 'POST /orders'))),
		'replay',
		"$type move: a key of the moved shard replays from its new node");

	# Shard operations under load, side by side with plain distributed
	# INSERTs: a block_writes move, a logical move, a split, a drain and a
	# rebalance.  Requests through the coordinator (BEGIN; begin; order;
	# complete; COMMIT; then a retry, which must replay) wait out each switch
	# where the plain INSERTs wait, and go to the new node: no IK005, and no
	# more errors than the plain INSERTs.
	$query->(
		q{CREATE TABLE plain_orders (tenant_id bigint NOT NULL, id bigserial,
		                             idem_key text NOT NULL, item text NOT NULL,
		                             PRIMARY KEY (tenant_id, id));
		  SELECT create_distributed_table('plain_orders', 'tenant_id', colocate_with => 'orders')});
	# The load runs as an application role with EXECUTE on the functions,
	# its business tables' privileges and those on the routing table
	# (doc/citus.md): a call that reaches a node its shard has just left is
	# forwarded for it too.  Citus propagates the tables' grants to their
	# shards; the rest is granted on each node, the text functions being
	# distributed on none of them here.
	for my $node ($coordinator, @workers)
	{
		$node->safe_psql($db,
			qq{SET citus.enable_ddl_propagation TO off;
			   DO \$\$
			   DECLARE
			       f regprocedure;
			   BEGIN
			       IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'app') THEN
			           CREATE ROLE app LOGIN;
			       END IF;
			       FOR f IN SELECT p.oid::regprocedure FROM pg_proc AS p
			                 WHERE p.proname IN ('idempotency_begin', 'idempotency_complete',
			                                     'place_order') LOOP
			           EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO app', f);
			       END LOOP;
			   END
			   \$\$;
			   GRANT USAGE ON SEQUENCE orders_id_seq, plain_orders_id_seq TO app});
	}
	$query->(
		q{GRANT SELECT, INSERT ON orders, plain_orders TO app;
		  GRANT SELECT, UPDATE ON idempotency.route TO app});
	my $tenant_expr = '(:t)::bigint * 230584300921369395 - 4611686018427387904';
	my $request_script = PostgreSQL::Test::Utils::tempdir() . '/request.sql';
	# (Call shapes Citus delegates: no expression of the result, no WHERE.
	# A complete of a key the transaction has not claimed fails; a retry
	# that does not replay fails the client.)
	append_to_file($request_script,
		qq{\\set t random(1, 40)\n\\set key random(1, 1000000000000)\n}
		  . qq{BEGIN;\n}
		  . qq{SELECT outcome FROM idempotency_begin($tenant_expr, 'op-' || :key, }
		  . qq{request_hash('book'::text));\n}
		  . qq{INSERT INTO orders (tenant_id, idem_key, item) VALUES ($tenant_expr, 'op-' || :key, 'book');\n}
		  . qq{SELECT idempotency_complete($tenant_expr, 'op-' || :key, 201, NULL);\n}
		  . qq{COMMIT;\n}
		  . qq{SELECT response_status AS replayed FROM idempotency_begin($tenant_expr, 'op-' || :key, }
		  . qq{request_hash('book'::text)) \\gset\n}
		  . qq{\\if :replayed = 201\n\\else\n\\set not_a_replay 1 / 0\n\\endif\n});
	# The same through the distributed handler, which Citus delegates whole
	# without waiting: a call that reaches a node its shard has just left is
	# forwarded to the new node.  The retry's check is an expression of the
	# call, which Citus does not delegate: it runs on the coordinator, and
	# its begin is forwarded each time (as the application role: without
	# its grants on the routing table, every handler client fails at once).
	my $handler_script = PostgreSQL::Test::Utils::tempdir() . '/handler.sql';
	append_to_file($handler_script,
		qq{\\set t random(1, 40)\n\\set key random(1, 1000000000000)\n}
		  . qq{SELECT place_order($tenant_expr, 'handler-' || :key, 'book');\n}
		  . qq{SELECT (place_order($tenant_expr, 'handler-' || :key, 'book') = 'replay')::int }
		  . qq{AS replayed \\gset\n}
		  . qq{\\if :replayed = 1\n\\else\n\\set not_a_replay 1 / 0\n\\endif\n});
	my $plain_script = PostgreSQL::Test::Utils::tempdir() . '/plain.sql';
	append_to_file($plain_script,
		qq{\\set t random(1, 40)\n\\set key random(1, 1000000000000)\n}
		  . qq{INSERT INTO plain_orders (tenant_id, idem_key, item) }
		  . qq{VALUES ($tenant_expr, 'plain-' || :key, 'book');\n});
	my $node_id = sub {
		my ($node) = @_;
		return $query->(sprintf(q{SELECT nodeid FROM pg_dist_node WHERE nodeport = %d}, $node->port));
	};
	my $shard_of = sub {
		return split /\|/, $query->(
			sprintf(q{SELECT shardid, nodeport FROM pg_dist_shard_placement
			           WHERE shardid = get_shard_id_for_distribution_column('orders', %s)},
				quote($tenant[5])));
	};
	my $under_load = sub {
		my ($what, $operation) = @_;
		my %load;
		my @runs;
		# (The handler's retry check is forwarded: not from PostgreSQL 16.)
		my @requests = ($request_script, $without_exports ? () : $handler_script);
		my %label = ($request_script => 'requests', $handler_script => 'through the handler',
			$plain_script => 'plain INSERTs');
		for my $script (@requests, $plain_script)
		{
			my $log = $load{$script} = { out => '', err => '' };
			push @runs, IPC::Run::start(
				[
					'pgbench', '-n', '-c', 2, '-j', 2, '-T', 15, '-f', $script,
					'-h', $coordinator->host, '-p', $coordinator->port, '-U', 'app', $db
				],
				'>', \$log->{out}, '2>', \$log->{err});
		}
		my ($orders, $plain) = split /\|/, $query->(
			q{SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM plain_orders)});
		if (!$coordinator->poll_query_until($db,
				"SELECT (SELECT count(*) FROM orders) >= $orders + 20
				    AND (SELECT count(*) FROM plain_orders) >= $plain + 20"))
		{
			$_->finish for @runs;
			die "no load: $load{$request_script}{err} $load{$plain_script}{err}";
		}
		$query->($operation->());
		# (On a slow machine the load may end first: the checks still hold.)
		note("$what finished while the load ran") if grep { $_->pumpable } @runs;
		$_->finish for @runs;
		my %aborted = map { $_ => scalar(() = $load{$_}{err} =~ /aborted in command/g) } keys %load;
		my %processed =
		  map { $_ => ($load{$_}{out} =~ /actually processed: (\d+)/)[0] // 0 } keys %load;
		note(join ', ', "$what under load",
			map { sprintf '%s %d (%d clients aborted)', $label{$_}, $processed{$_}, $aborted{$_} }
			  @requests, $plain_script);
		ok(!grep({ !$processed{$_} } @requests, $plain_script),
			"$type $what: requests, handler requests and plain INSERTs ran");
		for my $script (@requests)
		{
			my $how = $script eq $handler_script ? ' through the handler' : '';
			unlike($load{$script}{err}, qr/not stored on this node/, "$type $what$how: no IK005")
			  or diag($load{$script}{err});
			cmp_ok($aborted{$script}, '<=', $aborted{$plain_script},
				"$type $what$how: no more errors than the plain INSERTs")
			  or diag($load{$script}{err}, $load{$plain_script}{err});
		}
		is($query->(q{SELECT count(*) FROM orders}),
			$query->(q{SELECT count(*) FROM idempotency.keys WHERE status = 'c'}),
			"$type $what: orders = completed keys");
		return;
	};
	for my $mode (qw(block_writes force_logical))
	{
		my ($moved, $from) = $shard_of->();
		my ($to) = grep { $_->port != $from } @workers;
		my ($source) = grep { $_->port == $from } @workers;
		$under_load->("$mode move", sub {
			sprintf(q{SELECT citus_move_shard_placement(%d, %s, %d, %s, %d, %s)},
				$moved, quote($source->host), $source->port, quote($to->host), $to->port,
				quote($mode));
		});
		is(($shard_of->())[1], $to->port, "$type $mode move: the shard moved");
	}
	my ($split, $low, $high) = split /\|/, $query->(
		sprintf(q{SELECT shardid, shardminvalue, shardmaxvalue FROM pg_dist_shard
		           WHERE shardid = get_shard_id_for_distribution_column('orders', %s)},
			quote($tenant[5])));
	$under_load->('split', sub {
		sprintf(q{SELECT citus_split_shard_by_split_points(%d, ARRAY[%s], ARRAY[%d, %d],
		                                                      'block_writes')},
			$split, quote(int(($low + $high) / 2)), $node_id->($workers[0]), $node_id->($workers[1]));
	});
	is($query->(q{SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'orders'::regclass}),
		'5', "$type split: orders has 5 shards");
	$under_load->('drain', sub {
		sprintf(q{SELECT citus_drain_node(%s, %d, 'block_writes')},
			quote($workers[1]->host), $workers[1]->port);
	});
	my $placed_on = sub {
		return $query->(
			sprintf(q{SELECT count(*) FROM pg_dist_shard_placement
			           WHERE nodeport = %d AND shardid IN
			             (SELECT shardid FROM pg_dist_shard WHERE logicalrelid = 'orders'::regclass)},
				$workers[1]->port));
	};
	is($placed_on->(), '0', "$type drain: no shard left on the drained worker");
	$query->(sprintf(q{SELECT citus_set_node_property(%s, %d, 'shouldhaveshards', true)},
			quote($workers[1]->host), $workers[1]->port));
	$under_load->('rebalance', sub {
		q{SELECT rebalance_table_shards('orders', shard_transfer_mode => 'block_writes')};
	});
	cmp_ok($placed_on->(), '>', 0, "$type rebalance: shards are back on the drained worker");
	is( $query->(
			q{SELECT count(*) FROM idempotency.keys WHERE key LIKE 'op-%' AND status = 'c'}),
		$query->(q{SELECT count(*) FROM orders WHERE idem_key LIKE 'op-%'}),
		"$type: after the shard operations, each request's order is there once per completed key");
}

# A database of its own on every node, a Citus cluster, with the extension
# at $version and orders distributed by the tenant column $tenant ("name
# type"), the keys distributed with them by that version; returns a sub that
# runs SQL there on the coordinator.
sub distributed_at_version
{
	my ($db, $version, $tenant) = @_;
	my ($column) = split / /, $tenant;
	$_->safe_psql('postgres', "CREATE DATABASE $db") for $coordinator, @workers;
	citus_database($db, $coordinator, @workers);
	my $query = sub { return $coordinator->safe_psql($db, shift) };
	$query->(
		qq{CREATE EXTENSION idempotency VERSION '$version';
		   CREATE TABLE orders ($tenant NOT NULL, id bigserial,
		                        idem_key text NOT NULL, item text NOT NULL,
		                        PRIMARY KEY ($column, id));
		   SELECT create_distributed_table('orders', '$column', shard_count => 4);
		   SELECT idempotency_distribute('orders')});
	return $query;
}

# An update from 0.2.0 with keys that Citus already distributes (by a text
# scope): Citus adds shard_key to the workers' tables and to the shards from
# the coordinator's script, and each worker's script keeps it.
{
	my $db = 'updated';
	my $query = distributed_at_version($db, '0.2.0', 'tenant text COLLATE "C"');
	is(run_request($coordinator, $db, 't1', 'old', 'POST /orders', 201),
		"claimed 1\nt", 'update: a request at 0.2.0');
	$query->(q{ALTER EXTENSION idempotency UPDATE TO '0.3.0'});
	is( join(',',
			map { $_->safe_psql($db, q{SELECT extversion FROM pg_extension WHERE extname = 'idempotency'}) }
			  $coordinator, @workers),
		'0.3.0,0.3.0,0.3.0', 'update: every node is at 0.3.0');
	is( $query->(
			q{SELECT count(*) FROM run_command_on_shards('idempotency.keys',
			    $$SELECT count(*) FROM pg_attribute WHERE attrelid = '%s'::regclass AND attname = 'shard_key'$$)
			   WHERE result <> '1'}),
		'0', 'update: every shard has shard_key');
	is( $query->(
			sprintf(q{BEGIN; SELECT outcome FROM %s; COMMIT}, begin_call('t1', 'old', 'POST /orders'))),
		'replay', 'update: the key stored before replays');
	is(run_request($coordinator, $db, 't2', 'new', 'POST /orders', 201),
		"claimed 1\nt", 'update: a new request claims');
	my $forwarded = sprintf(q{SELECT (%s).outcome}, begin_call('t3', 'fwd', 'POST /orders'));
	my ($ret, $out, $err);
	unless ($without_exports)
	{
		# Calls that reach a node without their shard are forwarded through the
		# routing table, which 0.2.0 did not distribute: IK005 saying what to
		# run, until idempotency_distribute() distributes it with the keys.
		($ret, $out, $err) = $coordinator->psql($db, "\\set VERBOSITY verbose\n$forwarded");
		like($err, qr/IK005.*\n.*idempotency.route, which is not distributed with the keys: run SELECT idempotency_distribute/,
			'update: a call not delegated is not forwarded before the routing table is distributed (IK005)');
	}
	$query->(q{CREATE TABLE other (tenant text COLLATE "C" NOT NULL PRIMARY KEY);
	           SELECT create_distributed_table('other', 'tenant', shard_count => 2)});
	($ret, $out, $err) = $coordinator->psql($db, q{SELECT idempotency_distribute('other')});
	like($err, qr/table public.other is not co-located with idempotency.keys, which is already distributed/,
		'update: idempotency_distribute() of another co-location group is refused');
	$query->(q{SELECT idempotency_distribute('orders')});
	is( $query->(
			sprintf(q{BEGIN; %s; SELECT %s; COMMIT; %s},
				$forwarded, complete_call('t3', 'fwd', 201), $forwarded)),
		"claimed\nt\nreplay", 'update: then a call not delegated is forwarded')
	  unless $without_exports;
	($ret, $out, $err) = $coordinator->psql($db, q{SELECT idempotency_distribute('orders')});
	like($err, qr/idempotency.keys is already distributed/, 'update: and a third call is refused');
}

# An update from 0.3.0 with keys distributed by a bigint tenant, some stored
# under another spelling of their tenant (as 0.3.0 stored a text scope): the
# update moves each to the tenant's value as bigint prints it, where calls
# look for it now, and leaves a key stored under both spellings as stored,
# with a WARNING.
{
	my $db = 'spelled';
	my $query = distributed_at_version($db, '0.3.0', 'tenant_id bigint');
	is(run_request($coordinator, $db, \'1001::bigint', 'twin', 'POST /orders', 201),
		"claimed 1\nt", 'update of spellings: a request of tenant 1001');
	$query->(join ';', map {
		sprintf(q{INSERT INTO idempotency.keys (scope, key, request, created_at, ttl, expires_at,
		                                        status, attempt, completed_at, response_status, shard_key)
		          VALUES (%s, %s, request_hash('POST /orders'::text), now(), '1 day',
		                  now() + '1 day', 'c', 1, now(), 201, 1001)},
			quote($_->[0]), quote($_->[1]))
	} [ '01001', 'spelled' ], [ '+1001', 'twin' ]);
	my ($version) = slurp_file('idempotency.control') =~ /^default_version\s*=\s*'([^']+)'/m;
	my ($ret, $out, $err) = $coordinator->psql($db, q{ALTER EXTENSION idempotency UPDATE});
	is($ret, 0, 'update of spellings: the update succeeds') or diag($err);
	like($err, qr/WARNING:  idempotency: 1 stored keys are also stored under their tenant's canonical scope/,
		'update of spellings: ... with a WARNING for the key stored under both');
	is( join(',',
			map { $_->safe_psql($db, q{SELECT extversion FROM pg_extension WHERE extname = 'idempotency'}) }
			  $coordinator, @workers),
		"$version,$version,$version", 'update of spellings: every node is updated');
	is( $query->(
			q{SELECT string_agg(scope || '/' || key, ',' ORDER BY key, scope) FROM idempotency.keys}),
		'1001/spelled,+1001/twin,1001/twin',
		'update of spellings: the key under another spelling moved, the one under both stayed');
	is( $query->(
			sprintf(q{BEGIN; SELECT outcome FROM %s; COMMIT},
				begin_call(\'1001::bigint', 'spelled', 'POST /orders'))),
		'replay', 'update of spellings: the moved key replays');
}

done_testing();
