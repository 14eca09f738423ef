\echo Use "CREATE EXTENSION idempotency" to load this file. \quit

-- The update from 0.4.0.  A fresh CREATE EXTENSION of 0.5.0 runs the 0.3.0
-- install script, the update to 0.4.0 and then this one.
