# The Java middleware (middleware/java: a Jakarta Servlet filter over a JDBC
# DataSource), built as its README says: `mvn --offline package` against
# Debian's Maven repository (/usr/share/maven-repo), which compiles the
# package with every lint warning an error, compiles its JUnit tests with the
# README's example (middleware/java/examples), runs them in an embedded
# Tomcat 10 over pgjdbc against a server with the extension (one TAP line per
# test, from Surefire's reports) and writes the jar; and the README's build
# without Maven (javac and jar against Debian's Servlet API jar), as printed.
#
# pom.xml pins the versions Debian 12 ships; where this Debian release ships
# other versions of a plugin or library (test/chroot's trixie and sid), the
# build sets the one it has (-Dproperty=version), as the README says.  Needs
# a JDK 17+, Maven, its plugins, Tomcat 10.1, pgjdbc and JUnit 5 (Debian:
# default-jdk-headless, maven, libmaven-resources-plugin-java,
# libmaven-compiler-plugin-java, libsurefire-java, libmaven-jar-plugin-java,
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

my $repository = '/usr/share/maven-repo';
my $dir = 'middleware/java';
my ($javac_found) = grep { -x "$_/javac" } split /:/, $ENV{PATH};
plan skip_all => 'javac and mvn are needed (Debian: default-jdk-headless, maven)'
  unless $javac_found && system('mvn --version >/dev/null 2>&1') == 0;

# The versions pom.xml pins, by property: [group path, artifact, version].
my $pom = slurp_file("$dir/pom.xml");
my %pinned = $pom =~ m{<([\w.-]+\.version)>([^<]+)</\1>}g;
my %artifact;
while ($pom =~ m#<groupId>([^<]+)</groupId>\s*<artifactId>([^<]+)</artifactId>\s*<version>\$\{([^}]+)\}</version>#g)
{
	$artifact{$3} = [ $1 =~ tr{.}{/}r, $2 ];
}
my (@overrides, @absent);
for my $property (sort keys %artifact)
{
	my ($group, $name) = @{ $artifact{$property} };
	my $path = "$repository/$group/$name";
	next if -d "$path/$pinned{$property}";
	# Debian's release of it: the newest numbered version in its repository.
	my @versions = sort { version_key($b) cmp version_key($a) }
	  grep { /^\d+(?:\.\d+)*$/ } map { s{.*/}{}r } glob("$path/*");
	if (@versions)
	{
		push @overrides, "-D$property=$versions[0]";
		note("$group/$name $pinned{$property} is not in $repository; building with $versions[0], this Debian release's");
	}
	else
	{
		push @absent, "$group/$name";
	}
}
plan skip_all => "$repository lacks @absent (Debian: the packages named at the top of this test)" if @absent;

sub version_key { join '.', map { sprintf '%08d', $_ } split /\./, shift }

my $tmp = PostgreSQL::Test::Utils::tempdir();
system('cp', '-R', $dir, "$tmp/java") == 0 or die "cp: $?";
my $build = "$tmp/java";
my ($version) = $pom =~ m{<artifactId>pg-idempotency</artifactId>\s*<version>([^<]+)</version>};

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

my ($out, $err) = ('', '');
my $built = IPC::Run::run(
	[ 'mvn', '--offline', '--batch-mode', "-Dmaven.repo.local=$repository", @overrides, 'package' ],
	'>', \$out, '2>', \$err,
	init => sub {
		chdir $build or die "chdir $build: $!";
		@ENV{qw(PGHOST PGPORT PGDATABASE PGUSER)} = ('127.0.0.1', $node->port, 'middleware', scalar getpwuid($<));
		$ENV{MAVEN_OPTS} = '-XX:TieredStopAtLevel=1 -XX:+UseSerialGC';
	});

# Each test case in Surefire's reports: passed, or failed with its message.
my $tests = 0;
for my $report (sort glob("$build/target/surefire-reports/TEST-*.xml"))
{
	my $xml = slurp_file($report);
	while ($xml =~ m{<testcase\s([^>]*?)(/>|>(.*?)</testcase>)}gs)
	{
		my ($attributes, $body) = ($1, $3 // '');
		my ($name) = $attributes =~ /\bname="([^"]*)"/;
		my ($class) = $attributes =~ /\bclassname="(?:[\w.]*\.)?([^".]*)"/;
		$tests++;
		my ($problem) = $body =~ m{<(failure|error|skipped)\b([^>]*)}s;
		ok(!$problem, "java middleware: $class: $name")
		  or diag("$problem: " . (($body =~ m{message="([^"]*)"})[0] // $body));
	}
}
ok($tests >= 30, 'mvn package ran the JUnit tests') or diag("$out\n$err");
ok($built, 'mvn --offline package succeeds against Debian\'s repository') or diag("$out\n$err");
my $jar = "$build/target/pg-idempotency-$version.jar";
ok(-f $jar, "it writes target/pg-idempotency-$version.jar");
my ($listing, $list_err) = ('', '');
my $listed = IPC::Run::run([ 'jar', '--list', '--file', $jar ], '>', \$listing, '2>', \$list_err);
ok($listed && $listing =~ m{^org/pgidempotency/IdempotencyFilter\.class$}m && $listing !~ /Test|Orders/,
	'the jar holds the package, without its tests or the example') or diag($listing);

# The README's build without Maven, as printed, in a copy of the package.
my ($block) = slurp_file("$dir/README.md") =~ /<!-- tested: javac[^>]*-->\n```sh\n(.*?)```/s;
ok($block, 'the README shows the build without Maven');
($out, $err) = ('', '');
ok( IPC::Run::run([ 'sh', '-ec', $block // 'false' ], '>', \$out, '2>', \$err,
		init => sub { chdir "$tmp/java" or die "chdir: $!" }),
	'its javac and jar commands build the jar') or diag("$out\n$err");
ok(-f "$tmp/java/pg-idempotency.jar", 'pg-idempotency.jar is there');

$node->stop;
done_testing();
