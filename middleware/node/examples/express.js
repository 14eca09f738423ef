const express = require('express');
const { Pool } = require('pg');
const { idempotency } = require('pg-idempotency');

const pool = new Pool();
const app = express();
app.post('/orders', idempotency(pool), async (req, res) => {
  const { rows } = await req.idempotency.client.query(
    'INSERT INTO orders (item) VALUES ($1) RETURNING id', [req.body.item]);
  res.status(201).json({ order: rows[0].id });
});

module.exports = { app, pool };
