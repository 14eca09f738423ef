-- Baseline: the business INSERT alone, autocommit, with a fresh UUID-shaped
-- key.  It checks nothing: an error is its only failure.
\set hi random(1, 4611686018427387903)
\set lo random(0, 4611686018427387903)
INSERT INTO orders (idem_key, item, qty) VALUES (bench_fresh_key(:hi, :lo), 'book', 1);
