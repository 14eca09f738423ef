# Citus: idempotency_distribute() on a Citus release or a PostgreSQL major
# that is not tested is refused (0A000, by the version guard every call
# goes through) before it changes anything -- until 0.4.0 it distributed
# the keys, the routing table and the API's functions there, and only the
# calls were refused.  With a bigint tenant, whose distribution changes the
# most: the keys' column, the variants of the functions on every node.
#
# Where the Citus under test is a tested release, the untested ones are the
# installed extension's version set to another, in a transaction the
# attempt rolls back (as t/064 and t/066 check the calls' guard): an untested
# release, and a release tested on another PostgreSQL major only.  Where it
# is not tested itself (Citus 12.1 on PostgreSQL 15, built by hand), the
# attempt is a plain call on it.  Each attempt leaves every node as it was:
# nothing distributed, no table rewritten or altered, no function made; and
# on a tested release, the distribution then changes what was compared.
# Skipped, visibly, when the citus library is not installed.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

plan skip_all => citus_missing() if citus_missing();

my $db = 'postgres';
my ($coordinator, @workers) = start_citus_cluster(port => $ENV{PG_TEST_CITUS_PORT});
citus_database($db, $coordinator, @workers);

sub query { return $coordinator->safe_psql($db, shift); }

query(
	q{CREATE EXTENSION idempotency;
	  CREATE TABLE orders (tenant_id bigint NOT NULL, id bigserial,
	                       idem_key text NOT NULL, item text NOT NULL,
	                       PRIMARY KEY (tenant_id, id));
	  SELECT create_distributed_table('orders', 'tenant_id', shard_count => 4)});
my ($major) = query('SHOW server_version_num') =~ /^(\d+)\d{4}$/;
my $citus = query('SHOW citus.version');
note("Citus $citus on PostgreSQL $major");

# What idempotency_distribute() changes, on one node: what Citus
# distributes (its tables and functions), the extension's relations
# (columns' types, storage: an ALTER ... TYPE rewrites a table), its
# functions.
my $state_sql = q{
SELECT concat_ws(E'\n',
  'distributed: ' || (SELECT string_agg(p.logicalrelid::text, ', ' ORDER BY 1)
                        FROM pg_dist_partition AS p
                       WHERE p.logicalrelid::text LIKE 'idempotency.%'),
  'delegated: ' || (SELECT string_agg(o.objid::regprocedure::text, ', ' ORDER BY 1)
                      FROM pg_dist_object AS o
                     WHERE o.classid = 'pg_proc'::regclass
                       AND o.objid::regprocedure::text LIKE '%idempotency%'),
  (SELECT string_agg(format('%s %s %s', c.relname, c.relkind, c.relfilenode), E'\n' ORDER BY 1)
     FROM pg_class AS c WHERE c.relnamespace = 'idempotency'::regnamespace),
  (SELECT string_agg(format('%s.%s %s', c.relname, a.attname, format_type(a.atttypid, a.atttypmod)),
                     E'\n' ORDER BY 1)
     FROM pg_attribute AS a JOIN pg_class AS c ON c.oid = a.attrelid
    WHERE c.relnamespace = 'idempotency'::regnamespace AND c.relkind = 'r' AND a.attnum > 0),
  (SELECT string_agg(p.oid::regprocedure::text, E'\n' ORDER BY 1)
     FROM pg_proc AS p
     JOIN pg_depend AS d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
    WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'idempotency')))
};

# The state of every node, by node.
sub cluster_state
{
	return { map { ($_->name => $_->safe_psql($db, $state_sql)) } $coordinator, @workers };
}

# The attempts: SQL ending with the call, and the release it is refused for.
my @attempts;
my ($guard_state) = sql_error($coordinator, $db, 'SELECT idempotency.require_tested_citus()');
my $untested_here = ($guard_state // '') eq '0A000';
if ($untested_here)
{
	note("Citus $citus is not tested on PostgreSQL $major: the attempt is a plain call");
	push @attempts, [ q{SELECT idempotency_distribute('orders')}, $citus, "Citus $citus itself" ];
}
else
{
	for (citus_untested_versions($major))
	{
		my ($untested, $what) = @$_;
		push @attempts,
		  [
			qq{BEGIN;
			   SET citus.enable_version_checks TO off;
			   UPDATE pg_extension SET extversion = '$untested' WHERE extname = 'citus';
			   SELECT idempotency_distribute('orders')},
			$untested, $what
		  ];
	}
}

for my $attempt (@attempts)
{
	my ($sql, $untested, $what) = @$attempt;
	my $before = cluster_state();
	my ($sqlstate, $stderr) = sql_error($coordinator, $db, $sql);
	is($sqlstate, '0A000', "$what: idempotency_distribute() is refused (0A000)");
	like($stderr,
		qr/Citus \Q$untested\E on PostgreSQL $major is not a combination this extension is tested with/,
		"... saying why ($what)");
	is_deeply(cluster_state(), $before, "... having changed nothing on any node ($what)");
}

if (!$untested_here)
{
	# The comparison sees what a distribution changes, on every node.
	my $before = cluster_state();
	query(q{SELECT idempotency_distribute('orders')});
	my $after = cluster_state();
	is(scalar(grep { $before->{$_} ne $after->{$_} } keys %$before),
		1 + @workers, 'on a tested release, the distribution changes every node');
	like($after->{ $coordinator->name }, qr/^distributed: idempotency\.digest_secret, idempotency\.keys, idempotency\.route$/m,
		'... the keys and the routing table distributed');
	is( query(q{SELECT outcome FROM idempotency_begin(42::bigint, 'k', request_hash('x'::text), lease => '1 minute')}),
		'claimed', '... and a call delegated by a bigint scope claims');
}

done_testing();
