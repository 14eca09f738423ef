'use strict';
// node serve.js express|fastify PORT: serves the conformance application (app.js) on
// 127.0.0.1:PORT with express or fastify, pg and pg-idempotency as installed beside it,
// the database from libpq's environment, until SIGTERM.
const { Pool } = require('pg');
const { idempotency, fastifyIdempotency } = require('pg-idempotency');
const { expressApp, fastifyApp } = require('./app');

const [framework, port] = process.argv.slice(2);
const pool = new Pool({ max: 20 });

if (framework === 'express') {
  expressApp({ express: require('express'), idempotency, pool, compression: require('compression') }).listen(Number(port), '127.0.0.1');
} else if (framework === 'fastify') {
  fastifyApp({ Fastify: require('fastify'), fastifyIdempotency, pool, compress: require('@fastify/compress') })
    .listen({ port: Number(port), host: '127.0.0.1' })
    .catch((error) => {
      console.error(error);
      process.exit(1);
    });
} else {
  console.error(`serve.js: no framework ${framework}`);
  process.exit(2);
}
