# The SQL blocks of README.md's "On a managed PostgreSQL" and of
# doc/sql-edition.md, run as written against the SQL edition, by the role
# they are written for (test/t/050 checks that each is run somewhere):
#   tested: edition_create.sql, grants.sql (also run by test/t/050 against
#   the extension), tested: edition_tenants.sql, tested: edition_limits.sql,
#   tested: edition_cron.sql, tested: edition_uncron.sql
# pg_cron is stood in for by a schema cron with its job table and functions
# (test/t/073 runs the real one): the scheduled command must then run.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my %blocks;
for my $document ('README.md', 'doc/sql-edition.md')
{
	my $text = slurp_file($document);
	while ($text =~ /(?:^|\n)<!-- tested: (\S+) -->\n```sql\n(.*?)\n```/gs)
	{
		$blocks{$1} = $2;
	}
}
is(join(' ', grep { /^edition_|^grants\.sql$/ } sort keys %blocks),
	'edition_create.sql edition_cron.sql edition_limits.sql edition_tenants.sql edition_uncron.sql grants.sql',
	'the documents have the blocks this test runs');

my $node = new_node('edition_docs', conf => ["shared_preload_libraries = ''"]);
$node->safe_psql('postgres', 'CREATE DATABASE shop');
$node->safe_psql('shop', $blocks{'edition_create.sql'});
$node->safe_psql('shop', q{
	CREATE ROLE app LOGIN;
	CREATE ROLE tenant_a LOGIN IN ROLE app;
	CREATE ROLE tenant_b LOGIN IN ROLE app;
	CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL);
	GRANT INSERT, SELECT ON orders TO app;
	GRANT USAGE ON SEQUENCE orders_id_seq TO app;
});
for my $block (qw(grants.sql edition_tenants.sql edition_limits.sql))
{
	my ($ret, $out, $err) = $node->psql('shop', $blocks{$block}, on_error_stop => 1);
	is($ret, 0, "$block runs as the owner") or diag($err);
}

my $request = q{
	BEGIN;
	SELECT outcome FROM idempotency_begin('orders', 'k-1', request_hash('{"item": "book"}'::jsonb));
	INSERT INTO orders (item) VALUES ('book');
	SELECT idempotency_complete('orders', 'k-1', 201, '{"order": 1}');
	COMMIT;
	SELECT outcome || ' ' || response_status || ' ' || response_body::text
	  FROM idempotency_begin('orders', 'k-1', request_hash('{"item": "book"}'::jsonb));
};
is($node->safe_psql('shop', $request, extra_params => [ '-U', 'app' ]),
	"claimed\nt\nreplay 201 {\"order\": 1}", 'the application role, with the grants, claims and replays');
is($node->safe_psql('shop', $request, extra_params => [ '-U', 'tenant_a' ]),
	"claimed\nt\nreplay 201 {\"order\": 1}", 'an isolated tenant gets a key of its own');
is($node->safe_psql('shop', q{SELECT string_agg(tenant::text, ' ' ORDER BY tenant::text) FROM idempotency.keys}),
	'- tenant_a', 'one key without a tenant, one of tenant_a');
is($node->safe_psql('shop', 'SELECT max_response_bytes FROM idempotency.settings'), '2097152',
	'edition_limits.sql sets the owner\'s limit');

# pg_cron, stood in for.
$node->safe_psql('shop', q{
	CREATE SCHEMA cron;
	CREATE TABLE cron.job (jobid bigserial, jobname text, username text, schedule text, command text);
	CREATE FUNCTION cron.schedule(job_name text, schedule text, command text) RETURNS bigint
	    LANGUAGE sql AS $$
	    DELETE FROM cron.job WHERE jobname = job_name AND username = current_user;
	    INSERT INTO cron.job (jobname, username, schedule, command)
	    VALUES (job_name, current_user, schedule, command) RETURNING jobid $$;
	CREATE FUNCTION cron.unschedule(job_name text) RETURNS boolean
	    LANGUAGE sql AS $$
	    WITH gone AS (DELETE FROM cron.job WHERE jobname = job_name AND username = current_user RETURNING 1)
	    SELECT count(*) > 0 FROM gone $$;
});
$node->safe_psql('shop', $blocks{'edition_cron.sql'});
my $command = $node->safe_psql('shop', 'SELECT command FROM cron.job');
my ($ret, $out, $err) = $node->psql('shop', $command);
is($ret, 0, "edition_cron.sql schedules a command that runs: $command") or diag($err);
$node->safe_psql('shop', $blocks{'edition_uncron.sql'});
is($node->safe_psql('shop', 'SELECT count(*) FROM cron.job'), '0', 'edition_uncron.sql removes the job');

done_testing();
