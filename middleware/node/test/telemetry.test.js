'use strict';
// OpenTelemetry, with the SDK's in-memory span exporter and a metric reader: one span per
// protected request under the protocol's names, the key only as its SHA-256, and the
// requests counter and begin histogram by outcome.  The providers are set before the
// package makes its instruments (at its first request).
const assert = require('node:assert');
const { createHash, randomUUID } = require('node:crypto');
const { test, before, after } = require('node:test');
const api = require('@opentelemetry/api');
const { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } = require('@opentelemetry/sdk-trace-base');
const { MeterProvider, MetricReader } = require('@opentelemetry/sdk-metrics');
const { Pool } = require('pg');
const express = require('express');
const fastify = require('fastify');
const { idempotency, fastifyIdempotency } = require('..');
const { expressApp, fastifyApp } = require('../conformance/app');
const { listen, post } = require('./http');

class Reader extends MetricReader {
  async onForceFlush() {}

  async onShutdown() {}
}

const exporter = new InMemorySpanExporter();
const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
api.trace.setGlobalTracerProvider(tracerProvider);
const reader = new Reader();
const meterProvider = new MeterProvider({ readers: [reader] });
api.metrics.setGlobalMeterProvider(meterProvider);

const table = 'orders_telemetry';
const pool = new Pool({ max: 10 });
const servers = [];

before(async () => {
  await pool.query(`DROP TABLE IF EXISTS ${table}`);
  await pool.query(`CREATE TABLE ${table} (id bigserial PRIMARY KEY, item text NOT NULL)`);
});
after(async () => {
  for (const server of servers) await server.close();
  await pool.end();
});

// The sum of each outcome's count, and the count of begin's histogram.
async function metricsNow() {
  const { resourceMetrics } = await reader.collect();
  const found = { requests: {}, begins: 0 };
  for (const scope of resourceMetrics.scopeMetrics) {
    for (const metric of scope.metrics) {
      for (const point of metric.dataPoints) {
        if (metric.descriptor.name === 'idempotency.requests') {
          found.requests[point.attributes['idempotency.outcome']] = point.value;
          assert.deepStrictEqual(Object.keys(point.attributes), ['idempotency.outcome'], 'the outcome only');
        } else if (metric.descriptor.name === 'idempotency.begin.duration') {
          found.begins += point.value.count;
          assert.strictEqual(metric.descriptor.unit, 's');
        }
      }
    }
  }
  return found;
}

test('a span per protected request, the key hashed, and the counter by outcome (Express and Fastify)', async () => {
  const express4 = expressApp({ express, idempotency, pool, table });
  express4.set('env', 'test');
  servers.push(await listen(express4));
  const app = fastifyApp({ Fastify: fastify, fastifyIdempotency, pool, table });
  await app.listen({ port: 0, host: '127.0.0.1' });
  servers.push({ url: `http://127.0.0.1:${app.server.address().port}`, close: () => app.close() });
  const before = await metricsNow();
  for (const { url } of servers) {
    const key = randomUUID();
    const item = randomUUID();
    assert.strictEqual((await post(`${url}/orders`, { item }, key)).status, 201);
    assert.strictEqual((await post(`${url}/orders`, { item }, key)).status, 201);
    assert.strictEqual((await post(`${url}/orders`, { item: 'another' }, key)).status, 422);
    const spans = exporter.getFinishedSpans().filter(
      (span) => span.attributes['idempotency.key_sha256'] === createHash('sha256').update(key).digest('hex'));
    assert.deepStrictEqual(spans.map((span) => span.attributes['idempotency.outcome']),
      ['claimed', 'replayed', 'mismatch'], url);
    for (const span of spans) {
      assert.strictEqual(span.name, 'idempotency.request');
      assert.strictEqual(span.attributes['idempotency.route'], '/orders');
      assert.strictEqual(span.attributes['idempotency.scope'], 'public');
      assert.ok(!JSON.stringify(span.attributes).includes(key), 'the key itself is never exported');
      assert.ok(!JSON.stringify(span.attributes).includes(item), 'nor the body');
    }
    assert.strictEqual(spans[0].attributes['idempotency.attempt'], 1);
  }
  const now = await metricsNow();
  const delta = (outcome) => (now.requests[outcome] ?? 0) - (before.requests[outcome] ?? 0);
  assert.deepStrictEqual([delta('claimed'), delta('replayed'), delta('mismatch')], [2, 2, 2]);
  assert.strictEqual(now.begins - before.begins, 6);
});
