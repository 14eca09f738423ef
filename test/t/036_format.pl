# The C++ is laid out as .clang-format says: make format-check passes on the
# tree, and fails, naming the file, on a copy with one line laid out otherwise.
# Needs no server.  Another clang-format major lays some lines out otherwise,
# so the check runs where Debian 12's clang-format 14 is (the host that CI
# tests PostgreSQL 15 on), and says it skipped elsewhere (the chroots).
use strict;
use warnings;
use File::Copy qw(copy);
use File::Path qw(make_path);
use File::Temp qw(tempdir);
use IPC::Run;
use Test::More;

my $version = `clang-format --version 2>/dev/null` // '';
plan skip_all => "the layout is clang-format 14's; this is " . ($version =~ /version (\d+)/ ? "clang-format $1" : 'no clang-format')
  unless $version =~ /version 14\./;

sub format_check
{
	my ($root) = @_;
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ 'make', '-s', '-C', $root, 'format-check' ], '>', \$out, '2>', \$err);
	return ($ok, "$out$err");
}

my ($ok, $output) = format_check('.');
ok($ok, 'make format-check: every C++ file is laid out as .clang-format says') or diag($output);

# The check can fail: a copy of the tree with one line laid out otherwise.
my $copy = tempdir(CLEANUP => 1);
for my $file ('Makefile', '.clang-format', glob('src/*.cpp src/*.hpp'))
{
	make_path("$copy/" . ($file =~ m{^(.*)/} ? $1 : '.'));
	copy($file, "$copy/$file") or die "copying $file: $!";
}
open my $out, '>>', "$copy/src/settings.cpp" or die "src/settings.cpp: $!";
print $out "int   misplaced_spaces ;\n";
close $out;
($ok, $output) = format_check($copy);
ok(!$ok, 'make format-check fails on a file laid out otherwise');
like($output, qr/settings\.cpp/, '... naming the file');

done_testing();
