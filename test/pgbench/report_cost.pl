#!/usr/bin/perl
# The cost benchmark's report (test/pgbench/cost): from its raw counts, the
# table per transaction and the same-run ratios, with each workload's change
# of instructions against a previous run when one is given.
#   perl report_cost.pl [--gate] --margin PERCENT [--previous OLD.tsv]
#        --label NAME=TEXT... --ratio NUM:DEN[:GOAL]... --wal-ratio NUM:DEN:GOAL... COUNTS.tsv
# COUNTS.tsv: a settings line (#), a header, then per workload its name, the
# two run lengths and, for each count, the short run's then the long run's
# (cost's tsv_header names them).  A figure per transaction is (long - short)
# / (long transactions - short transactions).
# A ratio with a GOAL (of instructions, or with --wal-ratio of WAL bytes)
# meets it when it is at most GOAL * (1 + margin / 100).
# Exit status 3 when --gate is given and a ratio misses its goal.
use strict;
use warnings;
use Getopt::Long;

my ($gate, $margin, $previous_file, @label_args, @ratio_args, @wal_ratio_args) = (0, 0.5, undef);
GetOptions('gate' => \$gate, 'margin=f' => \$margin, 'previous=s' => \$previous_file,
           'label=s' => \@label_args, 'ratio=s' => \@ratio_args, 'wal-ratio=s' => \@wal_ratio_args)
    or die "usage: report_cost.pl [--gate] --margin P [--previous F] --label N=T... --ratio N:D[:G]... --wal-ratio N:D:G... F\n";
my %labels = map { split /=/, $_, 2 } @label_args;

# Per workload, in file order: a hash of per-transaction figures.
sub per_transaction {
    my ($file) = @_;
    open my $in, '<', $file or die "$file: $!\n";
    my (@order, %rows, @columns);
    while (my $line = <$in>) {
        chomp $line;
        next if $line =~ /^#/ || $line eq '';
        my @fields = split /\t/, $line;
        if ($fields[0] eq 'workload') {
            @columns = @fields;
            next;
        }
        my %raw;
        @raw{@columns} = @fields;
        my $n = $raw{long} - $raw{short};
        my %row;
        for my $column (@columns) {
            next unless $column =~ /^(.*)_long$/;
            $row{$1} = ($raw{$column} - $raw{"${1}_short"}) / $n;
        }
        push @order, $raw{workload};
        $rows{$raw{workload}} = \%row;
    }
    return (\@order, \%rows);
}

my ($order, $rows) = per_transaction($ARGV[0]);
my (undef, $previous) = $previous_file ? per_transaction($previous_file) : (undef, {});

sub number { my ($v, $places) = @_; my $s = sprintf "%.${places}f", $v; $s = '0' if $s =~ /^-0\.?0*$/; $s }

sub thousands {
    my $s = sprintf '%.0f', shift;
    1 while $s =~ s/^(-?\d+)(\d{3})/$1,$2/;
    return $s;
}

# Heap tuples in words: "2 ins + 1 upd (1 HOT)", "-" for none.
sub heap_words {
    my ($r) = @_;
    my @parts;
    push @parts, number($r->{heap_inserted}, 2) . ' ins' if abs($r->{heap_inserted}) >= 0.005;
    if (abs($r->{heap_updated}) >= 0.005) {
        my $upd = number($r->{heap_updated}, 2) . ' upd';
        $upd .= ' (' . number($r->{heap_hot_updated}, 2) . ' HOT)' if abs($r->{heap_hot_updated}) >= 0.005;
        push @parts, $upd;
    }
    push @parts, number($r->{heap_deleted}, 2) . ' del' if abs($r->{heap_deleted}) >= 0.005;
    my $words = @parts ? join(' + ', @parts) : '-';
    $words =~ s/\.00 / /g;
    return $words;
}

my $row_format = "%-18s %12s %9s %10s  %-24s %9s  %-9s %s\n";
printf $row_format, 'workload', 'instructions', 'WAL B', 'WAL recs', 'heap tuples', 'index', 'previous', 'what';
printf $row_format, '', 'per tx', 'per tx', 'per tx', 'per tx', 'per tx', '', '';
for my $w (@$order) {
    my $r = $rows->{$w};
    my $change = '';
    if (my $p = $previous->{$w}) {
        $change = sprintf '%+.2f%%', 100 * ($r->{instructions} - $p->{instructions}) / $p->{instructions};
    }
    printf $row_format, $w, thousands($r->{instructions}), number($r->{wal_bytes}, 1),
        number($r->{wal_records}, 2), heap_words($r), number($r->{index_inserted}, 2), $change,
        $labels{$w} // '';
}

print "\n";
my $ratio_format = "%-34s %-12s %12s  %-10s %s\n";
printf $ratio_format, 'ratio', 'of', 'value', 'goal', 'result';
my $missed = 0;
sub ratio_line {
    my ($spec, $what) = @_;
    my ($num, $den, $goal) = split /:/, $spec;
    my ($n, $d) = ($rows->{$num}, $rows->{$den});
    return unless $n && $d && $d->{$what} > 0;
    my $ratio = $n->{$what} / $d->{$what};
    my ($goal_text, $result) = ('none', '-');
    if (defined $goal) {
        my $limit = $goal * (1 + $margin / 100);
        $goal_text = '<= ' . number($goal, 2);
        if ($ratio <= $limit) {
            $result = 'PASS';
        } else {
            $result = $gate ? 'FAIL' : 'MISS';
            $missed = 1;
        }
    }
    printf $ratio_format, "$num / $den", $what eq 'wal_bytes' ? 'WAL bytes' : 'instructions',
        number($ratio, 3), $goal_text, $result;
}
ratio_line($_, 'instructions') for @ratio_args;
ratio_line($_, 'wal_bytes') for @wal_ratio_args;
if ($missed) {
    printf "\nthe gate (each goal times %s, the margin of %s%% for deterministic noise) %s\n",
        number(1 + $margin / 100, 3), $margin, $gate ? 'FAILED' : 'would fail (GATE=1 makes it fail the run)';
}
exit($gate && $missed ? 3 : 0);
