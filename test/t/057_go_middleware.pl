# The Go middleware (middleware/go: net/http over database/sql), built offline
# as its users' modules build it (middleware/go/conformance/vendor-debian), and
# its tests, one TAP line per Go test: the package's own glue (no server), the
# README's example, and the integration tests with lib/pq and pgx v4's stdlib
# (chi and gorilla/mux, the drivers' errors), against a server with the
# extension, directly and through PgBouncer in transaction mode.  What every
# package does, with every option, is the conformance suite's (t/056).  Needs Go and
# Debian's sources of the drivers and routers (golang-go,
# golang-github-lib-pq-dev, golang-github-jackc-pgx-v4-dev,
# golang-github-go-chi-chi-dev, golang-github-gorilla-mux-dev); skips, saying
# so, without them.  The OpenTelemetry module (middleware/go/otel: spans, asserted
# from the SDK's in-memory exporter) needs golang-opentelemetry-otel-dev besides,
# and its tests are skipped, saying so, without it.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use Cwd ();
use File::Path qw(make_path);
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $sources = '/usr/share/gocode/src';
my @needed = ('github.com/lib/pq', 'github.com/jackc/pgx/v4/stdlib', 'github.com/go-chi/chi',
	'github.com/gorilla/mux');
my @missing = grep { !-d "$sources/$_" } @needed;
plan skip_all => 'Go is not installed (Debian: golang-go)' unless system('go version >/dev/null 2>&1') == 0;
plan skip_all => "Debian's Go sources of @missing are not installed" if @missing;

my $package = 'middleware/go';
my $tmp = PostgreSQL::Test::Utils::tempdir();

# Go with nothing downloaded.  The build cache is the user's where it can be
# written, as in middleware/go/conformance/run (t/056 compiled Debian's pgx
# into it already), else one of this test's.
my %go = (GOPATH => "$tmp/gopath", GO111MODULE => 'on', GOPROXY => 'off', GOTOOLCHAIN => 'local',
	GOFLAGS => '');
my $cache = `go env GOCACHE`;
chomp $cache;
make_path($cache, { error => \my $unused }) if $cache;
$go{GOCACHE} = "$tmp/gocache" unless $cache && -d $cache && -w $cache;

# Runs a command in $dir with the Go environment and %env: whether it succeeded,
# and its output.
sub run_in
{
	my ($dir, $command, %env) = @_;
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run(
		$command,
		init => sub {
			chdir $dir or die "chdir $dir: $!";
			@ENV{ keys %go } = values %go;
			@ENV{ keys %env } = values %env;
		},
		'>', \$out, '2>', \$err, IPC::Run::timeout(1800));
	return ($ok, "$out$err", $out);
}

# Runs `go test -json` in $dir: one TAP line per Go test (and subtest) that
# passed or failed, with its output on failure; a skipped test is a note.
sub go_test
{
	my ($label, $dir, %env) = @_;
	my ($ok, $output, $json) = run_in($dir, [ 'go', 'test', '-count=1', '-json', './...' ], %env);
	my (%log, $tests);
	for my $line (split /\n/, $json)
	{
		my $event = eval { decode_json($line) } or next;
		my $test = $event->{Test} // next;
		$log{$test} .= $event->{Output} if $event->{Action} eq 'output';
		next unless $event->{Action} =~ /^(pass|fail|skip)$/;
		$tests++;
		if ($event->{Action} eq 'skip')
		{
			my ($why) = ($log{$test} // '') =~ /_test\.go:\d+: (.*)/;
			note("$label: $test skipped: " . ($why // 'no reason given'));
			next;
		}
		ok($event->{Action} eq 'pass', "$label: $test") or diag($log{$test});
	}
	ok($tests && $ok, "$label: go test ran and passed") or diag($output);
	return;
}

# The package: formatted, vetted, and its own tests, which need no server.
my ($ok, $output) = run_in($package, [ 'gofmt', '-l', '.' ]);
ok($ok && $output eq '', 'every Go file is as gofmt writes it') or diag($output);
($ok, $output) = run_in($package, [ 'go', 'vet', './...' ]);
ok($ok, "go vet finds nothing in the package") or diag($output);
go_test('package', $package);

# The example and the integration tests: each a module of its own that requires
# the package, vendored from Debian's sources as `go get` would have fetched them.
# The OpenTelemetry module too, where Debian's OpenTelemetry is installed.
my $otel = -d "$sources/go.opentelemetry.io/otel/sdk/trace/tracetest";
my %modules;
for my $name ('examples', 'integration', $otel ? 'otel' : ())
{
	my $dir = "$tmp/$name";
	system('cp', '-R', "$package/$name", $dir) == 0 or die "cp $name: $?";
	($ok, $output) = run_in('.', [ "$package/conformance/vendor-debian", $dir ]);
	ok($ok, "$name: the module builds offline against the package and Debian's sources") or diag($output);
	($ok, $output) = run_in($dir, [ 'go', 'vet', './...' ]);
	ok($ok, "$name: go vet finds nothing") or diag($output);
	$modules{$name} = $dir;
}

# The README's offline install, as printed, in a new module with the example's
# files: its commands but the apt-get line (whose packages this test needs
# anyway), with the checkout for /path/to/idempotency, no module proxy.
{
	my $readme = slurp_file("$package/README.md");
	my ($block) = $readme =~ /<!-- tested: go-offline[^>]*-->\n```sh\n(.*?)```/s;
	ok($block, 'the README has the offline install commands') or diag('no "tested: go-offline" block');
	$block //= '';
	my @apt = $block =~ /^sudo apt-get install (.*)$/mg;
	my @packages = map { split ' ' } @apt;
	my @absent = grep { system("dpkg-query -W -f='\${Status}' $_ 2>/dev/null | grep -q ' installed\$'") != 0 } @packages;
	ok(@packages && !@absent, "its apt-get line names installed packages (@packages)") or diag("not installed: @absent");
	$block =~ s/^sudo apt-get install .*\n//mg;
	my $checkout = Cwd::getcwd();
	$block =~ s{/path/to/idempotency}{$checkout}g;
	my $dir = "$tmp/readme-offline";
	make_path($dir);
	system('cp', glob("$package/examples/orders/*.go"), $dir) == 0 or die "cp: $?";
	unlink glob("$dir/*_test.go");
	($ok, $output) = run_in($dir, [ 'go', 'mod', 'init', 'example.com/orders' ]);
	ok($ok, 'go mod init makes a new module') or diag($output);
	($ok, $output) = run_in($dir, [ 'sh', '-ec', $block ]);
	ok($ok, "the README's commands build it offline") or diag($output);
	ok(-x "$dir/orders", 'into the example program') or diag(join ' ', glob("$dir/*"));
}

my ($node, %database) = new_orders_database('go', conf => ['max_connections = 100']);
go_test('example', $modules{examples}, %database);
go_test('lib/pq and pgx', $modules{integration}, %database);
SKIP:
{
	skip "middleware/go/otel: Debian's OpenTelemetry is not installed (golang-opentelemetry-otel-dev)", 1 unless $otel;
	go_test('OpenTelemetry', $modules{otel}, %database);
}

# Through PgBouncer in transaction mode: lib/pq's unnamed statements need no
# setting; pgx prepares named ones, which need max_prepared_statements (1.21
# and later) or statement_cache_mode=describe before it, as the reference says.
SKIP:
{
	my $bouncer = start_pgbouncer($node, 'go', $database{PGUSER});
	skip 'pgbouncer is not installed (Debian: pgbouncer)', 1 unless $bouncer;
	my $version = $bouncer->{version};
	ok($bouncer->{up}, "PgBouncer $version runs in transaction mode") or diag(slurp_file($bouncer->{log}));
	go_test("lib/pq and pgx through PgBouncer $version", $modules{integration}, %database,
		PGHOST => $bouncer->{connstr} =~ /host=(\S+)/, PGPORT => $bouncer->{port},
		IDEMPOTENCY_POOLED => 1,
		IDEMPOTENCY_PGX_DSN => $bouncer->{prepared_statements} ? '' : 'statement_cache_mode=describe');
	$bouncer->{handle}->kill_kill;
}

done_testing();
