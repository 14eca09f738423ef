// A node-idempotency (@node-idempotency/core) StorageAdapter over the extension.
import type { Pool } from 'pg';

export interface PostgresStorageAdapterOptions {
  /** The scope of the library's keys (default `'node-idempotency'`). */
  scope?: string;
  /** The ttl when the library gives none, in milliseconds (default 24 hours). */
  defaultTtlMs?: number;
}

export class PostgresStorageAdapter {
  constructor(pool: Pool, options?: PostgresStorageAdapterOptions);
  setIfNotExists(key: string, val: string, options?: { ttl?: number }): Promise<boolean>;
  set(key: string, val: string, options?: { ttl?: number }): Promise<void>;
  get(key: string): Promise<string | undefined>;
}
