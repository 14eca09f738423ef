"""AWS Lambda Powertools (Python): a persistence layer over the extension.

    from aws_lambda_powertools.utilities.idempotency import idempotent
    from pg_idempotency.powertools import PostgresPersistenceLayer

    persistence_layer = PostgresPersistenceLayer(lambda: psycopg.connect(DSN))

    @idempotent(persistence_store=persistence_layer)
    def lambda_handler(event, context): ...

Powertools runs its own two-phase protocol: it saves the record INPROGRESS, runs the
handler outside any transaction of ours, then saves the result or, when the handler
raised, deletes the record.  Each step here is one committed call of the extension's
two-phase API (doc/handlers.md): idempotency_begin with a lease (Powertools' in-progress
expiry: the Lambda's remaining time), idempotency_complete and idempotency_forget fenced
by the attempt the begin returned, so that an invocation that timed out and was taken
over cannot overwrite or delete its successor's record.  The extension arbitrates
concurrent invocations, so two of them never both run the handler.

The records stay the extension's: the scope (default "powertools") and Powertools'
idempotency key ("<function>#<hash>") name the key, the payload-validation hash is the
request fingerprint (a different payload is a mismatch), the JSON result is stored byte
for byte as the response body (status 200), and the TTL is Powertools'
expires_after_seconds, counted again from the completion, as Powertools does.
"""
import threading
import time
from typing import Any, Callable, Dict, Optional, Tuple

from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyItemAlreadyExistsError,
    IdempotencyItemNotFoundError,
    IdempotencyValidationError,
)
from aws_lambda_powertools.utilities.idempotency.persistence.base import BasePersistenceLayer
from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import (
    STATUS_CONSTANTS,
    DataRecord,
)

from .core import execute

# Stored results answer with this status; Powertools has none.
STORED_STATUS = 200


class PostgresPersistenceLayer(BasePersistenceLayer):
    def __init__(self, connect: Callable[[], Any], scope: str = "powertools"):
        """`connect` returns a new psycopg 3 or psycopg2 connection (default, non-autocommit
        mode); each thread keeps one, since Powertools' idempotent_function may run in
        several threads of one invocation."""
        super().__init__()
        self._connect = connect
        self._scope = scope
        self._local = threading.local()
        # The attempt each claim of this process holds, by idempotency key: Powertools
        # completes or deletes in the same process that saved the claim.
        self._attempts: Dict[str, int] = {}

    def _call(self, sql: str, params: Tuple[Any, ...]) -> Any:
        """One statement in a transaction of its own; returns the first row."""
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            conn = self._local.conn = self._connect()
        try:
            row = execute(conn, sql, params).fetchone()
            conn.commit()
            return row
        except BaseException:
            conn.rollback()
            raise

    def _lease_seconds(self, record: DataRecord) -> float:
        # Without the Lambda's remaining time, Powertools' in-progress record lasts until
        # the record expires: so does the lease.
        if record.in_progress_expiry_timestamp is None:
            return float(self.expires_after_seconds)
        # At least a millisecond: a Lambda out of time leaves a claim that ends at once.
        return max(float(record.in_progress_expiry_timestamp) / 1000.0 - time.time(), 0.001)

    def _put_record(self, data_record: DataRecord) -> None:
        payload_hash = data_record.payload_hash or ""
        outcome, attempt, body, expires_at, lease_expires_at = self._call(
            "SELECT outcome::text, attempt, response_body_bytes, expires_at, lease_expires_at"
            "  FROM idempotency_begin(%s, %s, request_hash(%s::text),"
            "       ttl => make_interval(secs => %s::float8),"
            "       lease => make_interval(secs => %s::float8),"
            # Like Powertools' own layers: a dead claim of another payload is taken over.
            "       take_over_mismatch => true)",
            (self._scope, data_record.idempotency_key, payload_hash,
             float(self.expires_after_seconds), self._lease_seconds(data_record)))
        if outcome == "claimed":
            self._attempts[data_record.idempotency_key] = attempt
            return
        if outcome == "mismatch":
            raise IdempotencyValidationError("Payload does not match stored record for this event key")
        if outcome == "replay":
            if body is None:
                # Completed without its body: it was over idempotency.max_response_bytes.
                raise RuntimeError("the stored result of this idempotency key was too large to "
                                   "keep (idempotency.max_response_bytes)")
            existing = DataRecord(
                idempotency_key=data_record.idempotency_key,
                status=STATUS_CONSTANTS["COMPLETED"],
                expiry_timestamp=int(expires_at.timestamp()),
                response_data=bytes(body).decode(),
                payload_hash=payload_hash,  # the extension compared it: the same
            )
            self._save_to_cache(data_record=existing)
        else:  # in_progress
            existing = DataRecord(
                idempotency_key=data_record.idempotency_key,
                status=STATUS_CONSTANTS["INPROGRESS"],
                expiry_timestamp=int(expires_at.timestamp()) if expires_at else None,
                # NULL while the holder has not committed yet: in progress, not expired.
                in_progress_expiry_timestamp=(int(lease_expires_at.timestamp() * 1000)
                                              if lease_expires_at else None),
                payload_hash=payload_hash,
            )
        raise IdempotencyItemAlreadyExistsError(old_data_record=existing)

    def _update_record(self, data_record: DataRecord) -> None:
        # Only the COMPLETED update exists in Powertools 2 and 3.
        attempt = self._attempts.pop(data_record.idempotency_key, None)
        self._call(
            "SELECT idempotency_complete(%s, %s, %s, response_body_bytes => %s,"
            " attempt => %s::integer)",
            (self._scope, data_record.idempotency_key, STORED_STATUS,
             (data_record.response_data or "").encode(), attempt))

    def _delete_record(self, data_record: DataRecord) -> None:
        attempt = self._attempts.pop(data_record.idempotency_key, None)
        self._call("SELECT idempotency_forget(%s, %s, attempt => %s::integer)",
                   (self._scope, data_record.idempotency_key, attempt))

    def _get_record(self, idempotency_key: str) -> DataRecord:
        return self._read(idempotency_key, None)

    def get_record(self, data: Any) -> Optional[DataRecord]:
        """Powertools' read after a failed save: the stored fingerprint is compared with
        this payload's in SQL, since a fingerprint cannot be turned back into its hash."""
        idempotency_key = self._get_hashed_idempotency_key(data=data)
        if idempotency_key is None:
            return None
        cached = self._retrieve_from_cache(idempotency_key=idempotency_key)
        if cached:
            self._validate_payload(data_payload=data, stored_data_record=cached)
            return cached
        record = self._read(idempotency_key, self._get_hashed_payload(data=data))
        self._validate_payload(data_payload=data, stored_data_record=record)
        self._save_to_cache(data_record=record)
        return record

    def _read(self, idempotency_key: str, payload_hash: Optional[str]) -> DataRecord:
        """The record as a begin would see it; payload_hash is this payload's, to check."""
        row = self._call(
            "SELECT status, response_body_bytes, expires_at, lease_expires_at,"
            "       request = request_hash(%s::text)"
            "  FROM idempotency_lookup(%s, %s, latest => true)",
            (payload_hash or "", self._scope, idempotency_key))
        if row is None:
            raise IdempotencyItemNotFoundError
        status, body, expires_at, lease_expires_at, same_request = row
        completed = status == "completed"
        return DataRecord(
            idempotency_key=idempotency_key,
            status=STATUS_CONSTANTS["COMPLETED" if completed else "INPROGRESS"],
            expiry_timestamp=int(expires_at.timestamp()) if expires_at else None,
            in_progress_expiry_timestamp=(int(lease_expires_at.timestamp() * 1000)
                                          if lease_expires_at else None),
            response_data=bytes(body).decode() if completed and body is not None else "",
            # Another payload's record carries a hash that cannot be this payload's.
            payload_hash=(payload_hash if same_request or payload_hash is None
                          else "\x00another payload"),
        )

