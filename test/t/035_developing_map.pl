# doc/developing.md's map is the tree:
#  * every path of the block under "Repository layout" exists, and every
#    source of src/ (*.hpp, *.cpp, *.txt, *.pl), every folder of test/ and
#    every file directly in test/ (its scripts) has a line there;
#  * every C++ file of src/ is in exactly one layer of the table under "Map
#    of the code", which names nothing that is not in src/;
#  * no #include of a src/ header runs back up: a file includes headers of
#    its own layer or of the layers below it (the table lists them from the
#    top).
# A file added without its line fails here, and the message gives the line to
# add and where; and a copy of the tree shows that the check fails on such a
# file, and passes once the line the message gives is added.  Needs no server.
use strict;
use warnings;
use File::Basename qw(basename dirname);
use File::Copy qw(copy);
use File::Path qw(make_path);
use File::Temp qw(tempdir);
use Test::More;

my $doc = 'doc/developing.md';

sub slurp { my ($f) = @_; local (@ARGV, $/) = ($f); return <> }

# "a.{hpp,cpp}" -> ("a.hpp", "a.cpp"); anything else as it is.
sub expand
{
	my ($pattern) = @_;
	return ($pattern) unless $pattern =~ /^(.*)\{([^}]*)\}(.*)$/;
	my ($head, $list, $tail) = ($1, $2, $3);
	return map { expand("$head$_$tail") } split /,/, $list;
}

# The names a pattern with "*" stands for among NAMES.
sub matching
{
	my ($pattern, @names) = @_;
	my $re = join '.*', map { quotemeta } split /\*/, $pattern, -1;
	return grep { /^$re$/ } @names;
}

# The paths of the layout block: [path, line number], directories with a
# trailing "/".  A line that starts in the first column names one or more
# paths, separated by ", ", before its description; the lines that go on
# with a description start with spaces.
sub layout_paths
{
	my ($text) = @_;
	my ($before, $block) = $text =~ /\A(.*?^## Repository layout\n.*?^```\n)(.*?)^```$/ms
	  or return;
	my $number = ($before =~ tr/\n//);
	my @paths;
	for my $line (split /\n/, $block)
	{
		$number++;
		next unless $line =~ /^(\S*[^\s,](?:, \S*[^\s,])*)(?: |$)/;
		push @paths, map { [ $_, $number ] } map { expand($_) } split /, /, $1;
	}
	return @paths;
}

# The layers of the table under "Map of the code": [layer, [file patterns]].
sub layers
{
	my ($text) = @_;
	my ($table) = $text =~ /^## Map of the code\n(.*?)^## /ms or return;
	return map { [ $_->[0], [ map { expand($_) } $_->[1] =~ /`([^`]+)`/g ] ] }
	  map { /^\| ([^|]+?) \| ([^|]+?) \|/ && $1 ne 'Layer' ? [ $1, $2 ] : () }
	  grep { !/^\|---/ } split /\n/, $table;
}

# What doc/developing.md in ROOT gets wrong about the tree in ROOT: one
# message per problem, saying what to change.
sub map_problems
{
	my ($root) = @_;
	my $text = slurp("$root/$doc");
	my @paths = layout_paths($text);
	my @layers = layers($text);
	return ("$doc: found no block under \"## Repository layout\"") unless @paths;
	return ("$doc: found no table under \"## Map of the code\"") unless @layers;
	my @problems;

	# Every path it names exists.
	for (@paths)
	{
		my ($path, $number) = @$_;
		my @found = $path =~ /\*/ ? glob("$root/$path") : grep { -e } "$root/$path";
		next if @found;
		push @problems, "$doc:$number (Repository layout) names $path, which is not in the tree:"
		  . ' correct the line, or remove it';
	}

	# Every source of src/, folder of test/ and file directly in test/ has a
	# line.  A header and its source get one line between them.
	my %named = map { ($_->[0] =~ s{/$}{}r) => 1 } @paths;
	my @sources = map { s{^\Q$root\E/}{}r } glob("$root/src/*.{hpp,cpp,txt,pl}");
	my %unnamed;
	for my $source (grep { !$named{$_} } @sources)
	{
		my ($stem, $ext) = $source =~ /^(.*)\.(\w+)$/;
		push @{ $unnamed{$stem} }, $ext;
	}
	for my $stem (sort keys %unnamed)
	{
		my @exts = sort { $b cmp $a } @{ $unnamed{$stem} };    # hpp before cpp
		my $line = @exts > 1 ? "$stem.{" . join(',', @exts) . '}' : "$stem.$exts[0]";
		push @problems,
		  join(', ', map { "$stem.$_" } @exts)
		  . " has no line in $doc: add, to the block under \"## Repository layout\", among"
		  . " the src/ lines,\n    $line"
		  . (' ' x (max(2, 24 - length $line))) . '<what it holds>';
	}
	for my $entry (sort map { s{^\Q$root\E/}{}r } glob("$root/test/*"))
	{
		next if $named{$entry};
		my $line = -d "$root/$entry" ? "$entry/" : $entry;
		push @problems,
		  "$line has no line in $doc: add, to the block under \"## Repository layout\", among"
		  . " the test/ lines,\n    $line"
		  . (' ' x (max(2, 24 - length $line))) . '<what it '
		  . (-d "$root/$entry" ? 'holds' : 'does') . '>';
	}

	# Every C++ file of src/ is in one layer, and each layer's files exist.
	my @cxx = map { basename($_) } grep { /\.(?:hpp|cpp)$/ } @sources;
	my %layer_of;
	for my $layer (@layers)
	{
		my ($name, $patterns) = @$layer;
		for my $pattern (@$patterns)
		{
			my @files = $pattern =~ /\*/ ? matching($pattern, @cxx) : grep { $_ eq $pattern } @cxx;
			push @problems, "$doc (Map of the code), layer $name: $pattern is not in src/:"
			  . ' correct it, or remove it'
			  unless @files;
			push @{ $layer_of{$_} }, $name for @files;
		}
	}
	my %new;
	for my $file (@cxx)
	{
		my $in = $layer_of{$file} // [];
		if (@$in > 1)
		{
			push @problems, "src/$file is in more than one layer of $doc (Map of the code):"
			  . ' ' . join(', ', @$in) . '; keep it in one';
		}
		elsif (!@$in)
		{
			my ($stem, $ext) = $file =~ /^(.*)\.(\w+)$/;
			push @{ $new{$stem} }, $ext;
		}
	}
	for my $stem (sort keys %new)
	{
		my @exts = sort { $b cmp $a } @{ $new{$stem} };
		my $name = @exts > 1 ? "$stem.{" . join(',', @exts) . '}' : "$stem.$exts[0]";
		push @problems,
		  join(', ', map { "src/$stem.$_" } @exts)
		  . " is in no layer of $doc: add `$name` to the Files of its layer in the table"
		  . ' under "## Map of the code" (the layers are listed from the top; a file calls'
		  . ' those below its own)';
	}
	return @problems;
}

# Every #include of a src/ header in ROOT's src/ that names a file of a
# higher layer than the including file's, as "src/FILE -> HEADER".
sub upward_includes
{
	my ($root) = @_;
	my @layers = layers(slurp("$root/$doc"));
	my @cxx = map { basename($_) } glob("$root/src/*.{hpp,cpp}");
	my %rank;
	for my $i (0 .. $#layers)
	{
		for my $pattern (@{ $layers[$i][1] })
		{
			$rank{$_} //= $i for ($pattern =~ /\*/ ? matching($pattern, @cxx) : ($pattern));
		}
	}
	my @up;
	for my $file (sort @cxx)
	{
		next unless defined $rank{$file};
		for my $header (slurp("$root/src/$file") =~ /^\s*#\s*include\s+"([^"\/]+)"/mg)
		{
			push @up, "src/$file -> $header"
			  if defined $rank{$header} && $rank{$header} < $rank{$file};
		}
	}
	return @up;
}

sub max { my ($x, $y) = @_; return $x > $y ? $x : $y; }

my $text = slurp($doc);
ok(layout_paths($text) >= 50, "$doc has the Repository layout block, with its paths");
ok(layers($text) >= 6, "$doc has the table of layers");
my @problems = map_problems('.');
is(scalar(@problems), 0, "$doc names every source, test folder and test script, and nothing else")
  or diag(join("\n", @problems));
my @up = upward_includes('.');
is(scalar(@up), 0, "no #include in src/ runs up a layer of the map in $doc")
  or diag(join("\n", @up));

# A skeleton of the tree: every path the layout names, every source of src/
# and every entry of test/, as empty files and folders.
my $copy = tempdir(CLEANUP => 1);
sub touch
{
	my ($path) = @_;
	make_path(dirname("$copy/$path"));
	open my $f, '>', "$copy/$path" or die "$path: $!";
	close $f;
}
make_path("$copy/doc");
copy($doc, "$copy/$doc") or die "copy $doc: $!";
for my $path ((map { $_->[0] =~ /\*/ ? glob($_->[0]) : $_->[0] } layout_paths($text)),
	glob('src/*.{hpp,cpp,txt,pl}'), glob('test/*'))
{
	if ($path =~ m{/$} || -d $path) { make_path("$copy/$path"); }
	elsif (!-e "$copy/$path") { touch($path); }
}
@problems = map_problems($copy);
is(scalar(@problems), 0, 'a skeleton of the tree passes the check') or diag(join("\n", @problems));

# A new source pair, a test folder and a test script without their lines fail,
# and the messages give the lines to add.
touch($_) for qw(src/keyed_hash.hpp src/keyed_hash.cpp test/new_script);
make_path("$copy/test/new_folder");
@problems = map_problems($copy);
is(scalar(@problems), 4, 'a new source pair, test folder and test script are four problems')
  or diag(join("\n", @problems));
my $all = join("\n", @problems);
like($all, qr{^src/keyed_hash\.hpp, src/keyed_hash\.cpp has no line .*"## Repository layout".*\n    src/keyed_hash\.\{hpp,cpp\}  +<what it holds>$}m,
	'the source pair: the layout line to add');
like($all, qr{^src/keyed_hash\.hpp, src/keyed_hash\.cpp is in no layer .*add `keyed_hash\.\{hpp,cpp\}` to the Files of its layer}m,
	'the source pair: the layer to add it to');
like($all, qr{^test/new_folder/ has no line .*\n    test/new_folder/ +<what it holds>$}m, 'the test folder: its line');
like($all, qr{^test/new_script has no line .*\n    test/new_script +<what it does>$}m, 'the test script: its line');

# Following the messages makes the check pass again.
my $fixed = slurp("$copy/$doc");
my @lines = map { /^    (\S+ +<what it (?:holds|does)>)$/m ? $1 : () } @problems;
$fixed =~ s{^(\.ci/run .*\n)}{join('', map { "$_\n" } @lines) . $1}me;
$fixed =~ s{^(\| Storage \| [^|]*?) \|}{$1, `keyed_hash.{hpp,cpp}` |}m;
open my $out, '>', "$copy/$doc" or die "$doc: $!";
print $out $fixed;
close $out or die "$doc: $!";
@problems = map_problems($copy);
is(scalar(@problems), 0, 'with the lines the messages give, the check passes')
  or diag(join("\n", @problems));

# An #include of a higher layer's header is found: a claims file that
# included the expiry worker's would run back up.
open my $claims, '>', "$copy/src/claims.cpp" or die "claims.cpp: $!";
print $claims qq{#include "claims.hpp"\n#include "worker.hpp"\n#include "store.hpp"\n};
close $claims or die "claims.cpp: $!";
is_deeply([ upward_includes($copy) ], ['src/claims.cpp -> worker.hpp'],
	'an #include that runs up a layer is found, and one that runs down is not');

# A path the map names that is gone fails, naming the line.
unlink("$copy/src/unsettled.cpp") or die "unlink: $!";
@problems = map_problems($copy);
like(join("\n", @problems), qr{^\Q$doc\E:\d+ \(Repository layout\) names src/unsettled\.cpp, which is not in the tree}m,
	'a file the layout names that is gone fails');
like(join("\n", @problems), qr{layer Claims: unsettled\.cpp is not in src/}m,
	'a file a layer names that is gone fails');

done_testing();
