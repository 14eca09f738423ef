# The documentation's examples, run exactly as written, by the role they are
# written for, through real drivers and through a connection pooler:
#  * every SQL block of README.md and doc/*.md carries a marker: "tested: NAME"
#    (run here, or by the test named in %tested_elsewhere), "synopsis" (a
#    function's signature, compared with the installed function) or
#    "gateway-migration" (test/t/022); a middleware example ("example: FILE")
#    is that file, which the middleware's suite runs;
#  * the ten-line introduction as a superuser, in a database of its own;
#  * the setup block of doc/handlers.md as a superuser, then its SQL and
#    PL/pgSQL handlers as the application role, which has nothing but the
#    documented grants;
#  * its Python handlers (test/drivers/readme_handlers.py) with psycopg 3 --
#    its defaults, which prepare named statements, and prepare_threshold=None
#    -- and psycopg2, which binds on the client: new requests, byte-exact
#    replays, 50 simultaneous duplicates writing one order, an untyped
#    request_hash() refused, a forgotten BEGIN refused, a bad key;
#  * the same through PgBouncer in transaction mode, with the documented
#    settings for the PgBouncer version at hand: named prepared statements work
#    from 1.21 with max_prepared_statements; before that they fail with 26000,
#    as the reference says, and the unprepared settings work.
# Needs python3 with psycopg (3) and psycopg2, and pgbouncer (Debian:
# python3-psycopg, python3-psycopg2, pgbouncer); skips, saying so, without.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my @documents = ('README.md', sort glob('doc/*.md'));
my $handlers_doc = 'doc/handlers.md';

# Every SQL block, with the marker on the line above it.
my (%blocks, @synopses, @unmarked);
for my $document (@documents)
{
	my $text = slurp_file($document);
	while ($text =~ /(?:^|\n)(?:<!-- (tested: (\S+)|synopsis|gateway-migration) -->\n)?```sql\n(.*?)\n```/gs)
	{
		my ($marker, $name, $code) = ($1, $2, $3);
		if (!defined $marker) { push @unmarked, "$document: " . (split /\n/, $code)[0]; }
		elsif (defined $name)
		{
			# A name used twice (the same step in two documents) must be the
			# same code, or one copy would go untested.
			ok($blocks{$name} eq $code, "$name reads the same in every document")
			  if exists $blocks{$name};
			$blocks{$name} = $code;
		}
		elsif ($marker eq 'synopsis') { push @synopses, $code; }
	}
}
is(join("\n", @unmarked), '', 'every SQL block in the documentation is run or checked');

# The middleware examples: each block marked "example: FILE" is that file,
# which the middleware's own suite runs (test/t/052, test/t/053, test/t/057, test/t/058).
my $examples = 0;
for my $document (@documents, sort glob('middleware/*/README.md'))
{
	my $text = slurp_file($document);
	while ($text =~ /<!-- example: (\S+) -->\n```\w*\n(.*?)\n```/gs)
	{
		my ($file, $code) = ($1, $2);
		$examples++;
		ok(-f $file && slurp_file($file) eq "$code\n", "$document: the example is $file as it is");
	}
}
ok($examples >= 8, 'the READMEs show the middleware examples');
my %tested_elsewhere = ('citus_handler.sql' => 'test/t/CitusTest.pm',
	'key_digest.sql' => 'test/t/025_update_digest.pl');
my @run_here = qw(intro.sql create_extension.sql setup.sql orders.sql handler.sql replay.sql
  place_order.sql grants.sql tenant_roles.sql cron.sql);
is(join(' ', sort grep { !$tested_elsewhere{$_} } keys %blocks),
	join(' ', sort @run_here), 'every tested block has its test');
ok(slurp_file($tested_elsewhere{$_}) =~ /tested: \Q$_\E/, "$_ is run by $tested_elsewhere{$_}")
  for sort keys %tested_elsewhere;

my $node = new_node('readme');

# The ten-line introduction, as a superuser in a database of its own.
$node->safe_psql('postgres', 'CREATE DATABASE intro');
my ($intro_ret, $intro_out, $intro_err) =
  $node->psql('intro', $blocks{'intro.sql'}, on_error_stop => 1);
is($intro_ret, 0, 'intro.sql runs') or diag($intro_err);
is($intro_out, "claimed\nt\nreplay|201|{\"order\": 1}",
	'intro.sql claims, then replays the stored response, as its text says');
is($node->safe_psql('intro', 'SELECT count(*) FROM orders'), '1', 'intro.sql wrote one order');
my ($ret, $stdout, $stderr) = $node->psql('postgres', $blocks{'setup.sql'});
is($ret, 0, 'the setup block runs as a superuser') or diag($stderr);

sub as_app
{
	my ($sql) = @_;
	my ($ret, $stdout, $stderr) =
	  $node->psql('postgres', $sql, extra_params => [ '-U', 'app' ], on_error_stop => 1);
	return ($ret, $stdout, $stderr);
}

for my $block (qw(orders.sql handler.sql))
{
	($ret, $stdout, $stderr) = as_app($blocks{$block});
	is($ret, 0, "$block runs as the application role") or diag($stderr);
}
($ret, $stdout, $stderr) = as_app($blocks{'replay.sql'});
is($stdout, 'replay|201|{"order": 1}|{"Location": "/orders/1"}', 'replay.sql replays, as its comment shows')
  or diag($stderr);
($ret, $stdout, $stderr) = as_app($blocks{'place_order.sql'});
is($stdout, 'claimed', 'place_order.sql creates the function and claims, as its comment shows')
  or diag($stderr);
is($node->safe_psql('postgres', 'SELECT string_agg(item || qty, \' \' ORDER BY id) FROM orders'),
	'book1 pen2', 'each handler wrote its order once');

# The installation step, in a database of its own.
$node->safe_psql('postgres', 'CREATE DATABASE installed');
$node->safe_psql('installed', $blocks{'create_extension.sql'});
is($node->safe_psql('installed', q{SELECT extversion FROM pg_extension WHERE extname = 'idempotency'}),
	$node->safe_psql('installed', q{SELECT default_version FROM pg_available_extensions WHERE name = 'idempotency'}),
	'create_extension.sql installs the default version');

# Each synopsis against the installed function: arguments with their names,
# types and defaults, the result, and for a composite result the attributes
# its comment lists.
sub normalized
{
	my ($text) = @_;
	$text =~ s/--[^\n]*//g if $text !~ /^--/;
	$text =~ s/::[a-z ]+(?=[,)]|$)//g;    # DEFAULT NULL::interval
	$text =~ s/\s+/ /g;
	$text =~ s/timestamp with time zone/timestamptz/g;
	$text =~ s/ ?([(),]) ?/$1/g;
	$text =~ s/^ | $//g;
	return $text;
}
ok(@synopses >= 8, 'the reference has a synopsis per API function');
for my $synopsis (@synopses)
{
	my ($name) = $synopsis =~ /^(\w+)\(/;
	my ($attributes) = $synopsis =~ /-- \w+: \((.*)\)\s*\z/s;
	(my $signature = $synopsis) =~ s/\n--.*//s;
	my $installed = $node->safe_psql('installed',
		qq{SELECT proname || '(' || pg_get_function_arguments(oid) || ') RETURNS '
		          || pg_get_function_result(oid)
		     FROM pg_proc WHERE proname = '$name'});
	is(normalized($signature), normalized($installed), "synopsis of $name matches the installed function");
	next unless defined $attributes;
	my ($type) = $installed =~ /RETURNS (?:SETOF )?(\w+)$/;
	$attributes =~ s/\n--/ /g;
	is(normalized($attributes),
		normalized($node->safe_psql('installed',
			qq{SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum)
			     FROM pg_attribute
			    WHERE attrelid = '$type'::regclass AND attnum > 0 AND NOT attisdropped})),
		"synopsis of $name lists the attributes of $type");
}

# The grants: the statement sql/privileges.sql tests, for the role "app".
(my $tested_grants = slurp_file('sql/privileges.sql')) =~ s/regress_idem_app/app/g;
ok(index(normalized($tested_grants), normalized($blocks{'grants.sql'})) >= 0,
	'grants.sql is the statement sql/privileges.sql runs');
# (The role "app" is the one setup.sql created: roles belong to the cluster.)
($ret, $stdout, $stderr) = $node->psql('installed', $blocks{'grants.sql'});
is($ret, 0, 'grants.sql runs') or diag($stderr);

# Tenant isolation for two login roles.
$node->safe_psql('installed', 'CREATE ROLE tenant_a LOGIN; CREATE ROLE tenant_b LOGIN');
$node->safe_psql('installed', $blocks{'tenant_roles.sql'});
is($node->safe_psql('installed',
		q{SELECT string_agg(r.rolname || ' ' || array_to_string(s.setconfig, ','), '; ' ORDER BY r.rolname)
		    FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole}),
	'tenant_a idempotency.tenant_isolation=role; tenant_b idempotency.tenant_isolation=role',
	'tenant_roles.sql isolates both roles');

# The pg_cron schedule, against a stand-in for cron.schedule that keeps the
# command; the command itself must then run.
$node->safe_psql('installed', q{
	CREATE SCHEMA cron;
	CREATE TABLE cron.job (name text, schedule text, command text);
	CREATE FUNCTION cron.schedule(name text, schedule text, command text) RETURNS bigint
	    LANGUAGE sql AS $$ INSERT INTO cron.job VALUES (name, schedule, command); SELECT 1::bigint $$});
$node->safe_psql('installed', $blocks{'cron.sql'});
my $command = $node->safe_psql('installed', 'SELECT command FROM cron.job');
($ret, $stdout, $stderr) = $node->psql('installed', $command);
is($ret, 0, "cron.sql schedules a command that runs: $command") or diag($stderr);

# ---------------------------------------------------------------------------
# Python drivers
# ---------------------------------------------------------------------------
my $python = '/usr/bin/python3';
SKIP:
{
	skip 'python3 with psycopg and psycopg2 is not installed (Debian: python3-psycopg, python3-psycopg2)', 1
	  unless system($python, '-c', 'import psycopg, psycopg2') == 0;

	# Runs the handlers in $mode against $dsn and passes their TAP lines on.
	sub run_handlers
	{
		my ($label, $dsn, $mode, @scenarios) = @_;
		my ($out, $err) = ('', '');
		IPC::Run::run([ $python, 'test/drivers/readme_handlers.py', $handlers_doc, $dsn, $mode, @scenarios ],
			'>', \$out, '2>', \$err);
		my @lines = grep { /^(not )?ok - / } split /\n/, $out;
		ok(@lines > 0, "$label: the handlers ran") or diag($err);
		for my $line (@lines)
		{
			my ($failed, $name) = $line =~ /^(not )?ok - (.*)$/;
			ok(!$failed, "$label: $name");
		}
		return $out;
	}

	my $direct = sprintf('host=%s port=%d dbname=postgres user=app', $node->host, $node->port);
	run_handlers('psycopg 3', $direct, 'psycopg');
	run_handlers('psycopg 3, prepare_threshold=None', $direct, 'psycopg-unprepared');
	run_handlers('psycopg2', $direct, 'psycopg2');

	# -----------------------------------------------------------------------
	# PgBouncer, transaction pooling
	# -----------------------------------------------------------------------
	my $bouncer = start_pgbouncer($node, 'postgres', 'app');
	skip 'pgbouncer is not installed (Debian: pgbouncer)', 1 unless $bouncer;
	my ($version, $prepared_statements, $pooled) = @$bouncer{qw(version prepared_statements connstr)};
	ok($bouncer->{up}, "PgBouncer $version runs in transaction mode") or diag(slurp_file($bouncer->{log}));

	# Four server connections for 50 clients: each transaction may land on
	# any of them.
	run_handlers("PgBouncer $version, psycopg 3, prepare_threshold=None", $pooled, 'psycopg-unprepared');
	run_handlers("PgBouncer $version, psycopg2", $pooled, 'psycopg2');
	if ($prepared_statements)
	{
		run_handlers("PgBouncer $version with max_prepared_statements, psycopg 3 defaults",
			$pooled, 'psycopg');
	}
	else
	{
		# Named statements prepared on one server connection are missing on the
		# next: the reference says to turn them off before PgBouncer 1.21.
		my ($out, $err) = ('', '');
		IPC::Run::run(
			[ $python, 'test/drivers/readme_handlers.py', $handlers_doc, $pooled, 'psycopg', 'prepared_concurrently' ],
			'>', \$out, '2>', \$err);
		like($out, qr/^not ok - .*prepared statement "_pg3_\d+" (?:does not exist|already exists)/m,
			"PgBouncer $version, psycopg 3 defaults: named prepared statements fail, as the reference says");
	}
	$bouncer->{handle}->kill_kill;
}

done_testing();
