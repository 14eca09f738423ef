# Monitoring: every query of monitoring/postgres_exporter.yml runs as a role
# that has pg_monitor and nothing else, and answers numbers under the column
# names the file lists; the per-scope summary is refreshed by the worker at
# most every idempotency.scope_stats_interval (never with 0) and on demand;
# reading it does not touch the keys table; a refresh blocks neither requests
# nor sweeps and can be cancelled; it is not dumped; and the worker's
# refresh leaves DROP EXTENSION, DROP DATABASE and databases still at 0.1.0
# alone.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use HTTP::Tiny;
use IPC::Run;
use Test::More;

# The file is read relative to the repository root, prove's working
# directory under test/run.
my $exporter_file = 'monitoring/postgres_exporter.yml';

# ---------------------------------------------------------------------------
# The exporter file, read for its own regular layout: a top-level "name:" per
# metric namespace, "  query: |" followed by the query's lines (or the query on
# the same line), "  metrics:", then "    - column:" with "        usage: ...".
# Returns [ { namespace, query, metrics => [ [ column, usage ] ... ] } ... ].
# ---------------------------------------------------------------------------
sub exporter_queries
{
	my ($text) = @_;
	my (@namespaces, $current, $in_query);
	for my $line (split /\n/, $text)
	{
		next if $line =~ /^\s*#/ || $line =~ /^\s*$/;
		if ($line =~ /^(\w+):\s*$/)
		{
			$current = { namespace => $1, query => '', metrics => [] };
			push @namespaces, $current;
			$in_query = 0;
		}
		elsif ($line =~ /^  query:\s*\|\s*$/) { $in_query = 1; }
		elsif ($line =~ /^  query:\s*"(.*)"\s*$/ || $line =~ /^  query:\s*(\S.*)$/)
		{
			$current->{query} = $1;
			$in_query = 0;
		}
		elsif ($line =~ /^  metrics:\s*$/) { $in_query = 0; }
		elsif ($in_query && $line =~ /^    (.*)$/) { $current->{query} .= "$1\n"; }
		elsif ($line =~ /^    - (\w+):\s*$/) { push @{ $current->{metrics} }, [ $1, undef ]; }
		elsif ($line =~ /^        usage:\s*"?(\w+)"?\s*$/) { $current->{metrics}[-1][1] = $1; }
		elsif ($line =~ /^        description:/) { }
		else { die "$exporter_file: unexpected line: $line"; }
	}
	return @namespaces;
}

my $exporter_text = slurp_file($exporter_file);
my @queries = exporter_queries($exporter_text);
my $query_lines = () = $exporter_text =~ /^  query:/mg;
is(scalar @queries, $query_lines, "every query of $exporter_file is read");
ok(@queries >= 2, 'the file has queries for idempotency_stats() and idempotency_scope_stats()');
for my $q (@queries)
{
	ok( $q->{query} =~ /\bSELECT\b/i
		  && @{ $q->{metrics} }
		  && !grep({ ($_->[1] // '') !~ /^(LABEL|COUNTER|GAUGE)$/ } @{ $q->{metrics} }),
		"$q->{namespace}: a query and metrics with a usage each");
	# Prometheus's naming: a counter ends in _total, nothing else does.
	my @misnamed = grep { ($_->[1] eq 'COUNTER') != ($_->[0] =~ /_total$/) } @{ $q->{metrics} };
	is(join(' ', map { $_->[0] } @misnamed), '', "$q->{namespace}: counters, and only they, end in _total");
}

# ---------------------------------------------------------------------------
# A node whose worker sweeps often but never refreshes the summary (yet)
# ---------------------------------------------------------------------------
my $node = new_node('monitoring',
	conf => [ "idempotency.expire_interval = '100ms'", 'idempotency.scope_stats_interval = 0' ]);
sub query { my ($db, $sql) = @_; return $node->safe_psql($db, $sql); }
sub as_monitor
{
	my ($sql) = @_;
	return $node->safe_psql('app', $sql, extra_params => [ '-U', 'monitor' ]);
}

query('postgres', q{
	CREATE ROLE monitor LOGIN;
	GRANT pg_monitor TO monitor;
	CREATE DATABASE app;
});
query('app', 'CREATE EXTENSION idempotency');

# Keys in two scopes: completed ones, an unfinished claim, an expired record.
query('app', q{
	SELECT count(*) FROM generate_series(1, 5) AS g,
	  LATERAL idempotency_begin('shop', 'k' || g, request_hash('r'::text)) AS b,
	  LATERAL idempotency_complete('shop', 'k' || g, 200, '{"secret": "body"}') AS c;
	SELECT idempotency_begin('pay', 'held', request_hash('r'::text), lease => '1 hour');
	SELECT count(*) FROM idempotency_begin('pay', 'done', request_hash('r'::text)) AS b,
	  LATERAL idempotency_complete('pay', 'done', 201) AS c;
});
is(query('app', 'SELECT idempotency_scope_stats_refresh()'), '2',
	'idempotency_scope_stats_refresh() summarises two scopes');

# A sweep error, so that last_error_time has a value too: a trigger refuses
# the sweep's delete of an expired key.
query('app', q{
	CREATE FUNCTION refuse_deletes() RETURNS trigger LANGUAGE plpgsql AS
	  $$ BEGIN RAISE EXCEPTION 'deletes refused by a trigger'; END $$;
	CREATE TRIGGER refuse_deletes BEFORE DELETE ON idempotency.keys
	  FOR EACH ROW EXECUTE FUNCTION refuse_deletes();
	SELECT count(*) FROM idempotency_begin('gone', 'old', request_hash('r'::text), ttl => '1 second') AS b,
	  LATERAL idempotency_complete('gone', 'old', 200) AS c;
});
ok( $node->poll_query_until('app',
		q{SELECT last_error_time IS NOT NULL AND last_sweep_time IS NOT NULL FROM idempotency_stats()}),
	'the worker swept, and reported an error');
query('app', 'DROP TRIGGER refuse_deletes ON idempotency.keys; DROP FUNCTION refuse_deletes()');
ok($node->poll_query_until('app', q{SELECT count(*) = 0 FROM idempotency.keys WHERE scope = 'gone'}),
	'then it expired the key');

# ---------------------------------------------------------------------------
# The monitor role: pg_monitor and nothing else
# ---------------------------------------------------------------------------
is( query('postgres', q{
		SELECT rolsuper || ' ' || string_agg(m.roleid::regrole::text, ',')
		  FROM pg_roles AS r JOIN pg_auth_members AS m ON m.member = r.oid
		 WHERE r.rolname = 'monitor' GROUP BY rolsuper}),
	'false pg_monitor', 'the monitor role is no superuser and a member of pg_monitor only');
for my $refused (
	'SELECT idempotency_scope_stats_refresh()',
	q{SELECT * FROM idempotency_lookup('shop', 'k1')},
	'SELECT count(*) FROM idempotency.keys',
	'SELECT count(*) FROM idempotency.scope_stats')
{
	my ($sqlstate) = sql_error($node, 'app', "SET ROLE monitor; $refused");
	is($sqlstate, '42501', "pg_monitor may not: $refused");
}

# ---------------------------------------------------------------------------
# Every exporter query, as the monitor role
# ---------------------------------------------------------------------------
my $json = JSON::PP->new->allow_nonref;
for my $q (@queries)
{
	my $sql = $q->{query} =~ s/;?\s*\z//r;
	my $rows = $json->decode(as_monitor("SELECT coalesce(json_agg(q), '[]') FROM ($sql) AS q"));
	ok(@$rows > 0, "$q->{namespace}: the query answers rows as pg_monitor");
	my @expected = sort map { $_->[0] } @{ $q->{metrics} };
	my %usage = map { $_->[0] => $_->[1] } @{ $q->{metrics} };
	my @problems;
	for my $row (@$rows)
	{
		my @columns = sort keys %$row;
		push @problems, "columns (@columns), not (@expected)" unless "@columns" eq "@expected";
		for my $column (@columns)
		{
			my $value = $json->encode($row->{$column});
			my $numeric = $value =~ /^-?[0-9][0-9.eE+-]*$/;
			push @problems, "$column is $value"
			  if ($usage{$column} // '') eq 'LABEL' ? $value !~ /^"/ : !$numeric;
		}
	}
	is_deeply(\@problems, [],
		"$q->{namespace}: each row has the metrics' columns, numbers but for the labels");
}

# ---------------------------------------------------------------------------
# Debian's postgres_exporter scrapes the file, connected as the monitor role
# ---------------------------------------------------------------------------
SKIP:
{
	my ($exporter) = grep { -x } map { "$_/prometheus-postgres-exporter" } split(/:/, $ENV{PATH}),
	  '/usr/bin';
	skip 'postgres_exporter is not installed (Debian: prometheus-postgres-exporter)', 4
	  unless $exporter;
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my ($out, $err) = ('', '');
	my $run = IPC::Run::start(
		[
			$exporter, "--web.listen-address=127.0.0.1:$port",
			"--extend.query-path=$exporter_file", '--disable-default-metrics',
			'--disable-settings-metrics'
		],
		'>', \$out, '2>', \$err,
		init => sub {
			$ENV{DATA_SOURCE_NAME} = sprintf('host=%s port=%d dbname=app user=monitor sslmode=disable',
				$node->host, $node->port);
		});
	# Scrapes until the exporter answers (it starts listening in its own time).
	my $metrics = '';
	for (1 .. 600)
	{
		my $response = HTTP::Tiny->new(timeout => 30)->get("http://127.0.0.1:$port/metrics");
		if ($response->{success}) { $metrics = $response->{content}; last; }
		select(undef, undef, undef, 0.1);
	}
	$run->kill_kill;
	like($metrics, qr/^pg_up 1$/m, 'postgres_exporter connects as the monitor role') or diag($err);
	my @loaded = $metrics =~ /^pg_exporter_user_queries_load_error\{[^}]*\} (\S+)$/mg;
	is("@loaded", '0', "postgres_exporter loads $exporter_file without an error");
	my $claims = $node->safe_psql('app', 'SELECT claims FROM idempotency_stats()');
	like($metrics, qr/^idempotency_claims_total(?:\{[^}]*\})? \Q$claims\E$/m,
		'it serves idempotency_stats() as idempotency_claims_total');
	like($metrics, qr/^idempotency_scope_keys_completed\{[^}]*scope="shop"[^}]*\} 5$/m,
		'and idempotency_scope_stats() per scope, as idempotency_scope_keys_completed{scope="shop"}');
}

# The figures of the scope summary, as the exporter reads them.
is( as_monitor(q{
		SELECT string_agg(format('%s %s %s %s %s %s', scope, in_progress, completed, expired,
		                         oldest_claim_age_seconds >= 0, oldest_in_progress_age_seconds >= 0),
		                  ', ' ORDER BY scope)
		  FROM idempotency_scope_stats()}),
	'pay 1 1 0 t t, shop 0 5 0 t ',
	'idempotency_scope_stats() counts per scope, ages in seconds');
unlike(as_monitor('SELECT idempotency_scope_stats()::text'), qr/secret/,
	'no stored response shows in the summary');

# ---------------------------------------------------------------------------
# Reading the summary does not scan the keys; refreshing it does
# ---------------------------------------------------------------------------
my $keys_scans = q{
	SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_xact_user_tables
	 WHERE schemaname = 'idempotency' AND relname = 'keys'};
my ($scope_query) = map { $_->{query} } grep { $_->{query} =~ /idempotency_scope_stats\(\)/ } @queries;
is(as_monitor("BEGIN; $scope_query; $keys_scans; COMMIT;") =~ s/.*\n//sr,
	'0', 'the exporter query on the summary scans idempotency.keys 0 times');
cmp_ok(query('app', "BEGIN; SELECT idempotency_scope_stats_refresh(); $keys_scans; COMMIT;") =~ s/.*\n//sr,
	'>=', 1, 'whereas a refresh scans it (so the count above would show a scan)');

# ---------------------------------------------------------------------------
# The worker's refresh
# ---------------------------------------------------------------------------
my $late_keys = q{
	SELECT count(*) FROM generate_series(1, 3) AS g,
	  LATERAL idempotency_begin('late', 'k' || g, request_hash('r'::text)) AS b,
	  LATERAL idempotency_complete('late', 'k' || g, 200) AS c};

query('app', $late_keys);
wait_for_sweeps($node, 'app', 3);
is(as_monitor(q{SELECT count(*) FROM idempotency_scope_stats() WHERE scope = 'late'}),
	'0', 'with idempotency.scope_stats_interval = 0 the worker does not refresh the summary');

reload_with($node, "idempotency.scope_stats_interval = '100ms'");
ok( $node->poll_query_until('app',
		q{SELECT count(*) = 1 FROM idempotency_scope_stats() WHERE scope = 'late' AND completed = 3}),
	'after a reload to 100ms the worker refreshes the summary');

# A long interval: the worker leaves a recent summary alone.
reload_with($node, "idempotency.scope_stats_interval = '1h'");
wait_for_sweeps($node, 'app', 1);
query('app', 'SELECT idempotency_scope_stats_refresh()');
my $refreshed = query('app', 'SELECT max(refreshed_at) FROM idempotency.scope_stats');
query('app', q{SELECT idempotency_forget('late', 'k1')});
wait_for_sweeps($node, 'app', 3);
is(query('app', 'SELECT max(refreshed_at) FROM idempotency.scope_stats'), $refreshed,
	'with a one-hour interval the worker leaves a fresh summary alone');

# ---------------------------------------------------------------------------
# Locks: a refresh that has not committed yet (as a long one) blocks no
# request and no sweep; the worker skips the summary instead of waiting for
# it; an on-demand refresh waiting for it can be cancelled.
# ---------------------------------------------------------------------------
reload_with($node, "idempotency.scope_stats_interval = '1ms'");
my $refresher = $node->background_psql('app');
$refresher->query_safe('BEGIN');
$refresher->query_safe('SELECT idempotency_scope_stats_refresh()');
is(run_request($node, 'app', 'locks', 'k1', 'r', 200), "claimed 1\nt",
	'a request claims and completes while a refresh holds its locks');
wait_for_sweeps($node, 'app', 3);
pass('the worker keeps sweeping every database, skipping the busy summary');
my ($sqlstate) = sql_error($node, 'app',
	"SET statement_timeout = '100ms'; SELECT idempotency_scope_stats_refresh()");
is($sqlstate, '57014', 'a refresh waiting for another one can be cancelled');
$refresher->query_safe('COMMIT');
$refresher->quit;
ok( $node->poll_query_until('app',
		q{SELECT count(*) = 1 FROM idempotency_scope_stats() WHERE scope = 'locks'}),
	'afterwards the worker refreshes again');

# ---------------------------------------------------------------------------
# Dumps leave the summary out
# ---------------------------------------------------------------------------
my $dump = PostgreSQL::Test::Utils::tempdir . '/app.sql';
$node->command_ok([ 'pg_dump', '-d', $node->connstr('app'), '-f', $dump ], 'pg_dump of the database');
my $dumped = slurp_file($dump);
like($dumped, qr/^COPY idempotency\.keys /m, 'the dump holds the keys');
unlike($dumped, qr/scope_stats \(|COPY idempotency\.scope_stats/, 'but not the summary');

# ---------------------------------------------------------------------------
# The worker refreshes every round: DROP EXTENSION and DROP DATABASE still
# succeed, and a database still at 0.1.0 (no summary table) is left alone.
# ---------------------------------------------------------------------------
reload_with($node, "idempotency.expire_interval = '10ms'");
query('postgres', 'CREATE DATABASE old');
query('old', q{CREATE EXTENSION idempotency VERSION '0.1.0'});
my $log_offset = -s $node->logfile;
my ($dropped_extensions, $dropped_databases) = (0, 0);
for my $i (1 .. 6)
{
	query('app', 'CREATE EXTENSION IF NOT EXISTS idempotency');
	query('app', q{
		SELECT count(*) FROM generate_series(1, 500) AS g,
		  LATERAL idempotency_begin('s' || g % 7, 'k' || g, request_hash('r'::text)) AS b,
		  LATERAL idempotency_complete('s' || g % 7, 'k' || g, 200) AS c});
	my ($ret) = $node->psql('app', 'DROP EXTENSION idempotency');
	$dropped_extensions++ if $ret == 0;
	query('postgres', "CREATE DATABASE dropped$i");
	query("dropped$i", q{CREATE EXTENSION idempotency;
		SELECT count(*) FROM generate_series(1, 500) AS g,
		  LATERAL idempotency_begin('s', 'k' || g, request_hash('r'::text)) AS b,
		  LATERAL idempotency_complete('s', 'k' || g, 200) AS c});
	($ret) = $node->psql('postgres', "DROP DATABASE dropped$i");
	$dropped_databases++ if $ret == 0;
}
is($dropped_extensions, 6, 'DROP EXTENSION never fails while the worker refreshes every round');
is($dropped_databases, 6, 'nor does DROP DATABASE');
query('app', 'CREATE EXTENSION idempotency');
wait_for_sweeps($node, 'app', 2);
my @errors = grep { /FATAL|ERROR/ } split /\n/, slurp_file($node->logfile, $log_offset);
is(join("\n", @errors), '', 'no worker error, in the 0.1.0 database either');

$node->stop;

# ---------------------------------------------------------------------------
# What the counters count: a write when it commits, and a sweep of a database
# that has the extension.  The worker of this node sweeps once at start and
# then only when a reload wakes it.
# ---------------------------------------------------------------------------
my $counting = new_node('counting', conf => [ "idempotency.expire_interval = '1h'" ]);
$counting->safe_psql('postgres', 'CREATE EXTENSION idempotency');
$counting->safe_psql('postgres', "CREATE DATABASE plain$_") for 1 .. 3;
sub counted
{
	my ($column) = @_;
	return $counting->safe_psql('postgres', "SELECT $column FROM idempotency_stats()");
}

my $completes = counted('completes');
$counting->safe_psql('postgres', q{
	BEGIN;
	SELECT outcome FROM idempotency_begin('count', 'rolled-back', request_hash('r'::text));
	SELECT idempotency_complete('count', 'rolled-back', 200);
	ROLLBACK;
	BEGIN;
	SELECT outcome FROM idempotency_begin('count', 'savepoint', request_hash('r'::text));
	SAVEPOINT s;
	SELECT idempotency_complete('count', 'savepoint', 200);
	ROLLBACK TO SAVEPOINT s;
	SELECT idempotency_complete('count', 'savepoint', 201);
	COMMIT;
	BEGIN;
	SELECT outcome FROM idempotency_begin('count', 'nested', request_hash('r'::text));
	SAVEPOINT a;
	SAVEPOINT b;
	SELECT idempotency_complete('count', 'nested', 200);
	RELEASE SAVEPOINT b;
	RELEASE SAVEPOINT a;
	COMMIT});
is(counted('completes') - $completes,
	2, 'completions count once committed: not when rolled back, nor rolled back to a savepoint');

# The launcher waits (wait event Extension) between rounds, with no sweeper.
my $between_rounds = q{SELECT count(*) = 1 FROM pg_stat_activity
	WHERE backend_type = 'idempotency launcher' AND wait_event = 'Extension'
	  AND NOT EXISTS (SELECT FROM pg_stat_activity WHERE backend_type = 'idempotency sweeper')};
$counting->poll_query_until('postgres', $between_rounds)
  or die 'the launcher never rested';
my $sweeps = counted('sweeps');
$counting->safe_psql('postgres', 'SELECT pg_reload_conf()');
$counting->poll_query_until('postgres',
	"SELECT sweeps > $sweeps FROM idempotency_stats()")
  or die 'the reload did not start a round';
$counting->poll_query_until('postgres', $between_rounds)
  or die 'the round did not end';
is(counted('sweeps') - $sweeps, 1,
	'a round over four databases counts one sweep: the one database with the extension');
$counting->stop;
done_testing();
