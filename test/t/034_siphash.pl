# src/siphash.cpp, the keyed hash of the keys' digests, against SipHash-2-4's
# reference test vectors and against OpenSSL's SIPHASH on random keys and
# messages (test/unit/siphash.cpp, built here with the compiler and
# libcrypto the extension builds with).  No server is involved.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Utils;
use Test::More;

my $repo = "$FindBin::RealBin/../..";
my $binary = PostgreSQL::Test::Utils::tempdir() . '/siphash';
my ($out, $err) = ('', '');
my $built = IPC::Run::run(
	[ 'g++', '-std=c++17', '-O2', '-Wall', '-Wextra', '-Werror', "-I$repo/src",
	  "$repo/src/siphash.cpp", "$repo/test/unit/siphash.cpp", '-lcrypto', '-o', $binary ],
	'>', \$out, '2>', \$err);
ok($built, 'test/unit/siphash.cpp builds') or diag($err);
my $ran = IPC::Run::run([$binary], '>', \$out, '2>', \$err);
ok($ran, 'every check passes') or diag($err);
like($out, qr/^(\d+) passed, 0 failed$/m, 'the reference vectors and OpenSSL agree with src/siphash.cpp');
my ($count) = $out =~ /^(\d+) passed/m;
cmp_ok($count // 0, '>=', 4000, 'thousands of inputs were compared');

done_testing();
