# Helpers shared by the reliability TAP tests (test/t/010_* and later): start
# a node, call the API and read its answers as Perl hashes, catch an error's
# SQLSTATE, wait for a crash restart or a lease to end, and render the whole
# key table as text for exact comparisons.
#
# Answers come back as byte strings, exactly as psql printed them: response
# bodies and headers are their jsonb text (response_body::text), so tests can
# compare them byte for byte.
package IdempotencyTest;

use strict;
use warnings;

use Exporter 'import';
use IO::Socket::INET;
use IPC::Run;
use JSON::PP;
use POSIX qw(WNOHANG);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

our @EXPORT = qw(
  new_node new_standby quote begin_call complete_call run_request begin_request
  lookup_key fields stored_response replayed_response body_is_toasted
  lease_running sql_error wait_for_crash_restart wait_for_lease_end
  wait_for_promotion keys_text wait_for_sweeps reload_with indexes_checked
  start_pgbouncer citus_missing citus_without_exports start_citus_cluster citus_database
  citus_untested_versions crash_restarts new_orders_database free_tcp_port wait_for_health
  log_tail new_pg_tle_node typed_tenant_handler_sql conformance_setups prepare_conformance
);

# A byte-string JSON decoder: each byte of psql's output stays one character,
# so decoded strings compare equal to raw psql output.
my $json = JSON::PP->new;

# Creates and starts a node in a UTF-8 database with the C locale (stable
# output whatever the tester's environment). %params: init => {...} for
# PostgreSQL::Test::Cluster::init, conf => [lines for postgresql.conf].
sub new_node
{
	my ($name, %params) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(extra => [ '--encoding=UTF8', '--locale=C' ],
		%{ $params{init} // {} });
	$node->append_conf('postgresql.conf', $_) for @{ $params{conf} // [] };
	$node->start;
	return $node;
}

# A node with pg_tle preloaded (conf => [lines] as for new_node, which may
# preload the extension too), or undef where pg_tle is not installed in this PostgreSQL (it is
# not in Debian: build it by hand to run the tests that need it).  pg_tle
# refuses a name that the extension directory has, so the node runs a copy
# of the installation without the SQL edition's files there, as on a
# managed server.
sub new_pg_tle_node
{
	my ($name, %params) = @_;
	my $pkglibdir = `pg_config --pkglibdir`;
	my $sharedir = `pg_config --sharedir`;
	my $bindir = `pg_config --bindir`;
	chomp($pkglibdir, $sharedir, $bindir);
	return undef
	  unless -e "$pkglibdir/pg_tle.so" && -e "$sharedir/extension/pg_tle.control";
	my $copy = PostgreSQL::Test::Utils::tempdir;
	my $prefix = $bindir =~ s{/bin$}{}r;
	for my $dir ($prefix, $sharedir)
	{
		my $parent = $copy . ($dir =~ s{/[^/]+$}{}r);
		system('mkdir', '-p', $parent) == 0 or BAIL_OUT("mkdir $parent");
		system('cp', '-a', $dir, $parent) == 0 or BAIL_OUT("cp $dir");
	}
	unlink glob("$copy$sharedir/extension/idempotency_sql*");
	my $node = PostgreSQL::Test::Cluster->new($name, install_path => "$copy$prefix");
	$node->init(extra => [ '--encoding=UTF8', '--locale=C' ]);
	$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pg_tle'");
	$node->append_conf('postgresql.conf', $_) for @{ $params{conf} // [] };
	$node->start;
	return $node;
}

# A node (new_node's %params) with a database $name that has the extension and
# the table of the middleware's examples, orders (id, item), and libpq's
# environment for it as the user running the test: ($node, PGHOST => ...,
# PGPORT, PGDATABASE, PGUSER).
sub new_orders_database
{
	my ($name, %params) = @_;
	my $node = new_node($name, %params);
	$node->safe_psql('postgres', "CREATE DATABASE $name");
	$node->safe_psql($name, q{
		CREATE EXTENSION idempotency;
		CREATE TABLE orders (id bigserial PRIMARY KEY, item text NOT NULL);
	});
	return ($node, PGHOST => $node->host, PGPORT => $node->port, PGDATABASE => $name,
		PGUSER => scalar getpwuid($<));
}

# Why the Citus tests cannot run here (the citus library is not installed),
# or undef.
sub citus_missing
{
	my $pkglibdir = `pg_config --pkglibdir`;
	chomp $pkglibdir;
	return -e "$pkglibdir/citus.so"
	  ? undef
	  : "Citus is not installed (no citus library in $pkglibdir)";
}

# Why Citus's library gives the extension only its SQL-level functions on
# the PostgreSQL under test, if it does: from PostgreSQL 16, PGXS builds a
# library with hidden symbols, and Citus's exports none of the routines that
# keys on the coordinator (its request for two-phase commit) and calls
# forwarded to another node (its execution state) need.  Distributed keys
# and the calls Citus delegates need none of them (doc/citus.md, Limits);
# t/064 to t/068 check both there.
sub citus_without_exports
{
	my ($major) = `pg_config --version` =~ /^PostgreSQL (\d+)/;
	return $major >= 16
	  ? "Citus on PostgreSQL $major exports only its SQL functions: keys on the coordinator and forwarded calls are refused"
	  : undef;
}

# Versions of the citus extension that the version guard must refuse on
# PostgreSQL $major, for a test to set in pg_extension (with
# citus.enable_version_checks off, in a transaction it rolls back): pairs of
# the version and what it is -- a release tested on no major, and one tested
# on another major only (a Citus release is another build on each major).
# The tested pairs themselves are the extension's (citus_placement.cpp).
sub citus_untested_versions
{
	my ($major) = @_;
	my $other_major_only = { 15 => '14.0-1', 17 => '13.1-1', 18 => '13.2-1' }->{$major} // '13.9-1';
	return ([ '13.9-1', 'an untested Citus version' ],
		[ $other_major_only, "Citus $other_major_only, tested on another PostgreSQL major only" ]);
}

# Creates and starts a Citus coordinator and two workers on this machine,
# each with the libraries preloaded (Citus first, as Citus requires) and what
# shard moves and two-phase commit need; conf => [lines for every node],
# coordinator_conf => [lines for the coordinator only], port => the first of
# three fixed ports (PG_TEST_CITUS_PORT) instead of free ones.  Returns the
# coordinator and the workers.
sub start_citus_cluster
{
	my (%params) = @_;
	my $port = $params{port};
	my @base = (
		"shared_preload_libraries = 'citus, idempotency'",
		# Logical shard moves (Cluster.pm turns replication off).
		'wal_level = logical', 'max_wal_senders = 10', 'max_replication_slots = 10',
		'max_prepared_transactions = 100',
		# The nodes listen on a Unix socket: how a node connects to itself.
		"citus.local_hostname = '$PostgreSQL::Test::Cluster::test_pghost'");
	my @nodes;
	for my $role (qw(coordinator worker1 worker2))
	{
		my $node = PostgreSQL::Test::Cluster->new("citus_$role",
			defined $port ? (port => $port++) : ());
		$node->init(extra => [ '--encoding=UTF8', '--locale=C' ]);
		$node->append_conf('postgresql.conf', $_)
		  for @base, @{ $params{conf} // [] },
		  $role eq 'coordinator' ? @{ $params{coordinator_conf} // [] } : ();
		$node->start;
		push @nodes, $node;
	}
	return @nodes;
}

# Makes database $db (which must exist on every node) a Citus cluster: the
# extension on every node, the coordinator and the workers in its metadata.
sub citus_database
{
	my ($db, $coordinator, @workers) = @_;
	$_->safe_psql($db, 'CREATE EXTENSION citus') for $coordinator, @workers;
	$coordinator->safe_psql($db,
		sprintf(q{SELECT citus_set_coordinator_host(%s, %d)},
			quote($coordinator->host), $coordinator->port));
	$coordinator->safe_psql($db,
		sprintf(q{SELECT citus_add_node(%s, %d)}, quote($_->host), $_->port))
	  for @workers;
	return;
}

# A middleware package's conformance runner (middleware/*/conformance/run, an
# absolute path; it runs in the package's directory $dir): the setups it can
# serve here, and why any are missing.
sub conformance_setups
{
	my ($run, $dir) = @_;
	my ($setups, $why) = ('', '');
	IPC::Run::run([ $run, 'setups' ], '>', \$setups, '2>', \$why,
		init => sub { chdir $dir or die "chdir $dir: $!" });
	return ([ grep { /\S/ } split /\n/, $setups ], $why);
}

# Installs the package as its users install it, into a new directory (a
# test of its own); returns that directory, or nothing when it failed.
sub prepare_conformance
{
	my ($run, $dir) = @_;
	my $prepared = PostgreSQL::Test::Utils::tempdir();
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ $run, 'prepare', $prepared ],
		init => sub { chdir $dir or die "chdir $dir: $!" },
		'>', \$out, '2>', \$err, IPC::Run::timeout(1800));
	ok($ok, "$dir: the package installs as its users install it") or diag("$out\n$err");
	return $ok ? $prepared : ();
}

# The SQL of a distributed handler place_order(p_tenant TYPE, p_key, p_item)
# whose scope is its typed tenant, passed as text: it claims, inserts the
# order and completes in one call Citus delegates to the tenant's node.
sub typed_tenant_handler_sql
{
	my ($type) = @_;
	return qq{CREATE FUNCTION place_order(p_tenant $type, p_key text, p_item text)
	       RETURNS text LANGUAGE plpgsql AS \$\$
	   DECLARE
	       answer idempotency_begin_result;
	   BEGIN
	       answer := idempotency_begin(p_tenant::text, p_key, request_hash(p_item));
	       IF answer.outcome <> 'claimed' THEN
	           RETURN answer.outcome;
	       END IF;
	       INSERT INTO orders (tenant_id, idem_key, item) VALUES (p_tenant, p_key, p_item);
	       PERFORM idempotency_complete(p_tenant::text, p_key, 201, NULL);
	       RETURN answer.outcome;
	   END
	   \$\$;
	   SELECT create_distributed_function('place_order($type, text, text)', 'p_tenant',
	                                      colocate_with => 'orders')};
}

# Creates and starts a streaming standby of $primary from a fresh base backup.
# Its name is also its application_name (Cluster.pm starts every node with
# --cluster-name), which synchronous_standby_names refers to.
sub new_standby
{
	my ($primary, $name) = @_;
	# A slot of its own, reserving WAL from before the backup: without it a
	# checkpoint on the primary (another standby's base backup, on a loaded
	# machine) can remove the segment the standby starts streaming from before
	# it connects, which the walsender reports as XX000 "requested WAL segment
	# ... has already been removed" -- and test/run's log gate fails on it.
	$primary->safe_psql('postgres', "SELECT pg_create_physical_replication_slot('$name', true)");
	my $backup = "for_$name";
	$primary->backup($backup);
	my $standby = PostgreSQL::Test::Cluster->new($name);
	$standby->init_from_backup($primary, $backup, has_streaming => 1);
	$standby->append_conf('postgresql.conf', "primary_slot_name = '$name'");
	$standby->start;
	return $standby;
}

# An SQL string literal (standard_conforming_strings is on); NULL for undef;
# a reference to a string is SQL of its own, inserted as is.
sub quote
{
	my ($value) = @_;
	return 'NULL' unless defined $value;
	return $$value if ref $value eq 'SCALAR';
	$value =~ s/'/''/g;
	return "'$value'";
}

# ", name => 'value'" for each named argument, in a stable order.
sub named_args
{
	my (%named) = @_;
	return join '', map { ", $_ => " . quote($named{$_}) } sort keys %named;
}

# The SQL call idempotency_begin(scope, key, request_hash(request::text), ...);
# %named holds ttl, lease, wait as interval text.
sub begin_call
{
	my ($scope, $key, $request, %named) = @_;
	return sprintf('idempotency_begin(%s, %s, request_hash(%s::text)%s)',
		quote($scope), quote($key), quote($request), named_args(%named));
}

# The SQL call idempotency_complete(...). body and headers are SQL
# expressions of type jsonb (inserted verbatim, so a test can build a large
# document in SQL); attempt is a number.
sub complete_call
{
	my ($scope, $key, $status, %params) = @_;
	return sprintf(
		'idempotency_complete(%s, %s, %d, %s, %s%s)',
		quote($scope), quote($key), $status,
		$params{body} // 'NULL',
		$params{headers} // 'NULL',
		defined $params{attempt} ? ", attempt => $params{attempt}" : '');
}

# Runs a request the one-phase way, in one transaction: claim (scope, key),
# do the business write (SQL in write, optional), store the response
# (complete_call's body and headers), COMMIT; claim => {...} holds begin's
# named arguments (ttl, lease, wait). Returns "outcome attempt" of
# the claim and complete's result on a second line: "claimed 1\nt" when all
# went well.
sub run_request
{
	my ($node, $db, $scope, $key, $request, $status, %params) = @_;
	return $node->safe_psql(
		$db,
		sprintf(
			q{BEGIN;
			  SELECT outcome || ' ' || attempt FROM %s;
			  %s;
			  SELECT %s;
			  COMMIT},
			begin_call($scope, $key, $request, %{ $params{claim} // {} }),
			$params{write} // 'SELECT',
			complete_call($scope, $key, $status, %params)));
}

# Runs a query that returns one json object (or no row) and decodes it.
sub query_object
{
	my ($node, $db, $sql) = @_;
	my $text = $node->safe_psql($db, $sql);
	return $text eq '' ? undef : $json->decode($text);
}

# Calls idempotency_begin in a transaction of its own -- the first step of the
# two-phase pattern, so with a lease: 1 minute unless %named gives one -- and
# returns its answer: outcome, attempt, response_status, response_body and
# response_headers (as jsonb text), recovery_point, retry_after_s (seconds).
sub begin_request
{
	my ($node, $db, $scope, $key, $request, %named) = @_;
	my @call = ($scope, $key, $request, lease => '1 minute', %named);
	return query_object(
		$node, $db, sprintf(
			q{SELECT json_build_object(
			    'outcome', outcome, 'attempt', attempt,
			    'response_status', response_status,
			    'response_body', response_body::text,
			    'response_headers', response_headers::text,
			    'recovery_point', recovery_point,
			    'retry_after_s', extract(epoch FROM retry_after))
			  FROM %s}, begin_call(@call)));
}

# The named fields of an answer or record, "a | b | c", NULL for undef.
sub fields
{
	my ($hash, @names) = @_;
	return join ' | ', map { $hash->{$_} // 'NULL' } @names;
}

# SQL rendering "status | body | headers" of the response columns, which
# idempotency.keys and idempotency_begin's result share.  With digest => 1
# the body shows as its length and md5 (a large body's diff is unreadable).
sub response_sql
{
	my (%params) = @_;
	my $body =
	  $params{digest}
	  ? q{length(response_body::text) || ' bytes, md5 ' || md5(response_body::text)}
	  : 'response_body::text';
	return qq{concat_ws(' | ', coalesce(response_status::text, 'NULL'),
	  coalesce($body, 'NULL'), coalesce(response_headers::text, 'NULL'))};
}

# The response stored for (scope, key), as rendered by response_sql.
sub stored_response
{
	my ($node, $db, $scope, $key, %params) = @_;
	return $node->safe_psql($db,
		sprintf('SELECT %s FROM idempotency.keys WHERE scope = %s AND key = %s',
			response_sql(%params), quote($scope), quote($key)));
}

# Retries [scope, key, request]: "outcome | status | body | headers", the
# response rendered as stored_response renders it, so that a replay of a
# stored response reads "replay | " . stored_response(...).
sub replayed_response
{
	my ($node, $db, $request, %params) = @_;
	return $node->safe_psql($db,
		sprintf(q{SELECT outcome || ' | ' || %s FROM %s},
			response_sql(%params), begin_call(@$request)));
}

# Whether idempotency.keys has anything stored out of line, in its TOAST
# table (tests store one large body and check it went there).
sub body_is_toasted
{
	my ($node, $db) = @_;
	return $node->safe_psql($db,
		q{SELECT pg_relation_size(reltoastrelid) > 0 FROM pg_class
		  WHERE oid = 'idempotency.keys'::regclass}) eq 't';
}

# idempotency_lookup's row as a hash (bodies as jsonb text, request as hex,
# lease_remaining_s in seconds from now), or undef when there is no row.
sub lookup_key
{
	my ($node, $db, $scope, $key) = @_;
	return query_object(
		$node, $db, sprintf(
			q{SELECT json_build_object(
			    'status', status, 'request', request::text, 'attempt', attempt,
			    'response_status', response_status,
			    'response_body', response_body::text,
			    'response_headers', response_headers::text,
			    'recovery_point', recovery_point,
			    'lease_remaining_s',
			      extract(epoch FROM lease_expires_at - clock_timestamp()))
			  FROM idempotency_lookup(%s, %s)}, quote($scope), quote($key)));
}

# Whether the in-progress claim on (scope, key) still has lease left.
# Tests that expect in_progress after a restart or failover skip that check
# when a slow machine let the lease run out first.
sub lease_running
{
	my ($node, $db, $scope, $key) = @_;
	my $record = lookup_key($node, $db, $scope, $key);
	return defined $record
	  && defined $record->{lease_remaining_s}
	  && $record->{lease_remaining_s} > 0.2;
}

# Runs SQL that should fail; returns its SQLSTATE (undef if it succeeded)
# and psql's stderr, which in verbose mode also carries DETAIL and HINT.
sub sql_error
{
	my ($node, $db, $sql) = @_;
	my ($ret, $stdout, $stderr) =
	  $node->psql($db, "\\set VERBOSITY verbose\n$sql", on_error_stop => 1);
	return (undef, $stderr) if $ret == 0;
	my ($sqlstate) = $stderr =~ /ERROR:\s+([0-9A-Z]{5}):/;
	return ($sqlstate, $stderr);
}

# After a backend was killed (restart_after_crash = on): waits until the
# postmaster has reinitialised, replayed the WAL and accepts connections
# again. $log_offset is the server log's size taken before the kill, so an
# earlier restart's messages do not count.
sub wait_for_crash_restart
{
	my ($node, $log_offset) = @_;
	$node->wait_for_log(
		qr/all server processes terminated; reinitializing.*database system is ready to accept connections/s,
		$log_offset);
	$node->poll_query_until('postgres', 'SELECT true')
	  or die 'the server did not accept connections after the crash restart';
	return;
}

# The lines of $node's server log, from $log_offset on (its size taken
# before), that show a crash restart: a child process that died unexpectedly
# makes the postmaster terminate every other one and reinitialise, and say
# so; empty if none did.  (The postmaster itself lives on, so its PID and
# pg_postmaster_start_time() stay the same across such a restart.)
sub crash_restarts
{
	my ($node, $log_offset) = @_;
	return join '', grep {
		/terminating any other active server processes|all server processes terminated; reinitializing/
	} split /^/m, slurp_file($node->logfile, $log_offset);
}

# Polls until the lease of the claim on (scope, key) has ended.
sub wait_for_lease_end
{
	my ($node, $db, $scope, $key) = @_;
	$node->poll_query_until(
		$db, sprintf(
			q{SELECT lease_expires_at <= now() FROM idempotency_lookup(%s, %s)},
			quote($scope), quote($key)))
	  or die "the lease of $scope/$key did not end";
	return;
}

# Waits until the expiry worker has swept every database $rounds more times,
# as idempotency_stats().sweeps, read in $db, counts them.
sub wait_for_sweeps
{
	my ($node, $db, $rounds) = @_;
	# A round sweeps (and counts) each database that has the extension.
	my $databases = grep {
		$node->safe_psql($_, q{SELECT count(*) FROM pg_extension WHERE extname = 'idempotency'})
	} split /\n/,
	  $node->safe_psql($db, 'SELECT datname FROM pg_database WHERE NOT datistemplate AND datallowconn');
	my $target =
	  $node->safe_psql($db, 'SELECT sweeps FROM idempotency_stats()') + $rounds * $databases;
	$node->poll_query_until($db, "SELECT sweeps >= $target FROM idempotency_stats()")
	  or die 'the worker stopped sweeping';
	return;
}

# Sets a server setting with ALTER SYSTEM and reloads the configuration.
sub reload_with
{
	my ($node, $setting) = @_;
	$node->safe_psql('postgres', "ALTER SYSTEM SET $setting");
	$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
	return;
}

sub wait_for_promotion
{
	my ($node) = @_;
	$node->promote;
	$node->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die 'the standby did not finish its promotion';
	return;
}

# Every stored key, one row's text per line in (scope, key) order: scope, key,
# request hash, timestamps (to the microsecond), ttl, status, attempt, lease,
# response and recovery point. Two databases with equal texts hold the same
# keys in the same states. With scopes => [...] only the keys of those scopes.
sub keys_text
{
	my ($node, $db, %params) = @_;
	my $where =
	  $params{scopes}
	  ? 'WHERE scope IN (' . join(', ', map { quote($_) } @{ $params{scopes} }) . ')'
	  : '';
	return $node->safe_psql($db,
		"SELECT k::text FROM idempotency.keys AS k $where ORDER BY scope, key");
}

# amcheck's bt_index_check (with heapallindexed) of every index of
# idempotency.keys: "name: checked, ..." in index name order.  Needs
# CREATE EXTENSION amcheck in $db.
sub indexes_checked
{
	my ($node, $db) = @_;
	return $node->safe_psql(
		$db, q{
		SELECT string_agg(c.relname || ': ' || CASE WHEN bt_index_check(c.oid, true)::text = ''
		                                           THEN 'checked' END, ', ' ORDER BY c.relname)
		  FROM pg_index AS x JOIN pg_class AS c ON c.oid = x.indexrelid
		 WHERE x.indrelid = 'idempotency.keys'::regclass});
}

# Starts PgBouncer in transaction mode in front of $node's database $db for
# the role $user (trust), with four server connections, so that a client's
# transactions land on any of them.  From PgBouncer 1.21 with
# max_prepared_statements, which pools named prepared statements, unless
# named_statements => 0 turns that off (as before 1.21).  It
# listens on a Unix socket, and with tcp => 1 on 127.0.0.1 too (for JDBC,
# whose startup packet sets extra_float_digits, which PgBouncer refuses
# unless told to ignore it, as doc/reference.md says).
# Returns undef without pgbouncer, else {handle, version,
# prepared_statements, connstr, port, up, log}: up once its socket exists,
# log the file of its output.
sub start_pgbouncer
{
	my ($node, $db, $user, %params) = @_;
	my ($pgbouncer) = grep { -x } map { "$_/pgbouncer" } split(/:/, $ENV{PATH}), '/usr/sbin';
	return undef unless $pgbouncer;
	my ($version) = `$pgbouncer --version` =~ /PgBouncer (\d+\.\d+)/;
	my ($major, $minor) = split /\./, $version;
	my $pools_named = $major > 1 || $minor >= 21;
	my $prepared_statements = $pools_named && ($params{named_statements} // 1);
	my $dir = PostgreSQL::Test::Utils::tempdir_short;
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	PostgreSQL::Test::Utils::append_to_file("$dir/users.txt", qq{"$user" ""\n});
	PostgreSQL::Test::Utils::append_to_file(
		"$dir/pgbouncer.ini", sprintf(qq{
[databases]
%s = host=%s port=%d dbname=%s
[pgbouncer]
listen_addr = %s
listen_port = %d
unix_socket_dir = %s
auth_type = trust
auth_file = %s/users.txt
pool_mode = transaction
default_pool_size = 4
max_client_conn = 200
ignore_startup_parameters = extra_float_digits
logfile = %s/pgbouncer.log
pidfile = %s/pgbouncer.pid
%s
}, $db, $node->host, $node->port, $db, $params{tcp} ? '127.0.0.1' : '', $port, $dir, $dir, $dir, $dir,
			$prepared_statements ? 'max_prepared_statements = 100'
			: $pools_named ? 'max_prepared_statements = 0'
			: ''));
	# Its output to a file: PgBouncer logs every login to stderr too, and a
	# pipe nobody reads while a test runs would fill and stall it.
	my $handle = IPC::Run::start([ $pgbouncer, "$dir/pgbouncer.ini" ],
		'>', "$dir/stdout.log", '2>', "$dir/stderr.log");
	my $up = 0;
	for (1 .. 600)
	{
		last if ($up = -S "$dir/.s.PGSQL.$port");
		select(undef, undef, undef, 0.1);
	}
	return {
		handle => $handle,
		version => $version,
		prepared_statements => $prepared_statements,
		connstr => "host=$dir port=$port dbname=$db user=$user",
		port => $port,
		up => $up,
		log => "$dir/stderr.log"
	};
}

# A TCP port on 127.0.0.1 that nothing listens on now, for an HTTP server.
sub free_tcp_port
{
	my $socket = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 1)
	  or die "no free port: $!";
	my $port = $socket->sockport;
	close $socket;
	return $port;
}

# Waits for an HTTP server on 127.0.0.1:$port, started with IPC::Run::start
# as $server, to answer GET /health with 200, as long as it runs: whether it
# did.
sub wait_for_health
{
	my ($port, $server) = @_;
	for (1 .. 1200)    # up to 2 minutes: a JVM or a cold npm start on a loaded machine
	{
		return 0 if waitpid($server->{KIDS}[0]{PID}, WNOHANG) > 0;    # it exited
		my $socket = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Timeout => 5);
		if ($socket)
		{
			print $socket "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
			my $status = <$socket> // '';
			close $socket;
			return 1 if $status =~ m{^HTTP/1\.[01] 200 };
		}
		select(undef, undef, undef, 0.1);
	}
	return 0;
}

# The last 60 lines of a log file, for a diagnostic.
sub log_tail
{
	my ($file) = @_;
	return '' unless -e $file;
	my @lines = split /\n/, slurp_file($file);
	return join("\n", "the end of $file:", @lines[ ($#lines > 60 ? $#lines - 60 : 0) .. $#lines ]);
}

1;
