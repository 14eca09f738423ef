"""PostgresPersistenceLayer in the cases Powertools' own suites do not reach: a Lambda
that timed out and is taken over with the same event, whose late result must not
overwrite its successor's, and a handler error that frees the key.  Run by
test/t/055_powertools.pl with pytest (Powertools is not in Debian)."""
import os
import sys
import time

import psycopg
import pytest
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyItemAlreadyExistsError,
)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pg_idempotency.powertools import PostgresPersistenceLayer  # noqa: E402


def layer():
    """A layer as one Lambda execution environment has it."""
    instance = PostgresPersistenceLayer(lambda: psycopg.connect(""))
    instance.configure(IdempotencyConfig(expires_after_seconds=60), "cases")
    return instance


def test_a_timed_out_invocation_is_taken_over_and_fenced():
    event = {"order": "takeover"}
    first, second = layer(), layer()
    first.save_inprogress(event, remaining_time_in_millis=300)
    with pytest.raises(IdempotencyItemAlreadyExistsError) as busy:
        second.save_inprogress(event, remaining_time_in_millis=10_000)
    assert busy.value.old_data_record.status == "INPROGRESS"
    assert busy.value.old_data_record.in_progress_expiry_timestamp > time.time() * 1000
    time.sleep(0.4)  # the first invocation's remaining time is over
    second.save_inprogress(event, remaining_time_in_millis=10_000)
    # The first invocation's late result is refused (IK003): it was taken over.
    with pytest.raises(psycopg.Error) as late:
        first.save_success(event, {"result": "late"})
    assert late.value.sqlstate == "IK003"
    second.save_success(event, {"result": "second"})
    assert layer().get_record(event).response_json_as_dict() == {"result": "second"}


def test_a_handler_error_frees_the_key():
    event = {"order": "error"}
    lambda_env = layer()
    lambda_env.save_inprogress(event, remaining_time_in_millis=10_000)
    lambda_env.delete_record(event, RuntimeError("the handler failed"))
    again = layer()
    again.save_inprogress(event, remaining_time_in_millis=10_000)  # claimed afresh
    again.save_success(event, {"result": "ran again"})
    with pytest.raises(IdempotencyItemAlreadyExistsError) as done:
        layer().save_inprogress(event, remaining_time_in_millis=10_000)
    assert done.value.old_data_record.response_json_as_dict() == {"result": "ran again"}


def test_a_result_too_large_to_keep_fails_its_replays_clearly():
    event = {"order": "large"}
    small = PostgresPersistenceLayer(
        lambda: psycopg.connect("", options="-c idempotency.max_response_bytes=100"))
    small.configure(IdempotencyConfig(expires_after_seconds=60), "cases")
    small.save_inprogress(event, remaining_time_in_millis=10_000)
    small.save_success(event, {"result": "x" * 200})  # completed, its body not kept
    with pytest.raises(RuntimeError, match="max_response_bytes"):
        small.save_inprogress(event, remaining_time_in_millis=10_000)
