# The release files' checks: make release refuses a version that one of the
# version strings does not agree with (tools/versions), before it builds
# anything; and the PGXN archive that make dist writes (git archive of HEAD,
# which test/run makes and names in IDEMPOTENCY_DIST) unpacks into
# idempotency-X.Y.Z/ and builds with `make` alone, with the pg_config first
# in PATH, as PGXN's client and its users build it.
#
# Runs from the repository root (prove's working directory under test/run).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

my $tmp = PostgreSQL::Test::Utils::tempdir();

sub slurp_text
{
	my ($file) = @_;
	open my $in, '<', $file or die "$file: $!";
	local $/;
	return scalar <$in>;
}

sub run_in
{
	my ($dir, @command) = @_;
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run(\@command, '>', \$out, '2>', \$err,
		init => sub { chdir $dir or die "chdir $dir: $!" });
	return ($ok, "$out$err");
}

my ($version) = slurp_text('idempotency.control') =~ /^default_version\s*=\s*'([^']+)'/m;

# ------------------------------------------------------------ the version check

my ($ok, $output) = run_in('.', 'tools/versions');
ok($ok, "every version string is the control file's $version") or diag($output);
like($output, qr/all \d+ version strings are \Q$version\E/, 'tools/versions says so');

# A copy of the tree whose Python package says another version.
my $copy = "$tmp/copy";
system("mkdir '$copy' && tar -cf - --exclude=./tmp_check --exclude=./results --exclude=./output_iso "
	  . "--exclude=./dist --exclude='*.o' --exclude='*.so' . | tar -C '$copy' -xf -") == 0
  or die "copy: $?";
my $pyproject = "$copy/middleware/python/pyproject.toml";
my $text = slurp_text($pyproject);
$text =~ s/^version = "\Q$version\E"/version = "9.9.9"/m or die "no version line in $pyproject";
open my $out, '>', $pyproject or die "$pyproject: $!";
print $out $text;
close $out;

($ok, $output) = run_in($copy, 'make', '--no-print-directory', 'release', "VERSION=$version");
ok(!$ok, "make release VERSION=$version fails when pyproject.toml says 9.9.9");
like($output, qr{^BAD\s+middleware/python/pyproject\.toml\s.*9\.9\.9$}m, 'it names the file and what it says');
like($output, qr/1 of \d+ version strings are not \Q$version\E/, 'and counts the one that disagrees');
ok(!-e "$copy/dist", 'it built nothing');

($ok, $output) = run_in($copy, 'make', '--no-print-directory', 'release', 'VERSION=9.9.9');
ok(!$ok, 'make release VERSION=9.9.9 fails where only one file says 9.9.9');
like($output, qr/^ok\s+middleware\/python\/pyproject\.toml/m, 'that file agrees, the others do not');

($ok, $output) = run_in($copy, 'make', '--no-print-directory', 'release');
ok(!$ok && $output =~ /usage: make release VERSION=X\.Y\.Z/, 'make release needs VERSION')
  or diag($output);

# The Python package's own version string, and the one its conformance
# setup checks after installing it, are version strings of the release too.
for my $file ('middleware/python/pg_idempotency/__init__.py', 'middleware/python/conformance/run')
{
	my $path = "$copy/$file";
	my $text = slurp_text($path);
	$text =~ s/"\Q$version\E"/"9.9.9"/ or die "no version in $path";
	open my $out, '>', $path or die "$path: $!";
	print $out $text;
	close $out;
}
($ok, $output) = run_in($copy, 'tools/versions', '9.9.9');
ok(!$ok, 'tools/versions 9.9.9 fails in the copy');
like($output, qr{^ok\s+\Qmiddleware/python/pg_idempotency/__init__.py\E\s.*9\.9\.9$}m,
	"it reads the Python package's __version__");
like($output, qr{^ok\s+\Qmiddleware/python/conformance/run\E\s.*9\.9\.9$}m,
	'and the version its conformance setup expects');

# ------------------------------------------------------------ the PGXN archive

SKIP:
{
	my $archive = $ENV{IDEMPOTENCY_DIST};
	skip 'no PGXN archive: the tree is not a git checkout (make dist is git archive of HEAD)', 6
	  unless $archive;
	is($archive =~ s{.*/}{}r, "idempotency-$version.zip", 'make dist names the archive idempotency-X.Y.Z.zip');
	($ok, $output) = run_in($tmp, 'unzip', '-q', $archive);
	ok($ok, 'unzip unpacks it') or diag($output);
	my $top = "$tmp/idempotency-$version";
	ok(-f "$top/META.json" && -f "$top/idempotency.control" && -f "$top/Makefile",
		"into idempotency-$version/, with META.json, the control file and the Makefile");
	($ok, $output) = run_in($top, 'make');
	ok($ok, 'make alone builds it (pg_config from PATH)') or diag($output);
	ok(-f "$top/idempotency.so", 'the library is built');
	($ok, $output) = run_in($top, 'tools/pgxn-meta');
	ok($ok, "the archive's META.json agrees with its control file") or diag($output);
}

done_testing();
