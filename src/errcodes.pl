#!/usr/bin/perl
# Writes the files generated from src/errcodes.txt (the C++ constants and each
# middleware package's SQLSTATE map), or with --check, checks that they and
# doc/reference.md's table of errors agree with it.  Run from anywhere:
#   perl src/errcodes.pl           (make errcodes)
#   perl src/errcodes.pl --check   (make errcodes-check; test/t/032_errcodes.pl)
# A new middleware package adds its file to %targets.
use strict;
use warnings;
use File::Basename qw(dirname);
use File::Spec;

my $root = File::Spec->rel2abs(dirname(__FILE__) . '/..');
my $list = 'src/errcodes.txt';
my $generated = "Generated from $list by src/errcodes.pl (make errcodes): do not edit.";

# The list: [sqlstate, name, http, retry (undef for none), title (undef for 500)].
sub read_list
{
	my @codes;
	open my $in, '<', "$root/$list" or die "$list: $!\n";
	while (my $line = <$in>)
	{
		next if $line =~ /^\s*(#|$)/;
		my ($code, $name, $http, $retry, $title) =
		  $line =~ /^(\S{5})\s+(\S+)\s+(\d{3})\s+(\S+)\s+(.*?)\s*$/
		  or die "$list:$.: cannot read \"$line\"\n";
		die "$list:$.: $code: an IK code needs a C++ name, another code none\n"
		  if ($code =~ /^IK/) != ($name ne '-');
		die "$list:$.: $code: a 500 has no title or Retry-After, any other answer a title\n"
		  if ($http == 500) != ($title eq '-') || ($http == 500 && $retry ne '-');
		push @codes, [ $code, $name, $http, $retry eq '-' ? undef : $retry,
			$title eq '-' ? undef : $title ];
	}
	return @codes;
}

# The answers middleware gives other than 500, for whole SQLSTATEs.
sub answers { return grep { $_->[0] !~ /x/ && defined $_->[4] } @_ }

sub quoted { my ($s, $q) = @_; $s =~ s/([\\$q])/\\$1/g; return "$q$s$q" }

sub cpp
{
	my @lines = ("// $generated", '#pragma once', '', '#include "pg.hpp"', '',
		'namespace idempotency', '{', '',
		'// The extension\'s own SQLSTATEs (class IK), documented in doc/reference.md, "Errors".');
	for my $c (grep { $_->[1] ne '-' } @_)
	{
		my $chars = join ', ', map { "'$_'" } split //, $c->[0];
		push @lines, "constexpr int $c->[1] = MAKE_SQLSTATE($chars);";
	}
	return join("\n", @lines, '', '} // namespace idempotency', '');
}

sub node
{
	my @lines = ("'use strict';", "// $generated",
		'// SQLSTATE -> [HTTP status, problem title, Retry-After seconds or null] for every',
		'// answer other than 500 (doc/reference.md, "Errors").', 'module.exports = Object.freeze({');
	for my $c (answers(@_))
	{
		my $key = $c->[0] =~ /^[A-Za-z_]\w*$/ ? $c->[0] : quoted($c->[0], "'");
		push @lines, sprintf("  %s: [%d, %s, %s],", $key, $c->[2], quoted($c->[4], "'"),
			$c->[3] // 'null');
	}
	return join("\n", @lines, '});', '');
}

sub python
{
	my @lines = ("\"\"\"SQLSTATE -> (HTTP status, problem title, Retry-After seconds or None) for every",
		'answer other than 500 (doc/reference.md, "Errors").', '', "$generated", '"""',
		'ANSWERS = {');
	for my $c (answers(@_))
	{
		push @lines, sprintf('    "%s": (%d, %s, %s),', $c->[0], $c->[2], quoted($c->[4], '"'),
			$c->[3] // 'None');
	}
	return join("\n", @lines, '}', '');
}

sub go
{
	# Go's convention for a generated file: a line "// Code generated ... DO NOT EDIT."
	my @lines = ('// Code generated from src/errcodes.txt by src/errcodes.pl (make errcodes). DO NOT EDIT.',
		'', 'package idempotency', '',
		'// sqlstateAnswers maps a SQLSTATE to the answer other than 500 (doc/reference.md,',
		'// "Errors"): HTTP status, problem title, Retry-After seconds (0: none).',
		'var sqlstateAnswers = map[string]sqlstateAnswer{');
	for my $c (answers(@_))
	{
		push @lines, sprintf("\t\"%s\": {%d, %s, %d},", $c->[0], $c->[2], quoted($c->[4], '"'),
			$c->[3] // 0);
	}
	return join("\n", @lines, '}', '');
}

sub java
{
	my @lines = ("// $generated", 'package org.pgidempotency;', '', 'import java.util.Map;', '',
		'/** SQLSTATE -> the answer for every answer other than 500 (doc/reference.md, "Errors"). */',
		'final class ErrorCodes {', '    static final Map<String, Answer.Mapped> ANSWERS = Map.ofEntries(');
	my @answers = answers(@_);
	for my $i (0 .. $#answers)
	{
		my $c = $answers[$i];
		push @lines, sprintf('        Map.entry("%s", new Answer.Mapped(%d, %s, %s))%s', $c->[0], $c->[2],
			quoted($c->[4], '"'), $c->[3] // 'null', $i == $#answers ? ');' : ',');
	}
	return join("\n", @lines, '', '    private ErrorCodes() {}', '}', '');
}

my %targets = (
	'middleware/java/src/main/java/org/pgidempotency/ErrorCodes.java' => \&java,
	'src/errcodes.hpp' => \&cpp,
	'middleware/node/errcodes.js' => \&node,
	'middleware/python/pg_idempotency/errcodes.py' => \&python,
	'middleware/go/errcodes.go' => \&go,
);

# The rows of doc/reference.md's "Errors" table: [sqlstate, HTTP cell].
sub documented
{
	my $doc = 'doc/reference.md';
	open my $in, '<', "$root/$doc" or die "$doc: $!\n";
	my ($section, @rows) = (0);
	while (my $line = <$in>)
	{
		$section = $line =~ /^## Errors\s*$/ if $line =~ /^## /;
		next unless $section && $line =~ /^\| (\w{5}) \|/;
		my @cells = split /\s*\|\s*/, $line;
		push @rows, [ $1, $cells[-1] ];
	}
	return @rows;
}

sub check_doc
{
	my @codes = @_;
	my @rows = documented();
	my @problems;
	my $listed = join ' ', map { $_->[0] } @codes;
	my $doc = join ' ', map { $_->[0] } @rows;
	push @problems, "doc/reference.md lists the SQLSTATEs\n  $doc\nbut $list\n  $listed"
	  if $listed ne $doc;
	my %row = map { $_->[0] => $_->[1] } @rows;
	for my $c (@codes)
	{
		my $cell = $row{ $c->[0] } // next;
		my ($status) = $cell =~ /(\d{3})/;
		push @problems, "doc/reference.md answers $c->[0] with \"$cell\", $list with $c->[2]"
		  unless defined $status && $status == $c->[2];
		push @problems, "doc/reference.md: $c->[0] " . ($c->[3] ? 'lacks' : 'has') . ' Retry-After'
		  if defined $c->[3] != ($cell =~ /Retry-After/);
	}
	return @problems;
}

my @codes = read_list();
if (@ARGV && $ARGV[0] eq '--check')
{
	my @problems = check_doc(@codes);
	for my $file (sort keys %targets)
	{
		my $current = do { local (@ARGV, $/) = ("$root/$file"); -e $ARGV[0] ? <> : '' };
		push @problems, "$file is not what $list gives (run make errcodes)"
		  unless $current eq $targets{$file}->(@codes);
	}
	print "$_\n" for @problems;
	print 'errcodes: ', scalar(@codes), ' SQLSTATEs, ', scalar(keys %targets),
	  ' generated files and the documentation ', (@problems ? 'disagree' : 'agree'), "\n";
	exit(@problems ? 1 : 0);
}
die "usage: $0 [--check]\n" if @ARGV;
for my $file (sort keys %targets)
{
	open my $out, '>', "$root/$file" or die "$file: $!\n";
	print $out $targets{$file}->(@codes);
	close $out or die "$file: $!\n";
	print "wrote $file\n";
}
