# Lint of the install and upgrade scripts (sql/idempotency--*.sql), for the
# rules in STYLE.md that keep CREATE EXTENSION safe:
#  * the first line stops psql from running the script by hand;
#  * no CREATE OR REPLACE and no IF NOT EXISTS, which would adopt (or silently
#    keep) an object someone created beforehand;
#  * no @extschema@ inside a string literal, where a crafted schema name
#    could end the string and inject SQL;
#  * every SECURITY DEFINER function pins search_path to pg_catalog, pg_temp
#    and has EXECUTE revoked from PUBLIC in the same script.
# The linter first proves it catches each violation in a bad example, then
# checks the real scripts, and a live node confirms the last rule in the
# catalog, where the functions actually are.
#
# The scripts are read relative to the repository root, prove's working
# directory under test/run.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use PostgreSQL::Test::Utils;
use Test::More;

my $first_line = q{\echo Use "CREATE EXTENSION idempotency" to load this file. \quit};
my $pinned_path = qr/\bSET\s+search_path\s*(?:=|TO)\s*pg_catalog\s*,\s*pg_temp\b/i;

# ---------------------------------------------------------------------------
# A small SQL lexer: enough to tell code from comments, string literals,
# quoted identifiers and dollar-quoted bodies.
# ---------------------------------------------------------------------------

# Splits SQL into statements at top-level semicolons (simple on purpose: it
# only has to read our own scripts).  Each statement is
# { code => text with comments dropped and every literal, identifier and body
# replaced by a placeholder, literals => [ contents of '...' literals, those
# inside dollar-quoted bodies included ] }.
sub statements
{
	my ($sql) = @_;
	my @statements;
	my $current = { code => '', literals => [] };
	while (length $sql)
	{
		if ($sql =~ s/\A--[^\n]*//) { }
		elsif ($sql =~ s{\A/\*.*?\*/}{}s) { }
		elsif ($sql =~ s/\A[Ee]'((?:[^'\\]|\\.|'')*)'//s
			|| $sql =~ s/\A'((?:[^']|'')*)'//s)
		{
			push @{ $current->{literals} }, $1;
			$current->{code} .= "'?'";
		}
		elsif ($sql =~ s/\A("(?:[^"]|"")*")//) { $current->{code} .= $1; }
		elsif ($sql =~ s/\A(\$(?:[A-Za-z_]\w*)?\$)(.*?)\1//s)
		{
			# A body is SQL too: its literals count as the script's.
			push @{ $current->{literals} }, map { @{ $_->{literals} } } statements($2);
			$current->{code} .= '$body$';
		}
		elsif ($sql =~ s/\A;//)
		{
			push @statements, $current;
			$current = { code => '', literals => [] };
		}
		else
		{
			$sql =~ s/\A(.[^-\/'"\$;Ee]*)//s;
			$current->{code} .= $1;
		}
	}
	push @statements, $current if $current->{code} =~ /\S/;
	return @statements;
}

# The statements of a script; psql's backslash commands (the first line) are
# not SQL.
sub script_statements
{
	my ($text) = @_;
	return statements($text =~ s/^\\[^\n]*//mgr);
}

# The names of the functions a REVOKE ... ON FUNCTION ... FROM PUBLIC covers.
sub revoked_functions
{
	my ($code) = @_;
	return () unless $code =~ /\AREVOKE\s.*\bON\s+FUNCTION\s+(.*)\bFROM\s+PUBLIC\s*\z/is;
	my $list = $1;
	$list =~ s/\([^()]*\)//g;    # argument lists
	return map { s/^\s+|\s+$//gr } split /,/, $list;
}

# Every rule broken by the script $text (named $name), as messages.
sub lint
{
	my ($name, $text) = @_;
	my @problems;
	my ($line) = split /\n/, $text;
	push @problems, "$name: the first line is not '$first_line'"
	  unless defined $line && $line eq $first_line;

	my (@definers, %revoked);
	for my $statement (script_statements($text))
	{
		my $code = $statement->{code} =~ s/^\s+|\s+$//gr;
		push @problems, "$name: CREATE OR REPLACE in: $code"
		  if $code =~ /\bCREATE\s+OR\s+REPLACE\b/i;
		push @problems, "$name: IF NOT EXISTS in: $code"
		  if $code =~ /\bIF\s+NOT\s+EXISTS\b/i;
		push @problems, "$name: \@extschema\@ inside a string literal in: $code"
		  if grep { /\@extschema\@/ } @{ $statement->{literals} };
		$revoked{$_} = 1 for revoked_functions($code);
		next unless $code =~ /\bSECURITY\s+DEFINER\b/i;
		if ($code !~ /\ACREATE\s+(?:FUNCTION|PROCEDURE)\s+([^\s(]+)/i)
		{
			push @problems, "$name: SECURITY DEFINER outside CREATE FUNCTION in: $code";
			next;
		}
		push @definers, $1;
		push @problems, "$name: SECURITY DEFINER function $1 does not pin search_path"
		  unless $code =~ $pinned_path;
	}
	push @problems, "$name: SECURITY DEFINER function $_ is not revoked from PUBLIC"
	  for grep { !$revoked{$_} } @definers;
	return @problems;
}

# The number of SECURITY DEFINER functions a script creates.
sub definer_count
{
	my ($text) = @_;
	return scalar grep { $_->{code} =~ /\bSECURITY\s+DEFINER\b/i } script_statements($text);
}

# The scripts CREATE EXTENSION runs for the control file's default version:
# its install script, or, for a version that has none (0.4.0 while
# unreleased), the newest one before it and the updates from there on, as
# CREATE EXTENSION itself follows the update path.
sub default_install_scripts
{
	my ($version) = slurp_file('idempotency.control') =~ /^default_version\s*=\s*'([^']+)'/m;
	return ("sql/idempotency--$version.sql") if -e "sql/idempotency--$version.sql";
	my @updates = map { [ /--([\d.]+)--([\d.]+)\.sql$/ ] } glob 'sql/idempotency--*--*.sql';
	my @chain;
	for (my $to = $version; !-e "sql/idempotency--$to.sql";)
	{
		my ($step) = grep { $_->[1] eq $to } @updates or die "no update to $to";
		unshift @chain, "sql/idempotency--$step->[0]--$to.sql";
		$to = $step->[0];
		unshift @chain, "sql/idempotency--$to.sql" if -e "sql/idempotency--$to.sql";
	}
	return @chain;
}

# ---------------------------------------------------------------------------
# The linter catches each violation
# ---------------------------------------------------------------------------
my $good_definer = <<'SQL';
CREATE FUNCTION @extschema@.f() RETURNS int LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp AS $$ SELECT 1 $$;
REVOKE ALL ON FUNCTION @extschema@.f() FROM PUBLIC;
SQL
# Each bad example and the problem the linter must name (and no other).
my %bad = (
	'missing first line' => [ "SELECT 1;\n", qr/first line/ ],
	'CREATE OR REPLACE' => [
		"$first_line\nCREATE OR REPLACE FUNCTION \@extschema\@.g() RETURNS int LANGUAGE sql AS 'SELECT 1';\n",
		qr/CREATE OR REPLACE/
	],
	'IF NOT EXISTS' => [ "$first_line\nCREATE TABLE IF NOT EXISTS t (a int);\n", qr/IF NOT EXISTS/ ],
	'@extschema@ in a literal' => [
		"$first_line\nSELECT pg_catalog.set_config('search_path', '\@extschema\@', false);\n",
		qr/inside a string literal/
	],
	'@extschema@ in a literal in a body' => [
		"$first_line\nCREATE FUNCTION \@extschema\@.h() RETURNS text LANGUAGE sql AS \$\$ SELECT '\@extschema\@.x' \$\$;\n",
		qr/inside a string literal/
	],
	'definer without pinned path' => [
		"$first_line\n" . ($good_definer =~ s/SET search_path = pg_catalog, pg_temp//r),
		qr/does not pin search_path/
	],
	'definer path with public' => [
		"$first_line\n" . ($good_definer =~ s/pg_catalog, pg_temp/pg_catalog, public/r),
		qr/does not pin search_path/
	],
	'definer not revoked' =>
	  [ "$first_line\n" . ($good_definer =~ s/REVOKE.*\n//r), qr/not revoked from PUBLIC/ ],
	'definer revoked from someone else' =>
	  [ "$first_line\n" . ($good_definer =~ s/PUBLIC/app/r), qr/not revoked from PUBLIC/ ],
	'definer set by ALTER' => [
		"$first_line\nALTER FUNCTION \@extschema\@.f() SECURITY DEFINER;\n",
		qr/SECURITY DEFINER outside CREATE FUNCTION/
	]);
for my $case (sort keys %bad)
{
	my ($sql, $problem) = @{ $bad{$case} };
	my @problems = lint('example', $sql);
	ok(@problems == 1 && $problems[0] =~ $problem, "the linter rejects: $case")
	  or diag explain \@problems;
}
is_deeply([ lint('good', "$first_line\n-- CREATE OR REPLACE in a comment\n$good_definer") ],
	[], 'the linter accepts a correct SECURITY DEFINER function and comments');

# ---------------------------------------------------------------------------
# The real scripts
# ---------------------------------------------------------------------------
my @scripts = sort glob 'sql/idempotency--*.sql';
ok(scalar @scripts > 0, 'there are install scripts to check (run from the repository root)')
  or BAIL_OUT('no sql/idempotency--*.sql in ' . `pwd`);
for my $script (@scripts)
{
	is_deeply([ lint($script, slurp_file($script)) ], [], "$script follows the script rules");
}
my $definers = definer_count(join "\n", map { slurp_file($_) } default_install_scripts());

# ---------------------------------------------------------------------------
# The installed extension, as the catalog sees it
# ---------------------------------------------------------------------------
my $node = new_node('scripts');
$node->safe_psql('postgres', 'CREATE EXTENSION idempotency');
my @installed = split /\n/, $node->safe_psql(
	'postgres', q{
	SELECT p.oid::regprocedure || ' | ' || coalesce(array_to_string(p.proconfig, ';'), 'no SET')
	       || ' | ' || CASE WHEN has_function_privilege('public', p.oid, 'EXECUTE')
	                        THEN 'PUBLIC may execute' ELSE 'revoked' END
	  FROM pg_proc AS p
	  JOIN pg_depend AS d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
	       AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
	  JOIN pg_extension AS e ON e.oid = d.refobjid AND e.extname = 'idempotency'
	 WHERE p.prosecdef
	 ORDER BY 1});
is(scalar @installed, $definers,
	'the installed extension has as many SECURITY DEFINER functions as '
	  . join(' and ', default_install_scripts()) . ' create');
for my $function (@installed)
{
	my ($signature, $config, $access) = split / \| /, $function;
	is("$config | $access", 'search_path=pg_catalog, pg_temp | revoked',
		"$signature: search_path pinned, not executable by PUBLIC");
}
$node->stop;

done_testing();
