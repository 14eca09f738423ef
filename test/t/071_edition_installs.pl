# The SQL edition in each of its install forms (doc/sql-edition.md,
# "Installing"), as edition/generate writes them: CREATE EXTENSION from the
# extension directory (by a superuser), a plain psql script (by a role that
# is no superuser, into a schema of its own), and pg_tle (by a member of
# pgtle_admin; skipped, saying so, where pg_tle is not installed).  In each:
#   * an application role with EXECUTE serves requests, and two tenant roles
#     cannot reach each other's keys, nor can the application role;
#   * pg_dump and pg_restore by the role doc/sql-edition.md names (the
#     owner, or a superuser) carry every row, counted, and the restored keys
#     answer as before, tenants still apart;
#   * an update to a later version (a made-up 0.5.1 beside the source,
#     through edition/generate) keeps every row, and a plain install refuses
#     an update that does not start from its version;
#   * a claim made outside a transaction block without a lease is refused at
#     commit (IK004) under the extended protocol too, and not inside one.
use strict;
use warnings;
use File::Copy qw(copy);
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# As on a managed server: the extension's library is not loaded.
my $node = new_node('installs', conf => ["shared_preload_libraries = ''"]);

# The forms, from the one source; and a made-up later version of it.
my $forms = PostgreSQL::Test::Utils::tempdir;
system('perl', 'edition/generate', $forms) == 0 or BAIL_OUT('edition/generate failed');
my $later_source = PostgreSQL::Test::Utils::tempdir;
copy($_, $later_source) or BAIL_OUT("copy $_: $!") for grep { -f } glob('edition/*');
{
	open my $update, '>', "$later_source/idempotency_sql--0.5.0--0.5.1.sql" or BAIL_OUT($!);
	print $update <<'EOF';
\echo Use "ALTER EXTENSION idempotency_sql UPDATE" to load this file. \quit
-- A made-up update (test/t/071): a column added, a function replaced.
ALTER TABLE idempotency.keys ADD COLUMN note text;
CREATE FUNCTION @extschema@.idempotency_sql_note() RETURNS text LANGUAGE sql IMMUTABLE RETURN '0.5.1';
COMMENT ON FUNCTION @extschema@.idempotency_sql_note() IS 'the made-up update of test/t/071';
EOF
	close $update;
	open my $control, '<', "$later_source/idempotency_sql.control" or BAIL_OUT($!);
	my $text = do { local $/; <$control> };
	close $control;
	$text =~ s/default_version = '0\.5\.0'/default_version = '0.5.1'/ or BAIL_OUT('no default_version');
	open $control, '>', "$later_source/idempotency_sql.control" or BAIL_OUT($!);
	print $control $text;
	close $control;
}
my $later = PostgreSQL::Test::Utils::tempdir;
system('perl', "$later_source/generate", $later) == 0 or BAIL_OUT('generate of 0.5.1 failed');
ok(-e "$later/idempotency_sql--0.5.0--0.5.1.plain.sql" && -e "$later/idempotency_sql--0.5.0--0.5.1.pgtle.sql",
	'the generator writes each form of an update');

$node->safe_psql('postgres', q{
	CREATE ROLE owner LOGIN CREATEDB;
	CREATE ROLE app LOGIN;
	CREATE ROLE tenant_a LOGIN IN ROLE app;
	CREATE ROLE tenant_b LOGIN IN ROLE app;
});

# psql as a role, stopping at the first error; returns stdout.
sub as_role
{
	my ($role, $db, $sql, %args) = @_;
	return $node->safe_psql($db, $sql, extra_params => [ '-U', $role ], %args);
}

sub run_file
{
	my ($role, $db, $file, @vars) = @_;
	local $ENV{PATH} = $node->config_data('--bindir') . ":$ENV{PATH}";
	my ($out, $err);
	my $ok = IPC::Run::run(
		[
			'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', @vars, '-h', $node->host,
			'-p', $node->port, '-U', $role, '-d', $db, '-f', $file
		],
		'>', \$out, '2>', \$err);
	diag($err) unless $ok;
	return $ok;
}

# The rows of the edition's tables, for comparisons.
sub rows
{
	my ($db) = @_;
	return $node->safe_psql($db, q{
		SELECT (SELECT count(*) FROM idempotency.keys) || ' keys, '
		    || (SELECT count(*) FROM idempotency.tenants) || ' tenants: '
		    || (SELECT string_agg(k.tenant || '/' || k.scope || '/' || k.key || '/' || k.status::text
		                          || '/' || k.attempt || '/' || COALESCE(k.response_body::text, '-'),
		                          ' ' ORDER BY k.tenant::text, k.scope, k.key)
		          FROM idempotency.keys AS k)});
}

# What each form's owner grants, and the requests its roles make.
my $grants = q{
	GRANT EXECUTE ON FUNCTION idempotency_begin, idempotency_complete, idempotency_checkpoint,
	                          idempotency_release, idempotency_lookup, idempotency_forget,
	                          idempotency_keys TO app;
	SELECT idempotency_tenant_isolation('tenant_a');
	SELECT idempotency_tenant_isolation('tenant_b');
};
my $one_request = q{
	BEGIN;
	SELECT outcome FROM idempotency_begin('orders', 'k1', request_hash('POST /orders'::text));
	SELECT idempotency_complete('orders', 'k1', 201, jsonb_build_object('by', current_user::text));
	COMMIT;
};
my $replay = q{SELECT outcome || ' ' || (response_body ->> 'by')
	FROM idempotency_begin('orders', 'k1', request_hash('POST /orders'::text))};

# Checks one installed form in $db, whose functions $owner owns.
sub check_form
{
	my ($form, $db, $owner) = @_;
	as_role($owner, $db, $grants);
	as_role('tenant_a', $db, $one_request);
	is(as_role('tenant_a', $db, $replay), 'replay tenant_a', "$form: a tenant's request replays");
	# tenant_b, its own key under the same scope and key; app, no tenant.
	is(as_role('tenant_b', $db, q{SELECT count(*) FROM idempotency_lookup('orders', 'k1')}),
		'0', "$form: another tenant sees nothing of it");
	as_role('tenant_b', $db, $one_request);
	is(as_role('tenant_b', $db, $replay), 'replay tenant_b', "$form: the other tenant gets its own key");
	is(as_role('app', $db, q{SELECT count(*) FROM idempotency_lookup('orders', 'k1')}),
		'0', "$form: a role without isolation sees neither");
	as_role('app', $db,
		q{SELECT idempotency_begin('pay', 'charge', request_hash('10 EUR'::text), lease => '1 hour')});
	is(as_role('tenant_b', $db, q{SELECT idempotency_forget('orders', 'k1')}), 't',
		"$form: a tenant forgets its own key");
	is(as_role('tenant_a', $db, $replay), 'replay tenant_a', "$form: and the other's key stays");
	as_role('tenant_b', $db, $one_request);
	my ($ret, $out, $err) = $node->psql($db, 'SELECT count(*) FROM idempotency.keys',
		extra_params => [ '-U', 'app' ]);
	like($err, qr/permission denied/, "$form: the application role cannot read the table");
	is(rows($db) =~ s/:.*//r, '3 keys, 2 tenants', "$form: three keys and two tenants stored");
}

# Dumps $db as $role and restores it into a new database $target (owned by
# $role), and checks the rows and the answers there.
sub dump_and_restore
{
	my ($form, $db, $role, $target) = @_;
	my $dump = PostgreSQL::Test::Utils::tempdir . '/dump';
	my $before = rows($db);
	$node->command_ok(
		[ 'pg_dump', '-Fc', '-U', $role, '-h', $node->host, '-p', $node->port, '-f', $dump, $db ],
		"$form: pg_dump by $role");
	$node->safe_psql('postgres', "CREATE DATABASE $target OWNER $role");
	$node->safe_psql('postgres', "ALTER DATABASE $target SET search_path = app, public") if $form eq 'plain';
	$node->command_ok(
		[ 'pg_restore', '-U', $role, '-h', $node->host, '-p', $node->port, '-d', $target, $dump ],
		"$form: pg_restore by $role");
	is(rows($target), $before, "$form: every key and tenant restored, counted and compared");
	is(as_role('tenant_a', $target, $replay), 'replay tenant_a', "$form: a restored key replays");
	is(as_role('tenant_b', $target, $replay), 'replay tenant_b', "$form: and each tenant keeps its own");
	is(as_role('app', $target,
			q{SELECT outcome FROM idempotency_begin('pay', 'charge', request_hash('10 EUR'::text), lease => '1 hour')}),
		'in_progress', "$form: a restored claim still holds its lease");
}

# ---------------------------------------------------------------------------
# The extension directory, by a superuser
# ---------------------------------------------------------------------------
$node->safe_psql('postgres', 'CREATE DATABASE dir');
$node->safe_psql('dir', 'CREATE EXTENSION idempotency_sql');
my $superuser = $node->safe_psql('postgres', 'SELECT current_user');
check_form('directory', 'dir', $superuser);
dump_and_restore('directory', 'dir', $superuser, 'dir_restored');

# IK004 under both protocols: pgbench sends one statement per transaction,
# as an autocommit client does, with the extended protocol.
for my $protocol ('simple', 'extended', 'prepared')
{
	my $script = PostgreSQL::Test::Utils::tempdir . '/claim.sql';
	open my $fh, '>', $script or die $!;
	print $fh "SELECT outcome FROM idempotency_begin('ik004', '$protocol', request_hash('r'::text));\n";
	close $fh;
	my ($out, $err);
	IPC::Run::run(
		[ 'pgbench', '-n', '-t', '1', '-M', $protocol, '-f', $script, '-h', $node->host, '-p', $node->port, 'dir' ],
		'>', \$out, '2>', \$err);
	like($err, qr/was claimed outside a transaction block and is not completed/,
		"an unsettled claim outside a transaction block fails at commit ($protocol protocol)");
	open $fh, '>', $script or die $!;
	print $fh "BEGIN;\nSELECT outcome FROM idempotency_begin('ik004', '$protocol', request_hash('r'::text));\nCOMMIT;\n";
	close $fh;
	$node->command_ok(
		[ 'pgbench', '-n', '-t', '1', '-M', $protocol, '-f', $script, '-h', $node->host, '-p', $node->port, 'dir' ],
		"inside BEGIN ... COMMIT it commits unfinished ($protocol protocol)");
}
is($node->safe_psql('dir', q{SELECT string_agg(key, ' ' ORDER BY key) FROM idempotency.keys WHERE scope = 'ik004'}),
	'extended prepared simple', 'only the claims made in a transaction block were kept');

# ---------------------------------------------------------------------------
# The plain script, by a role that is no superuser, into a schema of its own
# ---------------------------------------------------------------------------
$node->safe_psql('postgres', 'CREATE DATABASE plain OWNER owner');
$node->safe_psql('postgres', 'ALTER DATABASE plain SET search_path = app, public');
ok(run_file('owner', 'plain', "$forms/idempotency_sql.plain.sql", '-v', 'schema=app'),
	'plain: installed by the database owner with psql -f');
is($node->safe_psql('plain', 'SELECT version FROM idempotency.installed'), '0.5.0', 'plain: its version table');
check_form('plain', 'plain', 'owner');
dump_and_restore('plain', 'plain', 'owner', 'plain_restored');
ok(!run_file('owner', 'plain', "$later/idempotency_sql.plain.sql", '-v', 'schema=app'),
	'plain: installing again over an install fails, changing nothing');
my $rows = rows('plain');
ok(run_file('owner', 'plain', "$later/idempotency_sql--0.5.0--0.5.1.plain.sql", '-v', 'schema=app'),
	'plain: the update to 0.5.1');
is($node->safe_psql('plain', 'SELECT version || app.idempotency_sql_note() FROM idempotency.installed'),
	'0.5.10.5.1', 'plain: now at 0.5.1, with its function');
is(rows('plain'), $rows, 'plain: every row kept by the update');
ok(!run_file('owner', 'plain', "$later/idempotency_sql--0.5.0--0.5.1.plain.sql", '-v', 'schema=app'),
	'plain: an update from a version not installed is refused');
ok(run_file('owner', 'plain', "$later/idempotency_sql.plain-uninstall.sql", '-v', 'schema=app'),
	'plain: the uninstall script');
is($node->safe_psql('plain',
		q{SELECT count(*) FROM pg_proc WHERE pronamespace = 'app'::regnamespace}
		  . q{ UNION ALL SELECT count(*) FROM pg_namespace WHERE nspname = 'idempotency'}),
	"0\n0", 'plain: it leaves no function and no private schema');

# ---------------------------------------------------------------------------
# pg_tle, by a member of pgtle_admin
# ---------------------------------------------------------------------------
SKIP:
{
	my $tle_node = new_pg_tle_node('tle');
	skip 'pg_tle is not installed in this PostgreSQL (build it by hand to run this part)', 24 unless $tle_node;
	$node->stop;
	$node = $tle_node;
	$superuser = $node->safe_psql('postgres', 'SELECT current_user');
	$node->safe_psql('postgres', q{
		CREATE ROLE app LOGIN;
		CREATE ROLE tenant_a LOGIN IN ROLE app;
		CREATE ROLE tenant_b LOGIN IN ROLE app;
		CREATE ROLE tle_admin LOGIN;
		CREATE DATABASE tle OWNER tle_admin;
	});
	$node->safe_psql('tle', 'CREATE EXTENSION pg_tle; GRANT pgtle_admin TO tle_admin');
	ok(run_file('tle_admin', 'tle', "$forms/idempotency_sql.pgtle.sql"), 'pg_tle: registered by a pgtle_admin member');
	as_role('tle_admin', 'tle', 'CREATE EXTENSION idempotency_sql');
	check_form('pg_tle', 'tle', 'tle_admin');
	# A restore recreates pg_tle and the edition in a database without them.
	dump_and_restore('pg_tle', 'tle', $superuser, 'tle_restored');
	$rows = rows('tle');
	ok(run_file('tle_admin', 'tle', "$later/idempotency_sql--0.5.0--0.5.1.pgtle.sql"), 'pg_tle: the update path registered');
	as_role('tle_admin', 'tle', 'ALTER EXTENSION idempotency_sql UPDATE');
	is($node->safe_psql('tle',
			q{SELECT extversion || idempotency_sql_note() FROM pg_extension WHERE extname = 'idempotency_sql'}),
		'0.5.10.5.1', 'pg_tle: updated to 0.5.1');
	is(rows('tle'), $rows, 'pg_tle: every row kept by the update');
	# The update ended with pgtle.set_default_version: a restore recreates 0.5.1.
	dump_and_restore('pg_tle', 'tle', $superuser, 'tle_updated_restored');
}

done_testing();
