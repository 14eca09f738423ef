# One list of error codes (src/errcodes.txt) feeds the C++ constants, every
# middleware package's SQLSTATE map and doc/reference.md's table, and one
# protocol (src/protocol.txt) what the middleware packages share (answers,
# defaults, option names, route rules, SQL) and middleware/README.md's tables:
# the files generated from them are what they give (src/protocol.pl), the
# documentation agrees with them, no source defines a SQLSTATE of its own, and
# the check notices a file, a table or a rule that drifted.  Needs no server.
use strict;
use warnings;
use File::Copy qw(copy);
use File::Path qw(make_path);
use File::Temp qw(tempdir);
use IPC::Run;
use Test::More;

sub check
{
	my ($root) = @_;
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ 'perl', "$root/src/protocol.pl", '--check' ], '>', \$out, '2>', \$err);
	return ($ok, "$out$err");
}

my ($ok, $output) = check('.');
ok($ok, 'the generated files, doc/reference.md and middleware/README.md agree with src/errcodes.txt and src/protocol.txt') or diag($output);

# Every IK code of the list is used somewhere, by its constant's name.
my $sources = join '', map { slurp($_) } grep { !/errcodes\.hpp$/ } glob('src/*.cpp src/*.hpp');
open my $list, '<', 'src/errcodes.txt' or die "src/errcodes.txt: $!";
my @ik = map { /^(IK\w{3})\s+(\w+)/ ? [ $1, $2 ] : () } <$list>;
ok(@ik >= 7, 'the list names the extension\'s own codes');
for my $code (@ik)
{
	like($sources, qr/\b$code->[1]\b/, "$code->[0] ($code->[1]) is used by the extension");
}
my @defined = grep { !/errcodes\.hpp$/ && slurp($_) =~ /MAKE_SQLSTATE\(/ } glob('src/*.cpp src/*.hpp');
is_deeply(\@defined, [], 'no source file defines a SQLSTATE outside src/errcodes.hpp');

# The check can fail: a copy whose Node map and documentation drifted.
my $copy = tempdir(CLEANUP => 1);
for my $file (qw(src/errcodes.txt src/protocol.txt src/protocol.pl src/errcodes.hpp doc/reference.md
	middleware/README.md), glob('middleware/*/protocol.* middleware/*/*/protocol.* middleware/*/src/main/java/*/*/Protocol.java'))
{
	make_path("$copy/" . ($file =~ s{/[^/]+$}{}r));
	copy($file, "$copy/$file") or die "copy $file: $!";
}
ok((check($copy))[0], 'a faithful copy passes the check');
my $map = "$copy/middleware/node/protocol.js";
my $text = slurp($map) =~ s/\[409,/[400,/r;
write_file($map, $text);
($ok, $output) = check($copy);
ok(!$ok && $output =~ m{middleware/node/protocol\.js}, 'a hand-edited map fails the check');
write_file($map, slurp('middleware/node/protocol.js'));
my $readme = "$copy/middleware/README.md";
write_file($readme, slurp($readme) =~ s/^(\| `scope_per_route` \| )`scopePerRoute`/$1`perRoute`/mr);
($ok, $output) = check($copy);
like($output, qr/scope_per_route in node is "perRoute /, 'an option table that drifted fails the check');
write_file($readme, slurp($readme) =~ s/^(\|.*\| )413( \| The request body is too large \|)$/${1}400$2/mr);
($ok, $output) = check($copy);
like($output, qr/"The request body is too large" is 400, not 413/, 'an answer table that drifted fails the check');
write_file($readme, slurp('middleware/README.md'));
my $protocol = "$copy/src/protocol.txt";
write_file($protocol, slurp($protocol) =~ s/^(colon\s+)\[\{\}\](\s+)-$/$1\\{$2-/mr);
($ok, $output) = check($copy);
like($output, qr{the colon pattern /orders\{/:id\} becomes}, 'a route rule that breaks an example fails the check');
write_file($protocol, slurp('src/protocol.txt'));
my $doc = "$copy/doc/reference.md";
write_file($doc, slurp($doc) =~ s/^\| IK003 \|(.*)\| 409, with `Retry-After` \|$/| IK003 |$1| 500 |/mr);
($ok, $output) = check($copy);
like($output, qr/answers IK003 with "500"/, 'a documentation table that drifted fails the check');

done_testing();

sub slurp { my ($f) = @_; local (@ARGV, $/) = ($f); return <> }

sub write_file
{
	my ($f, $text) = @_;
	open my $out, '>', $f or die "$f: $!";
	print $out $text;
	close $out or die "$f: $!";
}
