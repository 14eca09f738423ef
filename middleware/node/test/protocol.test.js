'use strict';
// The package's reading of src/protocol.txt (protocol.js): the route rules give the
// protocol's examples, the options are the protocol's with their old spellings still
// taken, and a key is read as every package reads it.  No database.
const assert = require('node:assert');
const { test } = require('node:test');
const { settings, canonicalRoute, utf8Text } = require('../core');
const { ROUTE_EXAMPLES, DEFAULTS } = require('../protocol');

test('protocol: the route rules give every canonical pattern of the protocol\'s examples', () => {
  for (const [syntax, pattern, canonical] of ROUTE_EXAMPLES) {
    assert.strictEqual(canonicalRoute(syntax, pattern), canonical, `${syntax} ${pattern}`);
  }
});

test('protocol: the options are the protocol\'s; maxBodyBytes and perRoute still work, with a warning', async () => {
  assert.deepStrictEqual(Object.keys(settings()).filter((name) => name !== 'headerName').sort(),
    Object.keys(DEFAULTS).sort());
  const warnings = [];
  const onWarning = (warning) => warnings.push(warning.code);
  process.on('warning', onWarning);
  try {
    const old = settings({ maxBodyBytes: 10, perRoute: true });
    assert.strictEqual(old.maxRequestBytes, 10);
    assert.strictEqual(old.scopePerRoute, true);
    assert.throws(() => settings({ perRoute: true, scopePerRoute: false }), TypeError);
    assert.throws(() => settings({ maxRequestBytes: '1 MB' }), TypeError);
    assert.throws(() => settings({ perroute: true }), TypeError);
  } finally {
    await new Promise(setImmediate);
    process.off('warning', onWarning);
  }
  assert.deepStrictEqual(warnings.sort(), ['PG_IDEMPOTENCY_MAXBODYBYTES', 'PG_IDEMPOTENCY_PERROUTE']);
});

test('protocol: a key is the header\'s bytes (latin1 from Node\'s parser) read as UTF-8', () => {
  assert.strictEqual(utf8Text(Buffer.from('moved-é-🙂').toString('latin1')), 'moved-é-🙂');
  assert.strictEqual(utf8Text('caf\xe9'), null);
  assert.strictEqual(utf8Text('\ud800'), null);
  assert.strictEqual(utf8Text('dé€'), 'dé€'); // decoded before (a character past U+00FF)
});
