'use strict';
// What the tests share: an app on a free port, a POST and what its answer should be.
const assert = require('node:assert');

// An Express app (or any http handler with listen) on a free port; {url, close}.
async function listen(app) {
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    close: () => new Promise((resolve) => {
      server.closeAllConnections();
      server.close(resolve);
    }),
  };
}

// POSTs `body` (an object: JSON; a string: as is); {status, headers, body (Buffer), json}.
async function post(url, body, key, headers = {}) {
  const sent = { 'content-type': 'application/json', ...headers };
  if (key != null) sent['idempotency-key'] = key;
  const answer = await fetch(url, {
    method: 'POST', headers: sent, body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const bytes = Buffer.from(await answer.arrayBuffer());
  let json = null;
  try {
    json = JSON.parse(bytes.toString());
  } catch {
    // not JSON
  }
  return { status: answer.status, headers: Object.fromEntries(answer.headers), body: bytes, json };
}

function isProblem(answer, status) {
  return answer.status === status && answer.headers['content-type'] === 'application/problem+json' &&
    answer.json && answer.json.status === status && Boolean(answer.json.title);
}

function assertReplay(again, first) {
  assert.strictEqual(again.status, first.status);
  assert.strictEqual(again.headers['idempotent-replayed'], 'true');
  assert.deepStrictEqual(again.body, first.body);
  assert.strictEqual(again.headers['content-type'], first.headers['content-type']);
  assert.strictEqual(again.headers.location, first.headers.location);
  assert.strictEqual(again.headers['content-length'], String(again.body.length));
}

module.exports = { listen, post, isProblem, assertReplay };
