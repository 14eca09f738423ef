# request_hash_body's JSON rule applies only in a UTF8 database
# (doc/reference.md, "The JSON rule").  A JSON body is UTF-8 text, and jsonb
# holds strings in the database encoding: 0.5.0 before this check read a
# body in the database encoding, so that in a LATIN1 database the UTF-8
# bytes of ["é"] (c3 a9, read as the two LATIN1 characters Ã ©) were the
# document ["\u00c3\u00a9"] -- two different requests, one fingerprint --
# and bodies whose \u escapes the encoding cannot hold were refused instead
# of hashed: ["\u20ac"] with 22P05 in LATIN1, ["\u00e9"] with 0A000 in
# SQL_ASCII.  In any encoding but UTF8 every body now takes the bytes rule:
# its digest is request_hash(bytea) of it (the reserved prefix aside), and
# nothing is refused.  In the UTF8 database the JSON rule is unchanged.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('encodings');
for my $encoding (qw(LATIN1 SQL_ASCII))
{
	my $db = lc $encoding;
	$node->safe_psql('postgres',
		"CREATE DATABASE $db TEMPLATE template0 ENCODING '$encoding' LOCALE 'C'");
}

# The bodies, as bytes (the SQL stays ASCII whatever the client encoding).
my %bodies = (
	'["é"] in UTF-8' => q{'\x5b22c3a9225d'::bytea},
	'["\u00c3\u00a9"]' => q{convert_to('["\u00c3\u00a9"]', 'SQL_ASCII')},
	'["\u00e9"]' => q{convert_to('["\u00e9"]', 'SQL_ASCII')},
	'["\u20ac"]' => q{convert_to('["\u20ac"]', 'SQL_ASCII')},
	'{"a":1,"b":2}' => q{convert_to('{"a":1,"b":2}', 'SQL_ASCII')},
	'{"b":2, "a":1.0}' => q{convert_to('{"b":2, "a":1.0}', 'SQL_ASCII')},
	'reserved prefix' => q{convert_to('idempotency.request_hash.x', 'SQL_ASCII')});

# In $db: which rule request_hash_body('application/json', body) took for
# each body -- "bytes" when its digest is request_hash(bytea) of the body,
# "tagged bytes" when it is the reserved prefix's tag over the body, else
# the digest -- or the error's SQLSTATE.
sub rules
{
	my ($db) = @_;
	my %rule;
	for my $name (sort keys %bodies)
	{
		my $body = $bodies{$name};
		my ($ret, $out, $err) = $node->psql($db, qq{
			\\set VERBOSITY sqlstate
			SELECT CASE request_hash_body('application/json', b)
			           WHEN request_hash(b) THEN 'bytes'
			           WHEN request_hash(convert_to('idempotency.request_hash.bytes', 'SQL_ASCII')
			                             || '\\x00'::bytea || b) THEN 'tagged bytes'
			           ELSE request_hash_body('application/json', b)::text
			       END
			  FROM (SELECT $body AS b) AS body});
		($rule{$name}) = $ret == 0 ? $out : $err =~ /ERROR:\s+(\w{5})/;
	}
	return %rule;
}

for my $db (qw(latin1 sql_ascii))
{
	$node->safe_psql($db, 'CREATE EXTENSION idempotency');
	my %rule = rules($db);
	for my $name (sort keys %bodies)
	{
		my $expected = $name eq 'reserved prefix' ? 'tagged bytes' : 'bytes';
		is($rule{$name}, $expected, "$db: $name takes the bytes rule");
	}
	# request_hash(jsonb) hashes the document it is given, as before.
	is( $node->safe_psql($db, q{SELECT request_hash('{"b":2, "a":1.0}'::jsonb) = request_hash('{"a":1,"b":2}'::jsonb)}),
		't', "$db: request_hash(jsonb) still hashes a document by its value");
}

# The distinct bodies that LATIN1 made one.
my ($e_utf8, $e_escaped) = @bodies{ '["é"] in UTF-8', '["\u00c3\u00a9"]' };
is( $node->safe_psql('latin1', qq{
		SELECT request_hash_body('application/json', $e_utf8)
		     = request_hash_body('application/json', $e_escaped)}),
	'f', 'latin1: ["é"] in UTF-8 and ["\u00c3\u00a9"] are two fingerprints');

# The UTF8 database: the JSON rule, as before.
$node->safe_psql('postgres', 'CREATE EXTENSION idempotency');
my %rule = rules('postgres');
my %utf8 = map { $_ => $node->safe_psql('postgres', qq{
		SELECT request_hash_jsonb(convert_from($bodies{$_}, 'UTF8'))::text}) }
  grep { $_ ne 'reserved prefix' } keys %bodies;
for my $name (sort keys %utf8)
{
	is($rule{$name}, $utf8{$name}, "postgres (UTF8): $name takes the JSON rule");
}
is($rule{'reserved prefix'}, 'tagged bytes', 'postgres (UTF8): the reserved prefix takes the tagged bytes rule');
is($utf8{'["é"] in UTF-8'}, $utf8{'["\u00e9"]'}, 'postgres (UTF8): ["é"] and ["\u00e9"] are one document');
isnt($utf8{'["é"] in UTF-8'}, $utf8{'["\u00c3\u00a9"]'}, 'postgres (UTF8): ["\u00c3\u00a9"] is another');
is($utf8{'{"a":1,"b":2}'}, $utf8{'{"b":2, "a":1.0}'}, 'postgres (UTF8): key order, spacing and 1.0 do not matter');

done_testing();
