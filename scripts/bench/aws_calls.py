"""AWS calls and price per request: our router + worker + scaler against the AWS sample's router, worker and scaling
metric functions, on the same seed-format requests, every AWS call counted through scripts/bench/aws_call_counter.py
in front of moto. Prints a markdown section; with --write FILE puts it into that file under its heading (the
paragraphs written by hand after its table are kept).

  aws_calls.py [--gpuinfer BIN] [--simulator BIN] [--requests 120] [--rate 1.0] [--write BENCHMARKS.md]

Three stacks run side by side, each with its own queues, bucket and engine simulator (8 slots, GPU-like):
  ours, client waits:  `gpuinfer submit --wait` per request → our router (local HTTP) → SQS → our worker → S3;
                       the client polls GET /results/{id}.
  ours, callback:      POST /infer with callbackUrl → our router → SQS → our worker → S3 → signed webhook.
  sample:              POST /infer → the sample's router handler → SQS → the sample's sqs_worker.py → S3; the
                       client polls S3 for the result (GetObject, with the same back-off as `submit --wait`),
                       the sample having no result API.
Requests arrive at --rate per second, for real: the workers' empty receives between them are counted as they
happen. The scalers tick every second during the run; their calls per tick are charged at one tick per minute
against --rate × 60 requests per minute (the assumption the table states).

What each count is, per request:
  API Gateway: the client's requests to the router (POST /infer; GET /results/{id} while `submit --wait` polls, 0.5 s
    first, growing by half up to 5 s). Lambda router invocations: one each, priced with the router's time measured
    here (at the counter in front of it) and the templates' memory (ours 256 MB, the sample's 128 MB).
  The other services: the stack's router, worker and client calls ÷ requests, plus its scaler's calls per tick ÷
    requests per minute. Ours: one scaler for both tiers and three lanes, one worker for the small tier's three
    lanes; the sample: one function per tier, its worker on one queue.
  S3 GetObject: the sample's client polling (it has no result API); ours, the router's reads behind GET /results/{id}.
  CloudWatch Logs: bytes the router, worker and scaler wrote (stdout: our EMF lines; stderr: logs, default level),
    priced as ingestion.
Prices: PRICES, each with the page it was read on in PRICE_SOURCES.

Needs moto (started here on --moto-port when nothing answers there) and the Python of scripts/aws-emulator.sh's
venv (boto3, requests) to run the sample's code; run it with that Python (scripts/bench.sh does).
"""

import argparse
import datetime
import json
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import boto3
from botocore.exceptions import ClientError

from sections import paragraph, with_section

ROOT = Path(__file__).resolve().parents[2]
HEADING = "## AWS calls and price per request"
TOKENS = 48
REGION = "us-east-1"
SCENARIOS = ("ours-wait", "ours-callback", "sample")
TITLES = {
    "ours-wait": "ours, client waits (`submit --wait`)",
    "ours-callback": "ours, callback (`callbackUrl`)",
    "sample": "sample, client polls S3",
}
# Memory of each function in the templates (ours: template.yaml; the sample's: its infrastructure/template.yaml).
ROUTER_MB = {"ours": 256, "sample": 128}
SCALER_MB = {"ours": 128, "sample": 128}
# Lambda invocations per scaler tick: ours scales both tiers in one function, the sample has one function per tier.
SCALER_INVOCATIONS = {"ours": 1, "sample": 2}

# List prices, us-east-1, free tiers left out. Where each was read: PRICE_SOURCES.
PRICES = {
    "sqs_request": 0.40 / 1e6,
    "s3_tier1": 0.005 / 1000,  # PUT, COPY, POST, LIST
    "s3_tier2": 0.0004 / 1000,  # GET, HEAD and all other requests
    "cloudwatch_request": 0.01 / 1000,  # PutMetricData, GetMetricStatistics, ... per request
    "cloudwatch_metric_requested": 0.01 / 1000,  # GetMetricData, per metric requested
    "lambda_request": 0.20 / 1e6,
    "lambda_gb_second": 0.0000166667,  # x86_64, the templates' architecture by default
    "apigateway_http_request": 1.00 / 1e6,  # HTTP API, first 300 million a month
    "logs_gb": 0.50,  # CloudWatch Logs ingestion, standard class
}
PRICE_SOURCES = """\
Prices: us-east-1 list prices, no free tiers, read on 2026-12-02:
- SQS standard: $0.40 per million requests, a request per 64 KB chunk of a payload —
  https://cloudburn.io/blog/amazon-sqs-pricing ("as of March 2026").
- S3 Standard: PUT, COPY, POST, LIST $0.005 per 1,000 requests; GET, HEAD and others $0.0004 per 1,000; DELETE free —
  https://c3x.dev/blog/s3-request-fees-explained.
- CloudWatch: GetMetricData $0.01 per 1,000 metrics requested —
  https://support.site24x7.com/portal/en/kb/articles/aws-cloudwatch-metrics-cost-calculation. Other API requests
  (PutMetricData, GetMetricStatistics) $0.01 per 1,000; custom metrics $0.30 per metric-month; Logs ingestion $0.50
  per GB — https://github.com/api-evangelist/cloudwatch (plans/cloudwatch-plans-pricing.yml, modified 2026-05-05,
  from https://aws.amazon.com/cloudwatch/pricing/).
- Lambda: $0.20 per million requests, $0.0000166667 per GB-second (x86_64) —
  https://docs.aws.amazon.com/whitepapers/latest/how-aws-pricing-works/lambda.html ($0.00001667 per GB-s) and
  https://cloudchipr.com/blog/aws-lambda-pricing (x86 $0.0000166667).
- API Gateway HTTP API: $1.00 per million requests (first 300 million a month), metered in 512 KB increments —
  https://docs.aws.amazon.com/whitepapers/latest/best-practices-api-gateway-private-apis-integration/cost-optimization.html.
- ECS calls (DescribeServices, UpdateService): counted, not priced (no per-call price found)."""

# What the section says of its counts and prices, each one paragraph; the rest of the method is this file's docstring.
COUNTS = (
    "Per request: each stack's router, worker and client calls ÷ requests, plus its scaler's calls per tick ÷ "
    "requests per minute ([how](scripts/bench/aws_calls.py)). Lambda: the router's time measured here × the templates' "
    "memory (ours 256 MB, the sample's 128 MB). Not counted: the sample router's INFO lines (Lambda's log handler "
    "writes them; here they go nowhere), Lambda's START/END/REPORT lines, custom metrics' monthly price, data "
    "transfer, NAT or VPC endpoints, X-Ray, the engine hosts."
)
PRICES_NOTE = (
    "Price rows: USD per million requests, at us-east-1 list prices without free tiers, read on 2026-12-02 (each "
    "price and its page: `PRICES`, `PRICE_SOURCES` in [`aws_calls.py`](scripts/bench/aws_calls.py)). ECS calls are "
    "counted, not priced (no per-call price found)."
)

S3_TIER1 = {"PutObject", "CopyObject", "PostObject", "ListObjects", "ListObjectsV2", "ListBuckets", "CreateBucket",
            "CreateMultipartUpload", "UploadPart", "UploadPartCopy", "CompleteMultipartUpload"}
S3_FREE = {"DeleteObject", "DeleteObjects", "AbortMultipartUpload"}
# Metrics one GetMetricData call of our scaler asks for (src/aws/cloudwatch.rs: saturation and GPU utilization).
OUR_METRICS_PER_GET_METRIC_DATA = 2


def log(message):
    print(f"aws_calls: {message}", file=sys.stderr, flush=True)


class Processes:
    """Child processes, stopped (SIGTERM, then SIGKILL) at the end, each by its own pid."""

    def __init__(self):
        self.children = []

    def start(self, command, env, out=None, err=None, stdin=None):
        child = subprocess.Popen(command, env=env, stdout=out or subprocess.DEVNULL, stderr=err or subprocess.DEVNULL,
                                 stdin=stdin, cwd=ROOT)
        self.children.append(child)
        return child

    def stop_all(self):
        for child in reversed(self.children):
            if child.poll() is None:
                child.terminate()
        for child in reversed(self.children):
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def wait_until(check, what, limit=60.0):
    started = time.monotonic()
    while True:
        try:
            if check():
                return
        except (OSError, urllib.error.URLError, ConnectionError):
            pass
        if time.monotonic() - started > limit:
            raise SystemExit(f"aws_calls: {what} not ready within {limit:.0f} s")
        time.sleep(0.1)


def answers(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status < 500
    except urllib.error.HTTPError as error:
        return error.code < 500
    except OSError:  # nothing listening (URLError is an OSError)
        return False


def listening(port):
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        return True


def simulator(processes, binary, env):
    child = processes.start([binary, "--listen", "127.0.0.1:0", "--slots", "8", "--completion-tokens", "100000",
                             "--token-ms", "10", "--batch-slowdown", "0.3"], env, out=subprocess.PIPE)
    url = child.stdout.readline().decode().strip()
    if not url.startswith("http://"):
        raise SystemExit("aws_calls: the engine simulator did not start")
    return url


def seed_request(i, tokens=TOKENS):
    """A request in the sample's format (its router passes the body on; its worker requires a requestId)."""
    return {"requestId": str(uuid.uuid4()), "prompt": f"Benchmark request {i}: tell a story.", "maxTokens": tokens,
            "temperature": 0.7, "topP": 1.0}


def post(url, body):
    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, json.loads(response.read() or b"{}")


class Webhooks:
    """Counts the result callbacks our worker delivers."""

    def __init__(self, port):
        self.received = set()
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                with outer.lock:
                    outer.received.add(json.loads(body).get("requestId"))
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def count(self):
        with self.lock:
            return len(self.received)


def access_key(caller):
    """The access key id a caller is given; the counter names the caller by it, lower-cased."""
    return caller.upper().replace("-", "_")


def aws_client(service, endpoint, caller):
    return boto3.client(service, endpoint_url=endpoint, region_name=REGION, aws_access_key_id=access_key(caller),
                        aws_secret_access_key="test")


def create_stack(endpoint, prefix, lanes):
    """Queues (name → URL) and a bucket, made through the counter as the `setup` caller (not counted)."""
    sqs, s3 = aws_client("sqs", endpoint, "setup"), aws_client("s3", endpoint, "setup")
    queues = {lane: sqs.create_queue(QueueName=f"{prefix}-{lane}")["QueueUrl"] for lane in lanes}
    bucket = f"{prefix}-results"
    s3.create_bucket(Bucket=bucket)
    return queues, bucket


def create_services(endpoint, cluster, services):
    ecs = aws_client("ecs", endpoint, "setup")
    ecs.create_cluster(clusterName=cluster)
    ecs.register_task_definition(family=f"{cluster}-task",
                                 containerDefinitions=[{"name": "worker", "image": "gpuinfer", "memory": 512}])
    for service in services:
        ecs.create_service(cluster=cluster, serviceName=service, taskDefinition=f"{cluster}-task", desiredCount=1)


def poll_s3(endpoint, bucket, key, limit=300.0):
    """Waits for the sample's result as a client of the sample would: GetObject with back-off (0.5 s, growing by
    half up to 5 s, as `gpuinfer submit --wait`)."""
    s3 = aws_client("s3", endpoint, "sample-client")
    pause, started = 0.5, time.monotonic()
    while time.monotonic() - started < limit:
        try:
            s3.get_object(Bucket=bucket, Key=key)["Body"].read()
            return time.monotonic() - started
        except ClientError as error:
            if error.response["Error"]["Code"] not in ("NoSuchKey", "404"):
                raise
        time.sleep(pause)
        pause = min(pause * 1.5, 5.0)
    raise SystemExit(f"aws_calls: no sample result at s3://{bucket}/{key}")


def calls_snapshot(control):
    with urllib.request.urlopen(f"http://127.0.0.1:{control}/", timeout=10) as response:
        return json.loads(response.read())["calls"]


def reset_counter(control):
    urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{control}/", data=b"", method="POST"), timeout=10)


def ticks_of(calls, gap=0.5):
    """A scaler's calls grouped into ticks (calls less than `gap` s apart): each tick's duration in ms."""
    ticks = []
    for call in sorted(calls, key=lambda c: c["start"]):
        if ticks and call["start"] - ticks[-1][1] <= gap:
            ticks[-1][1] = max(ticks[-1][1], call["end"])
        else:
            ticks.append([call["start"], call["end"]])
    return [(end - start) * 1000 for start, end in ticks]


def file_size(path):
    try:
        return path.stat().st_size
    except OSError:
        return 0


def run(args):
    base = args.port_base
    control, aws_port = base, base + 1
    api = {"ours-wait": base + 2, "ours-callback": base + 3, "sample": base + 4}
    upstream = {"ours-wait": base + 5, "ours-callback": base + 6, "sample": base + 7}
    hook_port = base + 8
    lease = {"VISIBILITY_TIMEOUT": str(args.lease)} if args.lease else {}
    moto = f"http://127.0.0.1:{args.moto_port}"
    endpoint = f"http://127.0.0.1:{aws_port}"
    logs = Path(tempfile.mkdtemp(prefix="aws-calls-"))
    processes = Processes()
    started_moto = False
    if not answers(f"{moto}/moto-api/"):
        subprocess.run([str(ROOT / "scripts/aws-emulator.sh"), "start", "--port", str(args.moto_port)], check=True)
        started_moto = True
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "RUST_LOG"))}
    base_env.update(AWS_SECRET_ACCESS_KEY="test", AWS_REGION=REGION, AWS_DEFAULT_REGION=REGION,
                    AWS_EC2_METADATA_DISABLED="true", AWS_ENDPOINT_URL=endpoint, NO_PROXY="127.0.0.1",
                    no_proxy="127.0.0.1")

    def env(caller, **more):
        return {**base_env, "AWS_ACCESS_KEY_ID": access_key(caller), **more}

    def output(name):
        return open(logs / f"{name}.out", "wb"), open(logs / f"{name}.err", "wb")

    try:
        counter = [sys.executable, str(ROOT / "scripts/bench/aws_call_counter.py"), "--control", str(control),
                   "--aws", f"{aws_port}={moto}"]
        for scenario in SCENARIOS:
            counter += ["--http", f"{scenario}={api[scenario]}=http://127.0.0.1:{upstream[scenario]}"]
        processes.start(counter, base_env)
        wait_until(lambda: answers(f"http://127.0.0.1:{control}/"), "the call counter")

        lanes = ["small", "small-high", "small-batch", "large", "large-high", "large-batch", "dlq"]
        suffix = uuid.uuid4().hex[:6]
        ours = {s: create_stack(endpoint, f"{s}-{suffix}", lanes) for s in ("ours-wait", "ours-callback")}
        sample_queues, sample_bucket = create_stack(endpoint, f"sample-{suffix}", ["request", "large-request", "dlq"])
        cluster = f"bench-{suffix}"
        create_services(endpoint, cluster, [f"{cluster}-small", f"{cluster}-large"])
        hooks = Webhooks(hook_port)
        secret = "whsec_" + "YmVuY2gtd2ViaG9vay1zZWNyZXQtMzJieXRlcyE="

        for scenario in ("ours-wait", "ours-callback"):
            queues, bucket = ours[scenario]
            common = {"CLUSTER_NAME": cluster, "SERVICE_NAME": f"{cluster}-{{tier}}",
                      "OUTPUT_DESTINATION": f"s3://{bucket}/results/", "ALLOW_HTTP_CALLBACKS": "true",
                      "ALLOW_PRIVATE_CALLBACKS": "true", "GPUINFER_DATA_DIR": str(logs / scenario)}
            urls = {f"{tier.upper()}{'_' + lane.upper() if lane else ''}_QUEUE_URL": queues[f"{tier}{'-' + lane if lane else ''}"]
                    for tier in ("small", "large") for lane in ("", "high", "batch")}
            out, err = output(f"{scenario}-router")
            processes.start([args.gpuinfer, "router", "--listen", f"127.0.0.1:{upstream[scenario]}",
                             "--classifier", "none"], env(f"{scenario}-router", **common, **urls), out, err)
            engine = simulator(processes, args.simulator, base_env)
            out, err = output(f"{scenario}-worker")
            processes.start([args.gpuinfer, "worker", "--tier", "small", "--engine-url", engine],
                            env(f"{scenario}-worker", **common, REQUEST_QUEUE_URL=queues["small"],
                                HIGH_QUEUE_URL=queues["small-high"], BATCH_QUEUE_URL=queues["small-batch"],
                                DLQ_URL=queues["dlq"], MAX_RECEIVE_COUNT="3", WORKER_CONCURRENCY="2048",
                                WEBHOOK_SECRET=secret, **lease), out, err)
            if scenario == "ours-wait":
                scaler_env = env("ours-scaler", **common, **urls, SCALER_TIERS="small,large",
                                 SCALER_INTERVAL_SECONDS="1", RUST_LOG="info")
        sample_common = {"SMALL_QUEUE_URL": sample_queues["request"], "LARGE_QUEUE_URL": sample_queues["large-request"],
                         "PROMPT_LENGTH_THRESHOLD": "2000", "MAX_TOKENS_THRESHOLD": "1024",
                         "BEDROCK_MODEL_ID": "amazon.nova-micro-v1:0"}
        stack = str(ROOT / "scripts/bench/sample_stack.py")
        out, err = output("sample-router")
        processes.start([sys.executable, stack, "router", "--port", str(upstream["sample"])],
                        env("sample-router", **sample_common), out, err)
        engine = simulator(processes, args.simulator, base_env)
        out, err = output("sample-worker")
        processes.start([sys.executable, stack, "worker", "--engine", engine],
                        env("sample-worker", REQUEST_QUEUE_URL=sample_queues["request"], DLQ_URL=sample_queues["dlq"],
                            OUTPUT_DESTINATION=f"s3://{sample_bucket}/results/", MODEL_NAME="default"), out, err)
        for scenario in ("ours-wait", "ours-callback"):
            port = upstream[scenario]
            wait_until(lambda: answers(f"http://127.0.0.1:{port}/healthz"), f"the {scenario} router")
        wait_until(lambda: listening(upstream["sample"]), "the sample's router")
        time.sleep(3)  # the workers settle into their long polls; what they did at start is not per request
        reset_counter(control)
        sizes_before = {p.name: file_size(p) for p in logs.glob("*.out")} | {p.name: file_size(p) for p in logs.glob("*.err")}

        out, err = output("ours-scaler")
        scaler = processes.start([args.gpuinfer, "scaler"], scaler_env, out, err)
        expected_ticks = int(args.requests / args.rate) + 30
        out, err = output("sample-scaler")
        sample_scaler = processes.start(
            [sys.executable, stack, "scaler", "--ticks", str(expected_ticks), "--every", "1"],
            env("sample-scaler", SMALL_QUEUE_URL=sample_queues["request"], LARGE_QUEUE_URL=sample_queues["large-request"],
                SMALL_SERVICE_NAME=f"sample-{suffix}-inference-service",
                LARGE_SERVICE_NAME=f"sample-{suffix}-large-inference-service", QUEUE_DEPTH_THRESHOLD="5",
                CLUSTER_NAME=f"sample-{suffix}-cluster"), out, err)

        log(f"{args.requests} requests at {args.rate}/s into each of {', '.join(SCENARIOS)}")
        waits, sample_waits, callback_ids, failures = [], [], [], []
        lock = threading.Lock()
        threads = []

        def ours_wait(request):
            started = time.monotonic()
            done = subprocess.run([args.gpuinfer, "submit", "--url", f"http://127.0.0.1:{api['ours-wait']}",
                                   "--json-request", "-", "--wait", "--timeout-seconds", "300"],
                                  input=json.dumps(request).encode(), capture_output=True, env=base_env)
            with lock:
                (waits if done.returncode == 0 else failures).append(
                    time.monotonic() - started if done.returncode == 0 else done.stderr.decode()[-300:])

        def sample_client(request):
            status, _ = post(f"http://127.0.0.1:{api['sample']}/infer", request)
            if status != 202:
                with lock:
                    failures.append(f"sample router answered {status}")
                return
            waited = poll_s3(endpoint, sample_bucket, f"results/{request['requestId']}.json")
            with lock:
                sample_waits.append(waited)

        load_started = time.time()
        for i in range(args.requests):
            time.sleep(max(0.0, load_started + i / args.rate - time.time()))
            for target in (ours_wait, sample_client):
                thread = threading.Thread(target=target, args=(seed_request(i, args.tokens),))
                thread.start()
                threads.append(thread)
            request = seed_request(i, args.tokens) | {"callbackUrl": f"http://127.0.0.1:{hook_port}/hook"}
            status, _ = post(f"http://127.0.0.1:{api['ours-callback']}/infer", request)
            if status != 202:
                failures.append(f"our router answered {status} to a callback request")
            callback_ids.append(request["requestId"])
        for thread in threads:
            thread.join()
        wait_until(lambda: hooks.count() >= args.requests, "every callback", limit=120)
        time.sleep(2)  # deletes still in their batch go out
        load_seconds = time.time() - load_started
        if failures:
            raise SystemExit(f"aws_calls: {len(failures)} requests failed, e.g. {failures[0]}")
        calls = calls_snapshot(control)
        for child in (scaler, sample_scaler):
            child.terminate()
        sizes_after = {p.name: file_size(p) for p in logs.glob("*.out")} | {p.name: file_size(p) for p in logs.glob("*.err")}
        scaler_log = (logs / "ours-scaler.err").read_text(errors="replace")
        our_ticks = len(re.findall(r"scaling decision|no scaling metric published", scaler_log)) / 2
        sample_ticks_ms = [json.loads(line)["ms"] for line in (logs / "sample-scaler.out").read_text().splitlines()
                           if line.startswith("{")]
        return summarize(args, calls, load_seconds, our_ticks, sample_ticks_ms, sizes_before, sizes_after,
                         waits, sample_waits, hooks.count())
    finally:
        processes.stop_all()
        if started_moto:
            subprocess.run([str(ROOT / "scripts/aws-emulator.sh"), "stop", "--port", str(args.moto_port)], check=False)


def summarize(args, calls, load_seconds, our_ticks, sample_ticks_ms, before, after, waits, sample_waits, hooks):
    n = args.requests
    per_minute = args.rate * 60
    # Calls by (scenario, service, operation), per request: the stack's own callers over the run ÷ requests; its
    # scaler's calls per tick ÷ requests per minute (one tick a minute).
    owners = {"ours-wait": ("ours_wait_router", "ours_wait_worker", "ours-wait"),
              "ours-callback": ("ours_callback_router", "ours_callback_worker", "ours-callback"),
              "sample": ("sample_router", "sample_worker", "sample_client", "sample")}
    scaler_of = {"ours-wait": "ours_scaler", "ours-callback": "ours_scaler", "sample": "sample_scaler"}
    ticks = {"ours_scaler": our_ticks, "sample_scaler": len(sample_ticks_ms) / 2}
    unknown = sorted({c["caller"] for c in calls} - {o for group in owners.values() for o in group} - set(ticks) - {"setup"})
    if unknown:
        raise SystemExit(f"aws_calls: calls from callers no stack owns: {unknown}")
    failed = [c for c in calls if c["status"] >= 500]
    by_caller = {}
    for call in calls:
        key = (call["caller"], call["service"], call["operation"])
        by_caller[key] = by_caller.get(key, 0) + 1
    for (caller, service, operation), count in sorted(by_caller.items()):
        log(f"  {caller:22} {service:10} {operation:28} {count}")
    rows = {}
    for scenario in SCENARIOS:
        for call in calls:
            service = {"http": "API Gateway (HTTP API)"}.get(call["service"], call["service"])
            key = (service, call["operation"])
            if call["caller"] in owners[scenario]:
                rows.setdefault(key, dict.fromkeys(SCENARIOS, 0.0))[scenario] += 1 / n
            elif call["caller"] == scaler_of[scenario] and ticks[call["caller"]]:
                rows.setdefault(key, dict.fromkeys(SCENARIOS, 0.0))[scenario] += 1 / ticks[call["caller"]] / per_minute
    # Lambda: the router runs once per API request; the scaler SCALER_INVOCATIONS times per tick.
    api_calls = {s: [c for c in calls if c["caller"] == s] for s in SCENARIOS}
    router_ms = {s: sum(math.ceil((c["end"] - c["start"]) * 1000) for c in api_calls[s]) / max(1, len(api_calls[s]))
                 for s in SCENARIOS}
    our_tick_ms = ticks_of([c for c in calls if c["caller"] == "ours_scaler"])
    scaler_ms = {"ours": sum(our_tick_ms) / max(1, len(our_tick_ms)),
                 "sample": sum(sample_ticks_ms) / max(1, len(sample_ticks_ms))}
    for scenario in SCENARIOS:
        side = "sample" if scenario == "sample" else "ours"
        rows.setdefault(("Lambda", "router invocations"), dict.fromkeys(SCENARIOS, 0.0))[scenario] = len(api_calls[scenario]) / n
        rows.setdefault(("Lambda", "scaler invocations"), dict.fromkeys(SCENARIOS, 0.0))[scenario] = SCALER_INVOCATIONS[side] / per_minute
    # Log bytes (CloudWatch Logs ingestion): what router, worker and scaler wrote to stdout and stderr in the run.
    def written(prefix):
        return sum(after.get(name, 0) - before.get(name, 0) for name in after if name.startswith(prefix))
    log_bytes = {}
    for scenario in SCENARIOS:
        own = written(f"{scenario}-router") + written(f"{scenario}-worker")
        scaler_name = "sample-scaler" if scenario == "sample" else "ours-scaler"
        tick_count = ticks[scaler_of[scenario]] or 1
        log_bytes[scenario] = own / n + written(scaler_name) / tick_count / per_minute

    def price(scenario):
        side = "sample" if scenario == "sample" else "ours"
        by = {"SQS": 0.0, "S3": 0.0, "CloudWatch": 0.0, "Lambda": 0.0, "API Gateway": 0.0, "CloudWatch Logs": 0.0}
        for (service, operation), values in rows.items():
            count = values[scenario]
            if service == "sqs":
                by["SQS"] += count * PRICES["sqs_request"]
            elif service == "s3" and operation not in S3_FREE:
                by["S3"] += count * PRICES["s3_tier1" if operation in S3_TIER1 else "s3_tier2"]
            elif service == "cloudwatch":
                metrics = OUR_METRICS_PER_GET_METRIC_DATA if operation == "GetMetricData" else 1
                by["CloudWatch"] += count * metrics * PRICES["cloudwatch_request"]
            elif service.startswith("API Gateway"):
                by["API Gateway"] += count * PRICES["apigateway_http_request"]
        router_invocations = rows[("Lambda", "router invocations")][scenario]
        scaler_invocations = rows[("Lambda", "scaler invocations")][scenario]
        gb_s = (router_invocations * router_ms[scenario] / 1000 * ROUTER_MB[side] / 1024
                + scaler_invocations * scaler_ms[side] / SCALER_INVOCATIONS[side] / 1000 * SCALER_MB[side] / 1024)
        by["Lambda"] = (router_invocations + scaler_invocations) * PRICES["lambda_request"] + gb_s * PRICES["lambda_gb_second"]
        by["CloudWatch Logs"] = log_bytes[scenario] / 1e9 * PRICES["logs_gb"]
        return {k: v * 1e6 for k, v in by.items()}

    prices = {s: price(s) for s in SCENARIOS}
    head = "| service | operation | " + " | ".join(TITLES[s] for s in SCENARIOS) + " |\n"
    head += "|---|---|" + "---:|" * len(SCENARIOS) + "\n"
    body = ""
    order = {"API Gateway (HTTP API)": 0, "Lambda": 1, "sqs": 2, "s3": 3, "cloudwatch": 4, "ecs": 5}
    for (service, operation) in sorted(rows, key=lambda k: (order.get(k[0], 9), k[0], k[1])):
        values = rows[(service, operation)]
        name = {"sqs": "SQS", "s3": "S3", "cloudwatch": "CloudWatch", "ecs": "ECS"}.get(service, service)
        body += f"| {name} | {operation} | " + " | ".join(f"{values[s]:.3f}" for s in SCENARIOS) + " |\n"
    body += "| CloudWatch Logs | bytes written (stdout + stderr) | " + " | ".join(f"{log_bytes[s]:.0f}" for s in SCENARIOS) + " |\n"
    body += "| Lambda | ms per router invocation (measured here) | " + " | ".join(f"{router_ms[s]:.1f}" for s in SCENARIOS) + " |\n"
    for category in prices["sample"]:
        body += f"| **price** | {category} | " + " | ".join(f"{prices[s][category]:.2f}" for s in SCENARIOS) + " |\n"
    body += "| **price** | **total** | " + " | ".join(f"**{sum(prices[s].values()):.2f}**" for s in SCENARIOS) + " |\n"

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                             text=True).stdout.strip()
    if changed:
        commit += "+"
    median = lambda values: sorted(values)[len(values) // 2] if values else float("nan")  # noqa: E731
    first = (
        f"One run of [`scripts/bench/aws_calls.py`](scripts/bench/aws_calls.py) `--requests {n} --rate "
        f"{args.rate:g}`, {datetime.date.today().isoformat()}, {commit}; {args.build}, {args.moto_version}. Each "
        f"stack served {n} seed-format requests of {args.tokens} tokens, {args.rate:g} a second for {load_seconds:.0f} s, "
        f"on the engine simulator (8 slots). "
        f"scripts/bench/aws_call_counter.py counted every AWS call; {len(failed)} were answered 5xx. Median wait: "
        f"`submit --wait` {median(waits):.2f} s, the sample's client polling S3 {median(sample_waits):.2f} s; {hooks} "
        f"callbacks arrived. The scalers ticked every second (ours {our_ticks:.0f} ticks of "
        f"{scaler_ms['ours']:.0f} ms; the sample's two functions {len(sample_ticks_ms) / 2:.0f} of "
        f"{scaler_ms['sample']:.0f} ms), charged as one tick a minute against {per_minute:.0f} requests a minute."
    )
    return section_text(first, head + body)


def section_text(first, table):
    """The section's generated part: its heading, the run's paragraph (`first`), what the counts and prices are, and
    the table."""
    return f"""{HEADING}

{paragraph(first)}

{paragraph(COUNTS)}

{paragraph(PRICES_NOTE)}

{table}"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpuinfer", default=str(ROOT / "target/debug/gpuinfer"))
    parser.add_argument("--simulator", default=str(ROOT / "target/debug/engine-simulator"))
    parser.add_argument("--build", default="debug build (`cargo build --features test-support`)",
                        help="how the binaries were built, for the section's first line")
    parser.add_argument("--requests", type=int, default=120)
    parser.add_argument("--rate", type=float, default=1.0, help="requests per second into each stack")
    parser.add_argument("--tokens", type=int, default=TOKENS, help="each request's maxTokens (10 ms a token)")
    parser.add_argument("--lease", type=int, help="our worker's VISIBILITY_TIMEOUT, seconds [default: its own]")
    parser.add_argument("--moto-port", type=int, default=15255)
    parser.add_argument("--port-base", type=int, default=15256)
    parser.add_argument("--write", type=Path)
    args = parser.parse_args()
    pin = re.search(r'MOTO_PIN="([^"]+)"', (ROOT / "scripts/aws-emulator.sh").read_text())
    args.moto_version = pin.group(1) if pin else "as pinned in scripts/aws-emulator.sh"
    section = run(args)
    print(section)
    if args.write:
        document = args.write.read_text() if args.write.exists() else ""
        args.write.write_text(with_section(document, HEADING, section))
        log(f"wrote the section \"{HEADING}\" of {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
