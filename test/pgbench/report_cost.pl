#!/usr/bin/perl
# The cost benchmark's report (test/pgbench/cost): from its raw counts, the
# table per transaction and the same-run ratios, with each workload's change
# of instructions against a previous run when one is given.
#   perl report_cost.pl [--gate] --margin PERCENT [--previous OLD.tsv]
#        --label NAME=TEXT... --ratio NUM:DEN[:gate[=RATIO]]... COUNTS.tsv
# COUNTS.tsv: a settings line (#), a header, then per workload its name, the
# two run lengths and, for each count, the short run's then the long run's
# (cost's tsv_header names them).  A figure per transaction is (long - short)
# / (long transactions - short transactions).
# Exit status 3 when --gate is given and a gated ratio is over its goal (1, or
# RATIO) times 1 + margin.
use strict;
use warnings;
use Getopt::Long;

my ($gate, $margin, $previous_file, @label_args, @ratio_args) = (0, 0.5, undef);
GetOptions('gate' => \$gate, 'margin=f' => \$margin, 'previous=s' => \$previous_file,
           'label=s' => \@label_args, 'ratio=s' => \@ratio_args)
    or die "usage: report_cost.pl [--gate] --margin P [--previous F] --label N=T... --ratio N:D[:gate[=R]]... F\n";
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
my $ratio_format = "%-32s %12s %9s  %-10s %s\n";
printf $ratio_format, 'ratio', 'instructions', 'WAL B', 'goal', 'result';
my $missed = 0;
for my $spec (@ratio_args) {
    my ($num, $den, $gated) = split /:/, $spec;
    my ($n, $d) = ($rows->{$num}, $rows->{$den});
    next unless $n && $d;
    my $ratio = $n->{instructions} / $d->{instructions};
    my $wal = $d->{wal_bytes} > 0 ? number($n->{wal_bytes} / $d->{wal_bytes}, 3) : '-';
    my ($goal, $result) = ('none', '-');
    if ($gated) {
        # "gate" holds the ratio to 1, "gate=X" to X, each with the margin.
        my ($target) = $gated =~ /^gate(?:=([0-9.]+))?$/ or die "$spec: gate or gate=RATIO\n";
        my $limit = ($target // 1) * (1 + $margin / 100);
        $goal = '<= ' . number($limit, 3);
        if ($ratio <= $limit) {
            $result = 'PASS';
        } else {
            $result = $gate ? 'FAIL' : 'MISS';
            $missed = 1;
        }
    }
    printf $ratio_format, "$num / $den", number($ratio, 3), $wal, $goal, $result;
}
if ($missed) {
    printf "\nthe gate (each ratio marked <= its goal: instructions per transaction, margin %s%% for deterministic noise) %s\n",
        $margin, $gate ? 'FAILED' : 'would fail (GATE=1 makes it fail the run)';
}
exit($gate && $missed ? 3 : 0);
