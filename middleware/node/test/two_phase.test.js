'use strict';
// Two-phase mode: the claim commits at once, the handler checkpoints (committed), a
// retry meanwhile is 409, and the response commits fenced by the attempt.
const assert = require('node:assert');
const { randomUUID } = require('node:crypto');
const { test, after } = require('node:test');
const express = require('express');
const { Pool } = require('pg');
const { idempotency } = require('..');

const pool = new Pool({ max: 10 });
after(() => pool.end());

test('two-phase: checkpoint, a retry in flight is 409, then a replay', async () => {
  const seen = {};
  const app = express();
  let post;
  app.post('/payments', idempotency(pool, { lease: '1 minute' }), async (req, res) => {
    seen.attempt = req.idempotency.attempt;
    seen.recoveryPoint = req.idempotency.recoveryPoint;
    await req.idempotency.checkpoint('charge-1'); // the external call happened
    const { rows } = await pool.query(
      "SELECT status, recovery_point FROM idempotency_lookup('', $1)", [req.idempotency.key]);
    seen.committed = rows[0];
    seen.retry = (await post(req.idempotency.key)).status;
    res.status(201).json({ payment: 'charge-1' });
  });
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  post = async (key) => {
    const answer = await fetch(`http://127.0.0.1:${server.address().port}/payments`, {
      method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': key }, body: '{}',
    });
    return { status: answer.status, body: await answer.text(), replayed: answer.headers.get('idempotent-replayed') };
  };
  try {
    const key = randomUUID();
    const first = await post(key);
    assert.strictEqual(first.status, 201);
    assert.deepStrictEqual(seen, {
      attempt: 1, recoveryPoint: null, committed: { status: 'in_progress', recovery_point: 'charge-1' }, retry: 409,
    });
    const again = await post(key);
    assert.deepStrictEqual(again, { status: 201, body: first.body, replayed: 'true' });
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});
