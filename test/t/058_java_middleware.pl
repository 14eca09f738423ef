# The Java middleware (middleware/java: a Jakarta Servlet filter over a JDBC
# DataSource) against a server with the extension: the package, its JUnit
# tests (middleware/java/src/test, with the README's example,
# middleware/java/examples) compiled with javac against Debian's jars, and
# run in an embedded Tomcat 10 over pgjdbc, one TAP line per test.  The
# package itself compiles with every lint warning an error.  Needs a JDK 17+,
# Tomcat 10.1, pgjdbc and JUnit 5 (Debian: default-jdk-headless,
# libtomcat10-java, libpostgresql-jdbc-java, junit5); skips, saying so,
# without them.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $jars = '/usr/share/java';
my @classpath = map { "$jars/$_.jar" } qw(junit-platform-console-standalone tomcat10-catalina
  tomcat10-coyote tomcat10-util tomcat10-util-scan tomcat10-juli tomcat10-api
  tomcat10-servlet-api tomcat10-jaspic-api tomcat10-annotations-api postgresql);
my @missing = grep { !-r } @classpath;
my ($javac_found) = grep { -x "$_/javac" } split /:/, $ENV{PATH};
plan skip_all => 'javac and ' . join(', ', @missing)
  . ' are needed (Debian: default-jdk-headless, libtomcat10-java, libpostgresql-jdbc-java, junit5)'
  if !$javac_found || @missing;

my $dir = 'middleware/java';
my $classes = PostgreSQL::Test::Utils::tempdir();
my @javac = ('javac', '--release', '17', '-encoding', 'UTF-8');
my ($out, $err) = ('', '');
ok( IPC::Run::run(
		[ @javac, '-Xlint:all', '-Werror', '-cp', "$jars/tomcat10-servlet-api.jar", '-d', "$classes/main",
			glob("$dir/src/main/java/org/pgidempotency/*.java") ],
		'>', \$out, '2>', \$err),
	'the package compiles without a warning') or diag("$out\n$err");
ok( IPC::Run::run(
		[ @javac, '-cp', join(':', "$classes/main", @classpath), '-d', "$classes/test",
			glob("$dir/src/test/java/org/pgidempotency/*.java"), glob("$dir/examples/*.java") ],
		'>', \$out, '2>', \$err),
	'its tests and example compile') or diag("$out\n$err");

# pgjdbc speaks TCP only.
my $node = new_node('java', conf => [ "listen_addresses = '127.0.0.1'", 'max_connections = 100' ]);
$node->append_conf('pg_hba.conf', 'host all all 127.0.0.1/32 trust');
$node->reload;
$node->safe_psql('postgres', 'CREATE DATABASE middleware');
$node->safe_psql('middleware', q{
	CREATE EXTENSION idempotency;
	CREATE TABLE things (id bigserial PRIMARY KEY, item text NOT NULL);
	CREATE TABLE orders (id bigserial PRIMARY KEY, item text NOT NULL);
});

my $ran = IPC::Run::run(
	[ 'java', '-XX:TieredStopAtLevel=1', '-XX:+UseSerialGC',
		'-cp', join(':', "$classes/main", "$classes/test", @classpath), 'org.pgidempotency.TapRunner' ],
	'>', \$out, '2>', \$err,
	init => sub {
		@ENV{qw(PGHOST PGPORT PGDATABASE PGUSER)} = ('127.0.0.1', $node->port, 'middleware', scalar getpwuid($<));
	});
# Each test, with the "# " lines of diagnostics that follow a failed one.
my $tests = 0;
for my $test ($out =~ /^((?:not )?ok \d+ - .*\n(?:# .*\n)*)/mg)
{
	my ($failed, $name, $details) = $test =~ /^(not )?ok \d+ - (.*)\n((?:.*\n)*)/;
	$tests++;
	ok(!$failed && $name !~ /# SKIP/, "java middleware: $name") or diag($details);
}
ok($tests >= 30, 'the JUnit tests ran') or diag("$out\n$err");
ok($ran, 'the JUnit run exits 0') or diag($err);

# The pom.xml users build with: a valid Maven model (offline: no Maven Central
# here, so its build is not run).
SKIP:
{
	skip 'mvn is not installed (Debian: maven)', 1 unless system('mvn --version >/dev/null 2>&1') == 0;
	my $repository = PostgreSQL::Test::Utils::tempdir();
	ok( IPC::Run::run(
			[ 'mvn', '--offline', '--batch-mode', '--quiet', "-Dmaven.repo.local=$repository", '--file',
				"$dir/pom.xml", 'validate' ],
			'>', \$out, '2>', \$err),
		'pom.xml is a valid Maven project') or diag("$out\n$err");
}

$node->stop;
done_testing();
