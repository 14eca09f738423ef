'use strict';
const express = require('express');
const { idempotency } = require('..');
const { checks } = require('./checks');

checks('express', async (pool, table) => {
  const app = express();
  app.post('/orders', idempotency(pool), async (req, res, next) => {
    try {
      const { item } = req.body;
      const { rows } = await req.idempotency.client.query(
        `INSERT INTO ${table} (item) VALUES ($1) RETURNING id`, [item]);
      if (item === 'boom') throw new Error('the handler failed');
      if (item === 'fail') return res.status(503).json({ error: 'upstream down' });
      res.status(201).location(`/orders/${rows[0].id}`).json({ order: Number(rows[0].id) });
    } catch (error) {
      next(error);
    }
  });
  // Express's default error handler prints the stack; answer 500 quietly.
  app.use((error, req, res, next) => res.status(500).json({ error: 'internal' }));
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  const url = `http://127.0.0.1:${server.address().port}/orders`;
  return {
    post: async (key, body) => {
      const headers = { 'content-type': 'application/json' };
      if (key != null) headers['idempotency-key'] = key;
      const answer = await fetch(url, { method: 'POST', headers, body });
      return {
        status: answer.status,
        headers: Object.fromEntries(answer.headers),
        body: Buffer.from(await answer.arrayBuffer()),
      };
    },
    close: () => new Promise((resolve) => { server.closeAllConnections(); server.close(resolve); }),
  };
});
