'use strict';
// The package as npm users get it: `npm pack`, unpacked as `npm install` would (it has
// no dependencies, only peers), loads from its packed files alone and compiles under
// strict TypeScript without skipLibCheck, beside both frameworks (test/typed/example.ts)
// and in an app that has only one of them (test/typed/express-only, fastify-only); its
// version is the extension's.
const assert = require('node:assert');
const { execFileSync } = require('node:child_process');
const { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } = require('node:fs');
const { createRequire } = require('node:module');
const os = require('node:os');
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

// An app that installs one framework: its types, pg's, Node's and TypeScript at the
// versions of package-lock.json, and the packed package, with npm (from its cache or
// the npm registry), outside this package, where nothing of its node_modules is found.
test('an Express-only and a Fastify-only app compile under strict TypeScript, without skipLibCheck', () => {
  const locked = require('../package-lock.json').packages;
  const version = (name) => locked[`node_modules/${name}`].version;
  const apps = mkdtempSync(path.join(os.tmpdir(), 'pg-idempotency-apps-'));
  try {
    const tarball = execFileSync('npm', ['pack', '--silent', '--pack-destination', apps], { cwd: root })
      .toString().trim().split('\n').pop();
    const frameworks = { 'express-only': ['express', '@types/express'], 'fastify-only': ['fastify'] };
    for (const [app, packages] of Object.entries(frameworks)) {
      const dir = path.join(apps, app);
      cpSync(path.join(typed, app), dir, { recursive: true });
      const dependencies = { 'pg-idempotency': `file:../${tarball}` };
      for (const name of [...packages, 'pg', '@types/pg', '@types/node', 'typescript']) {
        dependencies[name] = version(name);
      }
      writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ private: true, dependencies }, null, 2));
      execFileSync('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--silent'], { cwd: dir, stdio: 'pipe' });
      const other = app === 'express-only' ? ['fastify'] : ['express', '@types/express'];
      for (const name of other) {
        assert.ok(!existsSync(path.join(dir, 'node_modules', name)), `${app} has no ${name}`);
      }
      try {
        execFileSync(process.execPath, [path.join(dir, 'node_modules/typescript/bin/tsc'), '-p', dir], { stdio: 'pipe' });
      } catch (error) {
        assert.fail(`${app}: tsc failed:\n${error.stdout}${error.stderr}`);
      }
    }
  } finally {
    rmSync(apps, { recursive: true, force: true });
  }
});

test('the package version is the extension\'s', () => {
  const control = readFileSync(path.join(root, '..', '..', 'idempotency.control'), 'utf8');
  const version = /^default_version\s*=\s*'([^']+)'/m.exec(control)[1];
  assert.strictEqual(require('../package.json').version, version);
});
