'use strict';
// The package as npm users get it: `npm pack`, unpacked as `npm install` would (it has
// no dependencies, only peers), loads from its packed files alone and compiles under
// strict TypeScript (test/typed/example.ts); its version is the extension's.
const assert = require('node:assert');
const { execFileSync } = require('node:child_process');
const { mkdirSync, readFileSync, rmSync } = require('node:fs');
const { createRequire } = require('node:module');
const path = require('node:path');
const { test } = require('node:test');

const root = path.join(__dirname, '..');
const typed = path.join(__dirname, 'typed');

test('npm pack: the tarball loads and type-checks under strict TypeScript', () => {
  const modules = path.join(typed, 'node_modules');
  const unpacked = path.join(modules, 'pg-idempotency');
  rmSync(modules, { recursive: true, force: true });
  mkdirSync(unpacked, { recursive: true });
  const tarball = execFileSync('npm', ['pack', '--silent', '--pack-destination', modules], { cwd: root })
    .toString().trim().split('\n').pop();
  execFileSync('tar', ['-xzf', path.join(modules, tarball), '-C', unpacked, '--strip-components=1']);

  const load = createRequire(path.join(typed, 'example.ts'));
  for (const entry of ['pg-idempotency', 'pg-idempotency/express', 'pg-idempotency/fastify']) {
    assert.strictEqual(typeof load(entry)[entry.endsWith('fastify') ? 'fastifyIdempotency' : 'idempotency'] ??
      load(entry).fastifyIdempotency, 'function', entry);
  }
  assert.strictEqual(typeof load('pg-idempotency/node-idempotency').PostgresStorageAdapter, 'function');
  assert.ok(load.resolve('pg-idempotency').startsWith(unpacked), 'the packed copy, not the source');

  try {
    execFileSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', typed], { stdio: 'pipe' });
  } catch (error) {
    assert.fail(`tsc --noEmit failed:\n${error.stdout}${error.stderr}`);
  }
});

test('the package version is the extension\'s', () => {
  const control = readFileSync(path.join(root, '..', '..', 'idempotency.control'), 'utf8');
  const version = /^default_version\s*=\s*'([^']+)'/m.exec(control)[1];
  assert.strictEqual(require('../package.json').version, version);
});
