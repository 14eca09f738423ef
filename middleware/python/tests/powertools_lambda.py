"""Runs AWS Lambda Powertools' own idempotency end-to-end suites against
pg_idempotency.powertools.PostgresPersistenceLayer, on this machine instead of AWS.

As a pytest plugin (test/t/055_powertools.pl):

    python3 -m pytest -p powertools_lambda --noconftest -c /dev/null \
        $POWERTOOLS_SRC/tests/e2e/idempotency/test_idempotency_dynamodb.py

the suites' test files run unchanged.  What they reach in AWS is replaced here: the
stack's deployment gives each function's handler file instead of an ARN, and an
invocation runs that handler in a process of its own, as Lambda does -- the module is
imported first (the init phase, outside the timeout), then the event is handled with
the function's 10-second timeout, after which the process is killed and the answer is
"Task timed out", exactly what the suites wait for.  In those processes the handlers'
DynamoDBPersistenceLayer and RedisCachePersistenceLayer are PostgresPersistenceLayer
over the database that the PG* environment variables name.

As a program, it is that process: `powertools_lambda.py HANDLER_FILE TIMEOUT_SECONDS`.
"""
import importlib.util
import io
import json
import os
import subprocess
import sys
import threading
import time
import types
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
# The suites' functions all have this timeout (their infrastructure.py).
FUNCTION_TIMEOUT_SECONDS = 10

# ---------------------------------------------------------------- the plugin side

# CloudFormation outputs of the suites' stacks -> the handler files they deploy.
HANDLERS = {
    "TtlCacheExpirationHandlerArn": "ttl_cache_expiration_handler.py",
    "TtlCacheTimeoutHandlerArn": "ttl_cache_timeout_handler.py",
    "ParallelExecutionHandlerArn": "parallel_execution_handler.py",
    "FunctionThreadSafetyHandlerArn": "function_thread_safety_handler.py",
    "OptionalIdempotencyKeyHandlerArn": "optional_idempotency_key_handler.py",
    "PayloadTamperingValidationHandlerArn": "payload_tampering_validation_handler.py",
    "ResponseHookArn": "response_hook.py",
}


def invoke(lambda_arn, payload=None, client=None, raise_on_error=True):
    """The suites' data_fetcher.get_lambda_response, against a local process."""
    child = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), lambda_arn, str(FUNCTION_TIMEOUT_SECONDS)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    ready = child.stdout.readline()
    if ready.strip() != "ready":
        child.kill()
        raise RuntimeError(f"the function's init failed: {ready}")
    started = datetime.utcnow()
    answer, _ = child.communicate(payload or "")
    result = json.loads(answer)
    response = {"Payload": io.BytesIO(result["payload"].encode()), "StatusCode": 200}
    if result["error"]:
        response["FunctionError"] = "Unhandled"
        if raise_on_error:
            raise RuntimeError(f"Function failed invocation: {result['payload']}")
    return response, started


class GetLambdaResponseOptions:
    def __init__(self, lambda_arn, payload=None, client=None, raise_on_error=True):
        self.options = dict(lambda_arn=lambda_arn, payload=payload, raise_on_error=raise_on_error)


def invoke_in_parallel(options_list):
    """The suites' get_lambda_response_in_parallel: started 0.5 s apart, in order."""
    with ThreadPoolExecutor() as executor:
        running = []
        for options in options_list:
            time.sleep(0.5 * len(running))
            running.append(executor.submit(invoke, **options.options))
    return [task.result() for task in running]


def install_stand_ins():
    """The suites' client of the Lambda API (boto3), replaced by local invocations."""
    fetcher = types.ModuleType("tests.e2e.utils.data_fetcher")
    fetcher.get_lambda_response = invoke
    common = types.ModuleType("tests.e2e.utils.data_fetcher.common")
    common.get_lambda_response = invoke
    common.get_lambda_response_in_parallel = invoke_in_parallel
    common.GetLambdaResponseOptions = GetLambdaResponseOptions
    sys.modules[fetcher.__name__] = fetcher
    sys.modules[common.__name__] = common


def pytest_configure(config):
    sys.path.insert(0, os.environ["POWERTOOLS_SRC"])
    install_stand_ins()


try:
    import pytest

    # The suites' conftest.py deploys their stack (left out with --noconftest); this
    # "deploys" the handler files next to the test file instead.
    @pytest.fixture(scope="module")
    def infrastructure(request):
        handlers = os.path.join(os.path.dirname(str(request.fspath)), "handlers")
        return {output: os.path.join(handlers, handler) for output, handler in HANDLERS.items()}
except ImportError:  # the function's process needs no pytest
    pass


# ---------------------------------------------------------------- the function side

def persistence_layer(**_ignored):
    """Stands in for the handlers' DynamoDB and Redis layers, whatever their arguments."""
    import psycopg
    from pg_idempotency.powertools import PostgresPersistenceLayer
    return PostgresPersistenceLayer(lambda: psycopg.connect(""))


class LambdaContext:
    def __init__(self, timeout_seconds):
        self.function_name = os.environ["AWS_LAMBDA_FUNCTION_NAME"]
        self.memory_limit_in_mb = 128
        self.invoked_function_arn = f"arn:aws:lambda:local:000000000000:function:{self.function_name}"
        self.aws_request_id = str(uuid.uuid4())
        self._deadline = time.monotonic() + timeout_seconds

    def get_remaining_time_in_millis(self):
        return max(int((self._deadline - time.monotonic()) * 1000), 0)


def run_function(handler_file, timeout_seconds):
    sys.path[:0] = [os.path.dirname(HERE)]  # pg_idempotency
    import aws_lambda_powertools.utilities.idempotency as idempotency
    idempotency.DynamoDBPersistenceLayer = persistence_layer
    redis = types.ModuleType("aws_lambda_powertools.utilities.idempotency.persistence.redis")
    redis.RedisCachePersistenceLayer = persistence_layer
    sys.modules[redis.__name__] = redis
    # Each deployed function has a name of its own, which Powertools puts in its keys.
    suite = os.path.basename(os.path.dirname(os.path.dirname(handler_file)))
    name = os.path.splitext(os.path.basename(handler_file))[0]
    os.environ["AWS_LAMBDA_FUNCTION_NAME"] = f"{suite}-{name}"
    spec = importlib.util.spec_from_file_location(name, handler_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    print("ready", flush=True)

    event = json.loads(sys.stdin.read() or "{}")
    context = LambdaContext(timeout_seconds)
    outcome = {}

    def handle():
        try:
            outcome["payload"] = json.dumps(module.lambda_handler(event, context), default=str)
            outcome["error"] = False
        except Exception as error:  # Lambda's answer to an unhandled exception
            outcome["payload"] = json.dumps({"errorMessage": str(error),
                                             "errorType": type(error).__name__})
            outcome["error"] = True

    worker = threading.Thread(target=handle, daemon=True)
    worker.start()
    worker.join(timeout_seconds)
    if worker.is_alive():
        # Lambda stops the function here: nothing of the handler runs afterwards.
        outcome = {"payload": json.dumps({"errorMessage": f"{context.aws_request_id} Task timed out "
                                                          f"after {timeout_seconds:.2f} seconds"}),
                   "error": True}
    sys.stdout.write(json.dumps(outcome))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    run_function(sys.argv[1], float(sys.argv[2]))
