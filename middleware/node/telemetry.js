'use strict';
// OpenTelemetry, where the application installed @opentelemetry/api (an optional peer
// dependency; without it every function here does nothing): a span per protected request
// and two instruments, under src/protocol.txt's names ("observability").  The key itself
// is never exported: only the hex SHA-256 of its UTF-8 bytes.  The metrics carry the
// outcome only (the scope is unbounded).
const { createHash } = require('node:crypto');
const { OBSERVABILITY } = require('./protocol');
const { version } = require('./package.json');

let api = null;
try {
  api = require('@opentelemetry/api'); // eslint-disable-line global-require
} catch {
  api = null;
}

const name = (kind) => OBSERVABILITY[kind][0];
const spans = new WeakMap(); // the framework's request -> its span
let instruments = null; // made at the first request, from the global MeterProvider then

function instrumentsOf() {
  if (!instruments) {
    const meter = api.metrics.getMeter('pg-idempotency', version);
    instruments = {
      requests: meter.createCounter(name('requestsMetric'), {
        unit: OBSERVABILITY.requestsMetric[1], description: 'Protected requests, by outcome',
      }),
      beginDuration: meter.createHistogram(name('beginDurationMetric'), {
        unit: OBSERVABILITY.beginDurationMetric[1], description: 'idempotency_begin\'s time, a wait included',
      }),
    };
  }
  return instruments;
}

// Starts the span of a protected request, in the active context (the server's span).
function startSpan(native, route) {
  if (!api || native == null) return;
  const span = api.trace.getTracer('pg-idempotency', version).startSpan(name('requestSpan'), {
    attributes: { [name('routeAttribute')]: route },
  });
  spans.set(native, span);
}

// What the request's span learns as the course goes: its scope and key (hashed), its
// claim's attempt.
function annotate(native, { scope, key, attempt } = {}) {
  const span = native != null && spans.get(native);
  if (!span) return;
  if (scope != null) span.setAttribute(name('scopeAttribute'), scope);
  if (key != null) span.setAttribute(name('keySha256Attribute'), createHash('sha256').update(key, 'utf8').digest('hex'));
  if (attempt != null) span.setAttribute(name('attemptAttribute'), Number(attempt));
}

// idempotency_begin's time, in seconds.
function recordBegin(seconds) {
  if (api) instrumentsOf().beginDuration.record(seconds);
}

// The outcome: counted, and the span ended with it.
function finish(native, outcome) {
  if (!api) return;
  instrumentsOf().requests.add(1, { [name('outcomeAttribute')]: outcome });
  const span = native != null && spans.get(native);
  if (!span) return;
  spans.delete(native);
  span.setAttribute(name('outcomeAttribute'), outcome);
  if (outcome === 'error') span.setStatus({ code: api.SpanStatusCode.ERROR });
  span.end();
}

module.exports = { startSpan, annotate, recordBegin, finish };
