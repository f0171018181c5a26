"""Runs the AWS sample's own code (read from ../shared/seeds/, or GPUINFER_SAMPLE_DIR) here, for scripts/bench/aws_calls.py:

  sample_stack.py router --port PORT          the router function's handler behind a local HTTP server
                                              (POST /infer: the body is the API Gateway event's body)
  sample_stack.py worker --engine URL         sqs_worker.main(), its vLLM URL pointed at URL
  sample_stack.py scaler --ticks N --every S  each tier's scaling metric handler once per tick, N ticks S apart;
                                              prints each tick's duration (ms), one line per invocation

Configuration is the environment the sample's template gives each function (SMALL_QUEUE_URL, REQUEST_QUEUE_URL,
QUEUE_URL, ...; for the scaler SMALL_QUEUE_URL and LARGE_QUEUE_URL, and SMALL_SERVICE_NAME, LARGE_SERVICE_NAME),
plus AWS_ENDPOINT_URL and the AWS_* credentials.
"""

import argparse
import importlib.util
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

# The AWS sample's source, read where it is kept (never copied into this repository).
SAMPLE = Path(os.environ.get("GPUINFER_SAMPLE_DIR",
                             Path(__file__).resolve().parents[3] / "shared/seeds/sample-ecs-inference-pipeline"))
# Each module run here: a file of the sample, or the inline code (ZipFile) of one of its template's functions.
SOURCES = {
    "sqs_worker": ("container/sqs_worker.py", None),
    "router_lambda": ("infrastructure/template.yaml", "RouterLambdaFunction"),
    "scaling_metric_lambda": ("infrastructure/template.yaml", "ScalingMetricLambdaFunction"),
}


def inline_code(template, function):
    """The `ZipFile: |` block of `function` in the sample's template, dedented."""
    lines = template.splitlines()
    start = lines.index(f"  {function}:")
    at = next(i for i in range(start, len(lines)) if lines[i].strip() == "ZipFile: |")
    indent = len(lines[at]) - len(lines[at].lstrip()) + 2
    body = []
    for line in lines[at + 1:]:
        if line.strip() and len(line) - len(line.lstrip()) < indent:
            break
        body.append(line[indent:])
    return "\n".join(body) + "\n"


def load(name):
    path, function = SOURCES[name]
    source = SAMPLE / path
    if not source.exists():
        raise SystemExit(f"sample_stack: the AWS sample is not at {SAMPLE}: set GPUINFER_SAMPLE_DIR")
    code = source.read_text() if function is None else inline_code(source.read_text(), function)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader=None))
    exec(compile(code, f"{source}:{function or name}", "exec"), module.__dict__)
    return module


def router(port):
    lambda_module = load("router_lambda")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            answer = lambda_module.handler({"body": raw.decode("utf-8", "replace")}, None)
            data = answer.get("body", "").encode()
            self.send_response(answer.get("statusCode", 200))
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print("sample router: ready", flush=True)
    server.serve_forever()


def worker(engine):
    worker_module = load("sqs_worker")
    worker_module.VLLM_ENDPOINT = engine.rstrip("/") + "/v1/completions"
    worker_module.main()


def scaler(ticks, every):
    # One function per tier in the sample's template, each with its own QUEUE_URL and SERVICE_NAME.
    tiers = [
        (os.environ["SMALL_QUEUE_URL"], os.environ["SMALL_SERVICE_NAME"]),
        (os.environ["LARGE_QUEUE_URL"], os.environ["LARGE_SERVICE_NAME"]),
    ]
    module = load("scaling_metric_lambda")
    for tick in range(ticks):
        started = time.monotonic()
        for queue_url, service_name in tiers:
            os.environ.update(QUEUE_URL=queue_url, SERVICE_NAME=service_name)
            invoked = time.monotonic()
            module.handler({}, None)
            print(json.dumps({"tick": tick, "ms": (time.monotonic() - invoked) * 1000}), flush=True)
        time.sleep(max(0.0, every - (time.monotonic() - started)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("router").add_argument("--port", type=int, required=True)
    commands.add_parser("worker").add_argument("--engine", required=True)
    scaling = commands.add_parser("scaler")
    scaling.add_argument("--ticks", type=int, required=True)
    scaling.add_argument("--every", type=float, default=1.0)
    args = parser.parse_args()
    if args.command == "router":
        router(args.port)
    elif args.command == "worker":
        worker(args.engine)
    else:
        scaler(args.ticks, args.every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
