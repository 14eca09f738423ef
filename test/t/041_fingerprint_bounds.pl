# A request body's fingerprint costs memory and stack in proportion to the
# body, whatever it says (issue 41), and the digest's SHA-256 context never
# outlives an error.
#
# Memory.  0.4.0 wrote each JSON number out in full: a 36 kB
# application/json body of 4,000 numbers 1e131000 took a backend to 1.03 GB
# (VmHWM) in request_hash_body, an 81 kB one to 2.1 GB and 54000, and
# request_hash(jsonb) of the same document did the same.  Each body below is
# hashed by a fresh backend, which reads its own peak resident size (VmHWM in
# /proc/self/status: the kernel's high-water mark, whatever ulimit or
# work_mem say, and freed memory included) before and after; the growth must
# stay within a bound of a few MB plus a small multiple of the body.
# Measured on PostgreSQL 15: 0.1 to 1.3 MB for every body here; 0.4.0 grew by
# 1,016 MB for the 36 kB body and the 71 kB object, 126 MB for 4,000 numbers
# 1e-16383, and failed with 54000 on the 81 kB one.
#
# Stack.  0.4.0's request_hash_body failed with 54001 on a body nested too
# deep for the JSON parser (repeat('[', 20000), valid JSON or not).  With
# max_stack_depth at its minimum, 100kB, deep bodies of every kind must hash,
# by their bytes beyond depth 128 and by their value up to it.
#
# Errors.  An encoding longer than the digest's 4 kB buffer is hashed through
# PostgreSQL's SHA-256 context (common/cryptohash.h), which the resource owner
# frees when an error longjmps out.  A backend cancels itself
# (pg_cancel_backend of its own pid, whose signal arrives before the call
# returns) just before each hash; the hash notices the cancel after its first
# buffer went to the context, so each call fails with 57014 while the context
# exists.  20,000 such calls of each kind must leave the backend's RssAnon
# flat: a context leaked per call would add about 200 bytes each, 12 MB in
# all.  (A body is streamed only when it starts with the reserved prefix,
# which the bytes rule tags; any other is hashed in one call.)
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IdempotencyTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = new_node('fingerprint', conf => ['autovacuum = off']);
my $db = 'postgres';

sub query { return $node->safe_psql($db, shift); }

# The output of SQL that the fixed code runs and 0.4.0's may fail; undef,
# with psql's error shown, when it fails.
sub answer
{
	my ($ret, $out, $err) = $node->psql($db, shift);
	diag($err) if $ret != 0;
	return $ret == 0 ? $out : undef;
}

query(<<'SQL');
CREATE EXTENSION idempotency;

-- The bodies, built once: 0.4.0 wrote each of their numbers out in full
-- (1e131000 as 131,001 digits, 1e-16383 as 16,385 characters).
CREATE TABLE bodies (name text PRIMARY KEY, body bytea NOT NULL);
INSERT INTO bodies
SELECT 'numbers-36k', convert_to('[' || string_agg('1e131000', ',') || ']', 'UTF8')
  FROM generate_series(1, 4000)
UNION ALL
SELECT 'numbers-81k', convert_to('[' || string_agg('1e131000', ',') || ']', 'UTF8')
  FROM generate_series(1, 9000)
UNION ALL
SELECT 'object-numbers', convert_to('{' || string_agg(format('"k%s":-1e131000', g), ',') || '}', 'UTF8')
  FROM generate_series(1, 4000) AS g
UNION ALL
SELECT 'small-numbers', convert_to('[' || string_agg('1e-16383', ',') || ']', 'UTF8')
  FROM generate_series(1, 4000)
UNION ALL
SELECT 'tiny', convert_to('[1]', 'UTF8');
CREATE TABLE documents AS SELECT name, convert_from(body, 'UTF8')::jsonb AS doc FROM bodies;
SQL

# The backend's peak resident size, in kB.
my $vm_hwm = q{SELECT substring(pg_read_file('/proc/self/status') FROM 'VmHWM:\s+(\d+) kB')};

# Hashes one stored body or document ($call: the SQL expression, of
# body or doc) in a fresh backend; returns the growth of its peak, in bytes.
# The warm-up makes the same call on a tiny body first, so that the
# catalogs and the plan are in place before the peak is read.
sub peak_growth
{
	my ($table, $call, $name) = @_;
	my $out = answer(qq{
		SELECT ($call) IS NOT NULL FROM $table WHERE name = 'tiny';
		$vm_hwm;
		SELECT ($call) IS NOT NULL FROM $table WHERE name = '$name';
		$vm_hwm;
	});
	my ($warm, $before, $hashed, $after) = split /\n/, $out // '';
	return undef unless ok(defined $out && $hashed eq 't', "$call of $name: hashed");
	return ($after - $before) * 1024;
}

for my $case (
	[ 'bodies', q{request_hash_body('application/json', body)} ],
	[ 'documents', q{request_hash(doc)} ])
{
	my ($table, $call) = @$case;
	for my $name (qw(numbers-36k numbers-81k object-numbers small-numbers))
	{
		my $size = query("SELECT length(body) FROM bodies WHERE name = '$name'");
		my $bound = 4 * 1024 * 1024 + 32 * $size;
		my $growth = peak_growth($table, $call, $name);
		next unless defined $growth;
		note(sprintf('%s of %s (%d bytes): peak %+.1f MB (bound %.1f MB)',
				$call, $name, $size, $growth / 2**20, $bound / 2**20));
		cmp_ok($growth, '<=', $bound,
			"$call of $name: the backend's peak grows by at most 4 MB + 32 x the body");
	}
}

# The digests are the rule's (sql/fingerprint.sql pins the rule itself):
# the body by its value, as the document.
is( answer(q{
		SELECT count(*) FROM bodies JOIN documents USING (name)
		 WHERE request_hash_body('application/json', body) = request_hash(doc)}),
	'5',
	'each body hashes as its document');

# Stack: deep bodies, valid JSON and not, under the smallest max_stack_depth.
query(<<'SQL');
CREATE TABLE deep_bodies (name text PRIMARY KEY, content_type text NOT NULL, body bytea NOT NULL,
                          by_value boolean NOT NULL);
INSERT INTO deep_bodies VALUES
    ('20,000 [', 'application/json', convert_to(repeat('[', 20000), 'UTF8'), false),
    ('20,000 [ then ]', 'application/json',
     convert_to(repeat('[', 20000) || repeat(']', 20000), 'UTF8'), false),
    ('20,000 {"a": then }', 'application/problem+json',
     convert_to(repeat('{"a":', 20000) || '1' || repeat('}', 20000), 'UTF8'), false),
    ('200,000 [ then ]', 'application/json',
     convert_to(repeat('[', 200000) || repeat(']', 200000), 'UTF8'), false),
    ('mixed, 10,000 then garbage', 'application/json',
     convert_to(repeat('[{"a":', 10000) || 'x', 'UTF8'), false),
    ('129 [ then ]', 'application/json', convert_to(repeat('[', 129) || repeat(']', 129), 'UTF8'), false),
    ('128 [ then ]', 'application/json', convert_to(repeat('[', 128) || repeat(']', 128), 'UTF8'), true),
    ('128 {"a": then }', 'application/json',
     convert_to(repeat('{"a":', 128) || '1' || repeat('}', 128), 'UTF8'), true),
    ('20,000 [ in a string', 'application/json', convert_to('["' || repeat('[', 20000) || '"]', 'UTF8'), true);
-- A document far deeper than 128 (request_hash(jsonb) has no bound): made
-- at the default max_stack_depth, hashed below at the smallest.
CREATE TABLE deep_documents AS
SELECT (repeat('[', 5000) || repeat(']', 5000))::jsonb AS doc;
SQL

my ($ret, $out, $err) = $node->psql(
	$db, q{
	SET max_stack_depth = '100kB';
	SELECT string_agg(format('%s: %s', name,
	           CASE request_hash_body(content_type, body)
	               WHEN request_hash(body) THEN 'bytes'
	               WHEN request_hash_jsonb(convert_from(body, 'UTF8')) THEN 'value'
	           END), '; ' ORDER BY name)
	  FROM deep_bodies WHERE NOT by_value;
	SELECT string_agg(format('%s: %s', name,
	           CASE request_hash_body(content_type, body)
	               WHEN request_hash(body) THEN 'bytes'
	               ELSE 'value'
	           END), '; ' ORDER BY name)
	  FROM deep_bodies WHERE by_value;
	SELECT request_hash(doc) IS NOT NULL FROM deep_documents;
	SHOW max_stack_depth;
	}, on_error_stop => 1);
is($ret, 0, 'deep bodies hash with max_stack_depth = 100kB') or diag($err);
my @lines = split /\n/, $out;
is( $lines[0],
	'129 [ then ]: bytes; 20,000 [: bytes; 20,000 [ then ]: bytes; 20,000 {"a": then }: bytes; '
	  . '200,000 [ then ]: bytes; mixed, 10,000 then garbage: bytes',
	'deeper than 128: by the bytes, never an error');
is( $lines[1],
	'128 [ then ]: value; 128 {"a": then }: value; 20,000 [ in a string: value',
	'at most 128 deep: by the value, the parser within the smallest stack');
is($lines[2], 't', 'request_hash(jsonb) walks a document 5,000 deep without recursion');
is($lines[3], '100kB', 'at the smallest max_stack_depth');
# Those at most 128 deep hashed by value (computed at the default stack depth).
is( query(q{
		SELECT count(*) FROM deep_bodies
		 WHERE by_value AND request_hash_body(content_type, body)
		                    = request_hash_jsonb(convert_from(body, 'UTF8'))}),
	'3',
	'the bodies read by value hash as their documents');

# Errors: a cancel inside the hashing, after the SHA-256 context exists.
query(<<'SQL');
CREATE TABLE fingerprint_samples (label text PRIMARY KEY, rss_anon bigint, contexts bigint);
CREATE FUNCTION fingerprint_sample(label text) RETURNS void LANGUAGE sql AS $$
    INSERT INTO fingerprint_samples
    SELECT label,
           substring(pg_read_file('/proc/self/status') FROM 'RssAnon:\s+(\d+) kB')::bigint * 1024,
           (SELECT sum(total_bytes) FROM pg_backend_memory_contexts)
$$;
-- Each hash of an encoding longer than the 4 kB buffer, in a backend that
-- has just cancelled itself; returns how many were cancelled inside.
CREATE FUNCTION cancelled_hashes(n integer) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    doc jsonb := jsonb_build_array(repeat('x', 5000));
    body bytea := convert_to('idempotency.request_hash.' || repeat('x', 5000), 'UTF8');
    part text := repeat('x', 5000);
    h request_hash;
    cancelled integer := 0;
BEGIN
    FOR i IN 1 .. n LOOP
        BEGIN
            h := request_hash(CASE WHEN pg_cancel_backend(pg_backend_pid()) THEN doc END);
        EXCEPTION WHEN query_canceled THEN cancelled := cancelled + 1;
        END;
        BEGIN
            h := request_hash_body('text/plain',
                                   CASE WHEN pg_cancel_backend(pg_backend_pid()) THEN body END);
        EXCEPTION WHEN query_canceled THEN cancelled := cancelled + 1;
        END;
        BEGIN
            h := request_hash('a', CASE WHEN pg_cancel_backend(pg_backend_pid()) THEN part END);
        EXCEPTION WHEN query_canceled THEN cancelled := cancelled + 1;
        END;
    END LOOP;
    RETURN cancelled;
END
$$;
SQL
my $calls = 20_000;
($ret, $out, $err) = $node->psql(
	$db, qq{
	SELECT cancelled_hashes(2000);
	SELECT fingerprint_sample('warm');
	SELECT cancelled_hashes(2000);
	SELECT fingerprint_sample('before');
	SELECT cancelled_hashes($calls);
	SELECT fingerprint_sample('after');
	}, on_error_stop => 1);
# (0.4.0 had no check for a cancel inside the call: it came after the call,
# outside the exception block, and failed the function.)
is($ret, 0, 'each cancel was caught inside its call') or diag($err);
SKIP:
{
	skip 'the cancelled hashes failed', 3 if $ret != 0;
	is((split /\n/, $out)[4], 3 * $calls,
		'every hash was cancelled inside the call, with its SHA-256 context');
	my ($rss, $contexts) = split /\|/, query(q{
		SELECT a.rss_anon - b.rss_anon, a.contexts - b.contexts
		  FROM fingerprint_samples AS a, fingerprint_samples AS b
		 WHERE a.label = 'after' AND b.label = 'before'});
	note(sprintf('%d cancelled hashes: RssAnon %+d bytes, memory contexts %+d bytes',
			3 * $calls, $rss, $contexts));
	cmp_ok($rss, '<', 1024 * 1024, 'no libcrypto context outlives its cancelled hash (RssAnon)');
	cmp_ok($contexts, '<', 64 * 1024, 'nor its memory context');
}

done_testing();
