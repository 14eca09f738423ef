#!/usr/bin/perl
# Writes the files generated from src/errcodes.txt (the SQLSTATEs: the C++ constants, and
# each middleware package's map) and src/protocol.txt (what the middleware packages
# share: answers, options, SQL, route patterns, outcomes), or with --check, checks that
# they, doc/reference.md's table of errors and middleware/README.md's tables of answers
# and options agree with the two lists.  Run from anywhere:
#   perl src/protocol.pl           (make protocol)
#   perl src/protocol.pl --check   (make protocol-check; test/t/032_errcodes.pl)
# A new middleware package adds its file to %targets.
use strict;
use warnings;
use File::Basename qw(dirname);
use File::Spec;

my $root = File::Spec->rel2abs(dirname(__FILE__) . '/..');
my $list = 'src/errcodes.txt';
my $protocol_file = 'src/protocol.txt';
my $generated = "Generated from $protocol_file and $list by src/protocol.pl (make protocol): do not edit.";
my @packages = qw(node python go java);

# ------------------------------------------------------------------ src/errcodes.txt

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

# ------------------------------------------------------------------ src/protocol.txt

# The sections: name -> [rows of columns] for a table, or the text of an "sql" section.
# Each table's number of columns (the last takes the rest of the line).
my %columns = (
	'answers' => 5, 'details' => 2, 'split drivers' => 2, 'sqlstate outcomes' => 2,
	'outcomes' => 2, 'observability' => 4, 'options' => 6, 'spellings' => 4,
	'deprecated' => 4, 'constants' => 2, 'representation headers' => 2, 'route rules' => 3, 'route examples' => 3);

sub read_protocol
{
	my (%tables, %sql, $section);
	open my $in, '<', "$root/$protocol_file" or die "$protocol_file: $!\n";
	while (my $line = <$in>)
	{
		if ($line =~ /^\[(.+)\]\s*$/)
		{
			$section = $1;
			die "$protocol_file:$.: unknown section [$section]\n"
			  unless $columns{$section} || $section =~ /^sql \w+$/;
			die "$protocol_file:$.: section [$section] twice\n"
			  if exists $tables{$section} || exists $sql{$section};
			if ($section =~ /^sql (\w+)$/) { $sql{$1} = '' } else { $tables{$section} = [] }
			next;
		}
		next if $line =~ /^\s*#/;
		if (defined $section && $section =~ /^sql (\w+)$/)
		{
			$sql{$1} .= $line;
			next;
		}
		next if $line =~ /^\s*$/;
		die "$protocol_file:$.: a line outside any section\n" unless defined $section;
		chomp $line;
		my @cells = split ' ', $line, $columns{$section};
		die "$protocol_file:$.: [$section] has $columns{$section} columns: \"$line\"\n"
		  unless @cells == $columns{$section};
		$cells[-1] =~ s/\s+$//;
		push @{ $tables{$section} }, [ map { $_ eq '-' ? '' : $_ } @cells ];
	}
	die "$protocol_file: no section [$_]\n" for grep { !$tables{$_} } sort keys %columns;
	s/^\s+|\s+$//g for values %sql;
	my $server = delete $sql{server_transaction} // die "$protocol_file: no [sql server_transaction]\n";
	s/\{server_transaction\}/$server/g for values %sql;
	return { %tables, sql => \%sql };
}

# A statement's text and its parameters' names in order of first use.
sub statement
{
	my ($text) = @_;
	my (@order, %seen);
	while ($text =~ /(?<=[\s(,]):([a-z_]\w*)/g)
	{
		push @order, $1 unless $seen{$1}++;
	}
	return ($text, @order);
}

# The statement in a driver's style: "dollar" ($1, a name's number each time it comes),
# "format" (%s, once per use) or "question" (?, once per use); returns the text and the
# names in the order the driver binds them.
sub bound
{
	my ($text, $style) = @_;
	my (undef, @order) = statement($text);
	my %number = map { $order[$_] => $_ + 1 } 0 .. $#order;
	my @uses;
	$text =~ s{(?<=[\s(,]):([a-z_]\w*)}{
		push @uses, $1;
		$style eq 'dollar' ? "\$$number{$1}" : $style eq 'format' ? '%s' : '?'
	}ge;
	return ($text, $style eq 'dollar' ? @order : @uses);
}

# The output columns of a SELECT: each item's alias, or its last name.
sub select_columns
{
	my ($text) = @_;
	my ($items) = $text =~ /^SELECT\s+(.*?)\s+FROM\s/s or return ();
	my ($depth, $item, @columns) = (0, '');
	for my $c (split //, $items . ',')
	{
		$depth++ if $c eq '(';
		$depth-- if $c eq ')';
		if ($c eq ',' && $depth == 0)
		{
			my ($name) = $item =~ /\bAS\s+(\w+)\s*$/ ? ($1) : $item =~ /(\w+)\s*$/;
			push @columns, $name;
			$item = '';
			next;
		}
		$item .= $c;
	}
	return @columns;
}

sub camel { my ($s) = @_; $s =~ s/_(\w)/\u$1/g; return $s }
sub pascal { return ucfirst camel(@_) }
sub upper { return uc $_[0] }

# A Go name: PascalCase with Go's initialisms.
sub goname
{
	my $name = pascal(@_);
	$name =~ s/(Utf8|Json|Sql|Ttl|Sha256|Http|Url|Id)(?=[A-Z]|$)/\U$1/g;
	return $name;
}

# A Go const or var block, "=" aligned as gofmt aligns it.
sub go_block
{
	my ($kind, @specs) = @_;
	my $width = 0;
	for (@specs) { $width = length $_->[0] if length $_->[0] > $width }
	return ("$kind (", (map { sprintf "\t%-*s = %s", $width, @$_ } @specs), ')');
}

# An option's name in a package, or undef where the package lacks it.
sub spelling
{
	my ($p, $package, $option) = @_;
	my ($name, undef, undef, $has) = @$option;
	return undef unless $has eq 'all' || grep { $_ eq $package } split /,/, $has;
	for my $s (@{ $p->{spellings} })
	{
		return $s->[2] if $s->[0] eq $package && $s->[1] eq $name;
	}
	return $package eq 'python' ? $name : $package eq 'go' ? pascal($name) : camel($name);
}

sub options_of
{
	my ($p, $package) = @_;
	return grep { defined spelling($p, $package, $_) } @{ $p->{options} };
}

# The outcome of an answer of the SQLSTATE map.
sub sqlstate_outcome
{
	my ($p, $status) = @_;
	my ($row) = grep { $_->[0] == $status } @{ $p->{'sqlstate outcomes'} };
	die "$protocol_file: [sqlstate outcomes] has no outcome for status $status\n" unless $row;
	return $row->[1];
}

# A rule's replacement in a language: "$1" becomes its group syntax.
sub replacement
{
	my ($text, $language) = @_;
	return $text =~ s/\$(\d)/\\g<$1>/gr if $language eq 'python';
	return $text =~ s/\$(\d)/\${$1}/gr if $language eq 'go';
	return $text;
}

# Checks the protocol's own consistency, and its route rules against its examples.
sub check_protocol
{
	my ($p) = @_;
	my @problems;
	my %outcome = map { $_->[0] => 1 } @{ $p->{outcomes} };
	my %answer = map { $_->[0] => 1 } @{ $p->{answers} };
	for my $a (@{ $p->{answers} })
	{
		push @problems, "$protocol_file: answer $a->[0] has the outcome $a->[3], not one of [outcomes]"
		  unless $outcome{ $a->[3] };
		push @problems, "$protocol_file: answer $a->[0]: retry is \"-\" or \"row\""
		  unless $a->[2] eq '' || $a->[2] eq 'row';
	}
	push @problems, "$protocol_file: [details] names $_->[0], not an answer"
	  for grep { !$answer{ $_->[0] } } @{ $p->{details} };
	push @problems, "$protocol_file: [sqlstate outcomes] names $_->[1], not an outcome"
	  for grep { !$outcome{ $_->[1] } } @{ $p->{'sqlstate outcomes'} };
	my %drivers = map { $_->[0] => 1 } @{ $p->{'split drivers'} };
	push @problems, "$protocol_file: [split drivers] has no line for $_" for grep { !$drivers{$_} } @packages;
	my %option = map { $_->[0] => 1 } @{ $p->{options} };
	push @problems, "$protocol_file: [deprecated] names $_->[2], not an option"
	  for grep { !$option{ $_->[2] } } @{ $p->{deprecated} };
	for my $e (@{ $p->{'route examples'} })
	{
		my ($syntax, $pattern, $canonical) = @$e;
		my $got = $pattern;
		my @rules = grep { $_->[0] eq $syntax } @{ $p->{'route rules'} };
		push @problems, "$protocol_file: no route rules for the syntax $syntax" unless @rules;
		for my $r (@rules)
		{
			my ($re, $with) = ($r->[1], $r->[2]);
			$got =~ s{$re}{ my @g = map { $_ // '' } ($1, $2); $with =~ s/\$(\d)/$g[$1 - 1]/gr }ge;
		}
		push @problems, "$protocol_file: the $syntax pattern $pattern becomes $got, not $canonical"
		  unless $got eq $canonical;
	}
	for my $name (sort keys %{ $p->{sql} })
	{
		my ($text, @params) = statement($p->{sql}{$name});
		push @problems, "$protocol_file: [sql $name] has no parameter" unless @params;
	}
	return @problems;
}

# ------------------------------------------------------------------ the generated files

sub quoted { my ($s, $q) = @_; $s =~ s/([\\$q])/\\$1/g; return "$q$s$q" }

sub cpp
{
	my ($codes) = @_;
	my @lines = ("// Generated from $list by src/protocol.pl (make protocol): do not edit.", '#pragma once', '',
		'#include "pg.hpp"', '', 'namespace idempotency', '{', '',
		'// The extension\'s own SQLSTATEs (class IK), documented in doc/reference.md, "Errors".');
	for my $c (grep { $_->[1] ne '-' } @$codes)
	{
		my $chars = join ', ', map { "'$_'" } split //, $c->[0];
		push @lines, "constexpr int $c->[1] = MAKE_SQLSTATE($chars);";
	}
	return join("\n", @lines, '', '} // namespace idempotency', '');
}

# A value in JavaScript.
sub js
{
	my ($v) = @_;
	return 'null' unless defined $v;
	return '[' . join(', ', map { js($_) } @$v) . ']' if ref $v eq 'ARRAY';
	return $$v if ref $v eq 'SCALAR';    # a literal
	return $v if $v =~ /^-?\d+$/;
	return quoted($v, "'");
}

# An option's default as a value: undef, a number, a list, a boolean (as a literal).
sub default_of
{
	my ($option, $true, $false) = @_;
	my ($name, $kind, $default) = @$option;
	return undef if $default eq '';
	return [ split /,/, $default ] if $kind eq 'list';
	return \($default eq 'true' ? $true : $false) if $kind eq 'boolean';
	return $default;
}

sub node
{
	my ($codes, $p) = @_;
	my @l = ("'use strict';", "// $generated",
		'// What every package shares (middleware/README.md); the framework-neutral core (core.js)',
		'// reads it.', 'const f = Object.freeze;', '', 'module.exports = f({');
	push @l, '  // name -> [HTTP status, problem title, Retry-After ("row": the begin row\'s), outcome,',
	  '  // detail or null]; "{name}" in a title or a detail is filled in.', '  ANSWERS: f({';
	push @l, sprintf("    %s: f([%d, %s, %s, %s, %s]),", camel($_->[0]), $_->[1], js($_->[4]),
		js($_->[2] || undef), js($_->[3]), js(detail_of($p, $_->[0]))) for @{ $p->{answers} };
	push @l, '  }),', sprintf('  SPLIT_DRIVERS: %s,', js(split_drivers($p, 'node'))),
	  '  // SQLSTATE -> [HTTP status, problem title, Retry-After seconds or null, outcome] for every',
	  '  // answer other than 500 (src/errcodes.txt; doc/reference.md, "Errors").', '  SQLSTATE_ANSWERS: f({';
	for my $c (answers(@$codes))
	{
		my $key = $c->[0] =~ /^[A-Za-z_]\w*$/ ? $c->[0] : quoted($c->[0], "'");
		push @l, sprintf("    %s: f([%d, %s, %s, %s]),", $key, $c->[2], js($c->[4]), $c->[3] // 'null',
			js(sqlstate_outcome($p, $c->[2])));
	}
	push @l, '  }),', sprintf('  OUTCOMES: f(%s),', js([ map { $_->[0] } @{ $p->{outcomes} } ])),
	  '  // kind -> [name, unit or null]', '  OBSERVABILITY: f({';
	push @l, sprintf("    %s: f([%s, %s]),", camel($_->[1] =~ s/^idempotency\.//r =~ s/\./_/gr . "_$_->[0]"),
		js($_->[1]), js($_->[2] || undef)) for @{ $p->{observability} };
	push @l, '  }),', '  // The options and their defaults; null: none.', '  DEFAULTS: f({';
	push @l, sprintf("    %s: %s,", spelling($p, 'node', $_), js(default_of($_, 'true', 'false')))
	  for options_of($p, 'node');
	push @l, '  }),', '  // Old spellings still taken: old -> option.', '  DEPRECATED: f({';
	push @l, sprintf("    %s: %s,", $_->[1], js(spelling($p, 'node', option($p, $_->[2]))))
	  for grep { $_->[0] eq 'node' } @{ $p->{deprecated} };
	push @l, '  }),', sprintf('  REPRESENTATION_HEADERS: f(%s),', js([ map { $_->[0] } @{ $p->{'representation headers'} } ])),
	  '  CONSTANTS: f({';
	push @l, sprintf("    %s: %s,", camel($_->[0]), js($_->[1])) for @{ $p->{constants} };
	push @l, '  }),', '  // syntax -> [[regular expression, replacement], ...], applied in order, globally.',
	  '  ROUTE_RULES: f({';
	for my $syntax (syntaxes($p))
	{
		push @l, "    $syntax: f([";
		push @l, sprintf("      f([%s, %s]),", js($_->[1]), js(replacement($_->[2], 'node')))
		  for grep { $_->[0] eq $syntax } @{ $p->{'route rules'} };
		push @l, '    ]),';
	}
	push @l, '  }),', '  ROUTE_EXAMPLES: f([';
	push @l, sprintf("    f(%s),", js($_)) for @{ $p->{'route examples'} };
	push @l, '  ]),', '  // The statements: their text and the names of $1, $2, ...', '  SQL: f({';
	for my $name (sort keys %{ $p->{sql} })
	{
		my ($text, @params) = bound($p->{sql}{$name}, 'dollar');
		push @l, "    $name: f({", "      text: `$text`,", sprintf('      params: f(%s),', js(\@params)), '    }),';
	}
	push @l, '  }),', '});', '';
	return join "\n", @l;
}

# An answer's detail, or undef.
sub detail_of
{
	my ($p, $name) = @_;
	my ($row) = grep { $_->[0] eq $name } @{ $p->{details} };
	return $row ? $row->[1] : undef;
}

sub option
{
	my ($p, $name) = @_;
	my ($o) = grep { $_->[0] eq $name } @{ $p->{options} };
	return $o;
}

sub split_drivers
{
	my ($p, $package) = @_;
	my ($row) = grep { $_->[0] eq $package } @{ $p->{'split drivers'} };
	return $row->[1];
}

sub syntaxes
{
	my ($p) = @_;
	my %seen;
	return grep { !$seen{$_}++ } map { $_->[0] } @{ $p->{'route rules'} };
}

# A value in Python.
sub py
{
	my ($v) = @_;
	return 'None' unless defined $v;
	if (ref $v eq 'ARRAY')
	{
		return '(' . join(', ', map { py($_) } @$v) . (@$v == 1 ? ',)' : ')');
	}
	return $$v if ref $v eq 'SCALAR';
	return $v if $v =~ /^-?\d+$/;
	return quoted($v, '"');
}

my %py_type = (text => 'str', boolean => 'bool', list => 'Tuple[str, ...]', seconds => 'Optional[float]',
	interval => 'Optional[str]', bytes => 'int');

sub python
{
	my ($codes, $p) = @_;
	my @l = ('"""What every package shares (middleware/README.md), which the framework-neutral core',
		'(core.py) reads.', '', $generated, '"""', 'from typing import Dict, NamedTuple, Optional, Tuple', '', '',
		'class Answer(NamedTuple):',
		'    """One of the protocol\'s answers; "{name}" in its title or detail is filled in."""',
		'    status: int', '    title: str', '    retry: Optional[str]  # "row": the begin row\'s retry_after_seconds',
		'    outcome: str', '    detail: Optional[str]', '', '');
	push @l, sprintf('%s = Answer(%d, %s, %s, %s, %s)', upper($_->[0]), $_->[1], py($_->[4]), py($_->[2] || undef),
		py($_->[3]), py(detail_of($p, $_->[0]))) for @{ $p->{answers} };
	push @l, '', sprintf('SPLIT_DRIVERS = %s', py(split_drivers($p, 'python'))), '',
	  '# SQLSTATE -> (HTTP status, problem title, Retry-After seconds or None, outcome) for every',
	  '# answer other than 500 (src/errcodes.txt; doc/reference.md, "Errors").',
	  'SQLSTATE_ANSWERS: Dict[str, Tuple[int, str, Optional[int], str]] = {';
	push @l, sprintf('    "%s": (%d, %s, %s, %s),', $_->[0], $_->[2], py($_->[4]), $_->[3] // 'None',
		py(sqlstate_outcome($p, $_->[2]))) for answers(@$codes);
	push @l, '}', sprintf('OUTCOMES = %s', py([ map { $_->[0] } @{ $p->{outcomes} } ])), '',
	  '# kind_name -> (name, unit or None)', 'OBSERVABILITY: Dict[str, Tuple[str, Optional[str]]] = {';
	push @l, sprintf('    %s: (%s, %s),', py($_->[1] =~ s/^idempotency\.//r =~ s/\./_/gr . "_$_->[0]"), py($_->[1]),
		py($_->[2] || undef)) for @{ $p->{observability} };
	push @l, '}', '', '# The options and their defaults.';
	for my $o (options_of($p, 'python'))
	{
		next if $o->[1] eq 'hook';
		push @l, sprintf('DEFAULT_%s: %s = %s', upper($o->[0]), $py_type{ $o->[1] }, py(default_of($o, 'True', 'False')));
	}
	push @l, sprintf('OPTIONS = %s', py([ map { spelling($p, 'python', $_) } options_of($p, 'python') ])),
	  '# Old spellings still taken: old -> option.', 'DEPRECATED: Dict[str, str] = {';
	push @l, sprintf('    %s: %s,', py($_->[1]), py(spelling($p, 'python', option($p, $_->[2]))))
	  for grep { $_->[0] eq 'python' } @{ $p->{deprecated} };
	push @l, '}', '';
	push @l, sprintf('%s = %s', upper($_->[0]), py($_->[1])) for @{ $p->{constants} };
	push @l, sprintf('REPRESENTATION_HEADERS: Tuple[str, ...] = %s', py([ map { $_->[0] } @{ $p->{'representation headers'} } ]));
	push @l, '', '# syntax -> ((regular expression, replacement), ...), applied in order, globally.',
	  'ROUTE_RULES: Dict[str, Tuple[Tuple[str, str], ...]] = {';
	for my $syntax (syntaxes($p))
	{
		push @l, "    \"$syntax\": (";
		push @l, sprintf('        (r%s, r%s),', pyraw($_->[1]), pyraw(replacement($_->[2], 'python')))
		  for grep { $_->[0] eq $syntax } @{ $p->{'route rules'} };
		push @l, '    ),';
	}
	push @l, '}', 'ROUTE_EXAMPLES: Tuple[Tuple[str, str, str], ...] = (';
	push @l, sprintf('    %s,', py($_)) for @{ $p->{'route examples'} };
	push @l, ')', '', '# The statements: their text, the names of their %s in order, and the columns of a', '# SELECT\'s row.';
	for my $name (sort keys %{ $p->{sql} })
	{
		my ($text, @params) = bound($p->{sql}{$name}, 'format');
		push @l, sprintf('SQL_%s = """%s"""', upper($name), $text), sprintf('SQL_%s_PARAMS = %s', upper($name), py(\@params)),
		  sprintf('SQL_%s_COLUMNS = %s', upper($name), py([ select_columns($p->{sql}{$name}) ]));
	}
	return join "\n", @l, '';
}

# A raw string literal's quoted text (the patterns have no quote of this kind).
sub pyraw
{
	my ($s) = @_;
	die "$protocol_file: a route rule has a double quote: $s\n" if $s =~ /"/;
	return "\"$s\"";
}

# A value in Go.
sub golang
{
	my ($v) = @_;
	return 'nil' unless defined $v;
	return '[]string{' . join(', ', map { golang($_) } @$v) . '}' if ref $v eq 'ARRAY';
	return $$v if ref $v eq 'SCALAR';
	return $v if $v =~ /^-?\d+$/;
	return quoted($v, '"');
}

sub go
{
	my ($codes, $p) = @_;
	my @l = ('// Code generated from src/protocol.txt and src/errcodes.txt by src/protocol.pl (make protocol). DO NOT EDIT.',
		'', '// What every package shares (middleware/README.md), which the package\'s core reads.', '',
		'package idempotency', '',
		'// protocolAnswer is an answer of the package\'s own, or of the SQLSTATE map: its status, its',
		'// problem\'s title and detail ("{name}" in them is filled in), its Retry-After (retryAfter',
		'// seconds; retryRow: the begin row\'s) and its outcome.', 'type protocolAnswer struct {',
		"\tstatus     int", "\ttitle      string", "\tdetail     string", "\tretryAfter int", "\tretryRow   bool",
		"\toutcome    string", '}', '');
	push @l, go_block('var', map { [ 'answer' . goname($_->[0]), sprintf('protocolAnswer{status: %d, title: %s, %sretryRow: %s, outcome: %s}',
		$_->[1], golang($_->[4]), defined detail_of($p, $_->[0]) ? 'detail: ' . golang(detail_of($p, $_->[0])) . ', ' : '',
		$_->[2] eq 'row' ? 'true' : 'false', golang($_->[3])) ] } @{ $p->{answers} });
	push @l, '', '// What the split\'s detail tells this package\'s users to change.',
	  'const splitDrivers = ' . golang(split_drivers($p, 'go'));
	push @l, '', '// sqlstateAnswers maps a SQLSTATE to the answer other than 500 (src/errcodes.txt;',
	  '// doc/reference.md, "Errors").', 'var sqlstateAnswers = map[string]protocolAnswer{';
	push @l, sprintf("\t\"%s\": {status: %d, title: %s, retryAfter: %d, outcome: %s},", $_->[0], $_->[2], golang($_->[4]),
		$_->[3] // 0, golang(sqlstate_outcome($p, $_->[2]))) for answers(@$codes);
	push @l, '}', '', '// The outcomes a request comes to.';
	push @l, go_block('const', map { [ 'outcome' . goname($_->[0]), golang($_->[0]) ] } @{ $p->{outcomes} });
	push @l, '', '// The names of spans, attributes and metrics (and their units): exported, for the',
	  '// module middleware/go/otel and for an OnOutcome hook\'s own counter.';
	my @names;
	for my $o (@{ $p->{observability} })
	{
		my $id = goname($o->[1] =~ s/^idempotency\.//r =~ s/\./_/gr) . goname($o->[0]);
		push @names, [ "Name$id", golang($o->[1]) ];
		push @names, [ "Unit$id", golang($o->[2]) ] if $o->[2] ne '';
	}
	push @l, go_block('const', @names);
	push @l, '', '// The options\' defaults (Options, whose zero values stand for them).';
	my @defaults;
	for my $o (options_of($p, 'go'))
	{
		next if $o->[1] eq 'hook' || $o->[2] eq '' || $o->[1] eq 'boolean';
		my $value = golang(default_of($o));
		$value = "int64($value)" if $o->[1] eq 'bytes';
		push @defaults, [ 'default' . spelling($p, 'go', $o), $value ];
	}
	push @l, go_block('var', @defaults);
	push @l, '', '// optionNames are Options\' fields that the protocol names.',
	  'var optionNames = ' . golang([ map { spelling($p, 'go', $_) } options_of($p, 'go') ]), '';
	push @l, go_block('const', map { [ camel($_->[0]), golang($_->[1]) ] } @{ $p->{constants} });
	push @l, '', '// representationHeaders are stored and replayed whatever StoredHeaders names.',
	  'var representationHeaders = ' . golang([ map { $_->[0] } @{ $p->{'representation headers'} } ]);
	push @l, '', '// routeRules maps a syntax to its [regular expression, replacement] pairs, applied in',
	  '// order, globally.', 'var routeRules = map[string][][2]string{';
	for my $syntax (syntaxes($p))
	{
		push @l, "\t\"$syntax\": {";
		push @l, sprintf("\t\t{`%s`, `%s`},", $_->[1], replacement($_->[2], 'go'))
		  for grep { $_->[0] eq $syntax } @{ $p->{'route rules'} };
		push @l, "\t},";
	}
	push @l, '}', '', '// routeExamples are [syntax, pattern, canonical] triples that routeRules must give.',
	  'var routeExamples = [][3]string{';
	push @l, sprintf("\t{%s},", join ', ', map { "`$_`" } @$_) for @{ $p->{'route examples'} };
	push @l, '}', '', '// The statements: their text, the names of $1, $2, ... and the columns of a SELECT\'s row.';
	for my $name (sort keys %{ $p->{sql} })
	{
		my ($text, @params) = bound($p->{sql}{$name}, 'dollar');
		push @l, "const ${name}SQL = `$text`", '', sprintf('var %sParams = %s', $name, golang(\@params));
		my @columns = select_columns($p->{sql}{$name});
		push @l, sprintf('var %sColumns = %s', $name, golang(\@columns)) if @columns > 1;
		push @l, '';
	}
	return join "\n", @l;
}

# A value in Java.
sub java_value
{
	my ($v) = @_;
	return 'null' unless defined $v;
	return 'List.of(' . join(', ', map { java_value($_) } @$v) . ')' if ref $v eq 'ARRAY';
	return $$v if ref $v eq 'SCALAR';
	return "${v}L" if $v =~ /^-?\d{7,}$/;
	return $v if $v =~ /^-?\d+$/;
	return quoted($v, '"');
}

sub java
{
	my ($codes, $p) = @_;
	my @l = ("// $generated", 'package org.pgidempotency;', '', 'import java.util.List;', 'import java.util.Map;', '',
		'/** What every package shares (middleware/README.md), which the filter\'s core reads. */',
		'final class Protocol {',
		'    /**', '     * An answer of the package\'s own, or of the SQLSTATE map.', '     *',
		'     * @param status the HTTP status', '     * @param title the problem\'s title ("{name}" is filled in)',
		'     * @param detail the problem\'s detail ("{name}" is filled in), or null',
		'     * @param retryAfter Retry-After seconds, or null', '     * @param retryRow whether Retry-After is the begin row\'s',
		'     * @param outcome what the request came to', '     */',
		'    record Spec(int status, String title, String detail, Integer retryAfter, boolean retryRow,',
		'        String outcome) {}', '');
	for my $a (@{ $p->{answers} })
	{
		push @l, sprintf('    static final Spec %s = new Spec(%d, %s,', upper($a->[0]), $a->[1], java_value($a->[4])),
		  sprintf('        %s, null, %s, %s);', java_value(detail_of($p, $a->[0])), $a->[2] eq 'row' ? 'true' : 'false',
			java_value($a->[3]));
	}
	push @l, '', sprintf('    static final String SPLIT_DRIVERS = %s;', java_value(split_drivers($p, 'java'))), '',
	  '    /** SQLSTATE -> its answer, for every answer other than 500 (src/errcodes.txt). */',
	  '    static final Map<String, Spec> SQLSTATE_ANSWERS = Map.ofEntries(';
	my @answers = answers(@$codes);
	for my $i (0 .. $#answers)
	{
		my $c = $answers[$i];
		push @l, sprintf('        Map.entry("%s", new Spec(%d, %s, null, %s, false, %s))%s', $c->[0], $c->[2],
			java_value($c->[4]), $c->[3] // 'null', java_value(sqlstate_outcome($p, $c->[2])), $i == $#answers ? ');' : ',');
	}
	push @l, '', sprintf('    static final List<String> OUTCOMES = %s;', java_value([ map { $_->[0] } @{ $p->{outcomes} } ])), '',
	  '    // The names of spans, attributes and metrics (and their units).';
	for my $o (@{ $p->{observability} })
	{
		my $id = upper($o->[0] . '_' . ($o->[1] =~ s/^idempotency\.//r =~ s/\./_/gr));
		push @l, sprintf('    static final String %s = %s;', $id, java_value($o->[1]));
		push @l, sprintf('    static final String %s_UNIT = %s;', $id, java_value($o->[2])) if $o->[2] ne '';
	}
	push @l, '', '    // The options\' defaults.';
	for my $o (options_of($p, 'java'))
	{
		next if $o->[1] eq 'hook';
		my %type = (text => 'String', boolean => 'boolean', list => 'List<String>', seconds => 'String',
			interval => 'String', bytes => 'long');
		push @l, sprintf('    static final %s DEFAULT_%s = %s;', $type{ $o->[1] }, upper($o->[0]),
			java_value(default_of($o, 'true', 'false')));
	}
	push @l, sprintf('    /** The builder\'s methods the protocol names. */'),
	  sprintf('    static final List<String> OPTIONS = %s;', java_value([ map { spelling($p, 'java', $_) } options_of($p, 'java') ])), '';
	push @l, sprintf('    static final String %s = %s;', upper($_->[0]), java_value($_->[1])) for @{ $p->{constants} };
	push @l, '    /** Stored and replayed whatever storedHeaders names. */',
	  sprintf('    static final List<String> REPRESENTATION_HEADERS = %s;', java_value([ map { $_->[0] } @{ $p->{'representation headers'} } ]));
	push @l, '', '    /** syntax -> [regular expression, replacement] pairs, applied in order, globally. */',
	  '    static final Map<String, List<List<String>>> ROUTE_RULES = Map.of(';
	my @syntaxes = syntaxes($p);
	for my $i (0 .. $#syntaxes)
	{
		my @rules = grep { $_->[0] eq $syntaxes[$i] } @{ $p->{'route rules'} };
		push @l, "        \"$syntaxes[$i]\", List.of(";
		push @l, sprintf('            List.of(%s, %s)%s', java_value($rules[$_][1]), java_value(replacement($rules[$_][2], 'java')),
			$_ == $#rules ? ')' . ($i == $#syntaxes ? ');' : ',') : ',') for 0 .. $#rules;
	}
	push @l, '', '    /** [syntax, pattern, canonical] triples that ROUTE_RULES must give. */',
	  '    static final List<List<String>> ROUTE_EXAMPLES = List.of(';
	my @examples = @{ $p->{'route examples'} };
	push @l, sprintf('        %s%s', java_value($examples[$_]), $_ == $#examples ? ');' : ',') for 0 .. $#examples;
	push @l, '', '    // The statements: their text, the names of their ? in order, and the columns of a SELECT\'s row.';
	for my $name (sort keys %{ $p->{sql} })
	{
		my ($text, @params) = bound($p->{sql}{$name}, 'question');
		push @l, sprintf('    static final String SQL_%s = """', upper($name)), (map { "        $_" } split /\n/, $text),
		  '        """;', sprintf('    static final List<String> SQL_%s_PARAMS = %s;', upper($name), java_value(\@params));
		my @columns = select_columns($p->{sql}{$name});
		push @l, sprintf('    static final List<String> SQL_%s_COLUMNS = %s;', upper($name), java_value(\@columns)) if @columns > 1;
	}
	return join("\n", @l, '', '    private Protocol() {}', '}', '');
}

my %targets = (
	'src/errcodes.hpp' => \&cpp,
	'middleware/node/protocol.js' => \&node,
	'middleware/python/pg_idempotency/protocol.py' => \&python,
	'middleware/go/protocol.go' => \&go,
	'middleware/java/src/main/java/org/pgidempotency/Protocol.java' => \&java,
);

# ------------------------------------------------------------------ the documentation

# The rows of a table in a section of a Markdown file: [cells] each, without the outer
# pipes, the header and the separator.
sub table
{
	my ($file, $heading) = @_;
	open my $in, '<', "$root/$file" or die "$file: $!\n";
	my ($section, @rows) = (0);
	while (my $line = <$in>)
	{
		$section = $line =~ /^\Q$heading\E\s*$/ if $line =~ /^#+ /;
		next unless $section && $line =~ /^\|(.*)\|\s*$/;
		my @cells = map { s/^\s+|\s+$//gr } split /\|/, $1, -1;
		next if $cells[0] =~ /^-+$/;
		push @rows, \@cells;
	}
	shift @rows;    # the header
	return @rows;
}

sub check_reference
{
	my @codes = @_;
	my @rows = map { [ $_->[0], $_->[-1] ] } grep { $_->[0] =~ /^\w{5}$/ } table('doc/reference.md', '## Errors');
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

sub plain { return $_[0] =~ s/`//gr }

# An option's default as middleware/README.md shows it.
sub shown_default
{
	my ($o) = @_;
	my ($kind, $default) = @$o[ 1, 2 ];
	return '—' if $default eq '';
	return join ', ', split /,/, $default if $kind eq 'list';
	return ($default / 1048576) . ' MiB' if $kind eq 'bytes' && $default % 1048576 == 0;
	return $default;
}

# middleware/README.md's tables: every answer (its status and title), and every option
# (its spelling in each package and its default).
sub check_readme
{
	my ($codes, $p) = @_;
	my $file = 'middleware/README.md';
	my @problems;
	my %wanted;
	for my $a (@{ $p->{answers} })
	{
		$wanted{ $a->[4] =~ s/\{header\}/Idempotency-Key/r } = [ $a->[1], $a->[2] ne '' ];
	}
	$wanted{ $_->[4] } = [ $_->[2], defined $_->[3] ] for answers(@$codes);
	my %shown;
	for my $row (table($file, '## Answers'))
	{
		my ($status_cell, $title) = @$row[ -2, -1 ];
		$title = plain($title);
		my ($status) = $status_cell =~ /^(\d{3})/;
		my $want = $wanted{$title};
		$shown{$title} = 1;
		if (!$want)
		{
			push @problems, "$file, \"Answers\": \"$title\" is no answer of $protocol_file or $list";
			next;
		}
		push @problems, "$file, \"Answers\": \"$title\" is $status_cell, not $want->[0]"
		  unless defined $status && $status == $want->[0];
		push @problems, "$file, \"Answers\": \"$title\" " . ($want->[1] ? 'lacks' : 'has') . ' Retry-After'
		  if $want->[1] != ($status_cell =~ /Retry-After/);
	}
	push @problems, "$file, \"Answers\": no row for \"$_\"" for grep { !$shown{$_} } sort keys %wanted;
	my %rows = map { plain($_->[0]) => $_ } table($file, '## Options');
	for my $o (@{ $p->{options} })
	{
		my $row = delete $rows{ $o->[0] };
		if (!$row)
		{
			push @problems, "$file, \"Options\": no row for $o->[0]";
			next;
		}
		for my $i (0 .. $#packages)
		{
			my $want = spelling($p, $packages[$i], $o) // '—';
			my $cell = plain($row->[ $i + 1 ]);
			my $deprecated = join '', map { " ($_->[1] until $_->[3])" }
			  grep { $_->[0] eq $packages[$i] && $_->[2] eq $o->[0] } @{ $p->{deprecated} };
			push @problems, "$file, \"Options\": $o->[0] in $packages[$i] is \"$cell\", not \"$want$deprecated\""
			  unless $cell eq "$want$deprecated";
		}
		my $default = plain($row->[5]);
		push @problems, "$file, \"Options\": $o->[0]'s default is \"$default\", not \"" . shown_default($o) . '"'
		  unless $default eq shown_default($o);
	}
	push @problems, "$file, \"Options\": $_ is no option of $protocol_file" for sort keys %rows;
	return @problems;
}

# ------------------------------------------------------------------ main

my @codes = read_list();
my $protocol = read_protocol();
my @problems = check_protocol($protocol);
die map { "$_\n" } @problems if @problems && !(@ARGV && $ARGV[0] eq '--check');
if (@ARGV && $ARGV[0] eq '--check')
{
	push @problems, check_reference(@codes), check_readme(\@codes, $protocol);
	for my $file (sort keys %targets)
	{
		my $current = do { local (@ARGV, $/) = ("$root/$file"); -e $ARGV[0] ? <> : '' };
		push @problems, "$file is not what $list and $protocol_file give (run make protocol)"
		  unless $current eq $targets{$file}->(\@codes, $protocol);
	}
	print "$_\n" for @problems;
	print 'protocol: ', scalar(@codes), ' SQLSTATEs, ', scalar(@{ $protocol->{answers} }), ' answers, ',
	  scalar(@{ $protocol->{options} }), ' options, ', scalar(keys %{ $protocol->{sql} }), ' statements; ',
	  scalar(keys %targets), ' generated files and the documentation ', (@problems ? 'disagree' : 'agree'), "\n";
	exit(@problems ? 1 : 0);
}
die "usage: $0 [--check]\n" if @ARGV;
for my $file (sort keys %targets)
{
	open my $out, '>', "$root/$file" or die "$file: $!\n";
	print $out $targets{$file}->(\@codes, $protocol);
	close $out or die "$file: $!\n";
	print "wrote $file\n";
}
