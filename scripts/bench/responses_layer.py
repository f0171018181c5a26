"""O1, the cost of the OpenAI layer: background responses through the official `openai` Python client against the
same requests through POST /infer and GET /results/{requestId}, on one `gpuinfer dev` in front of the engine
simulator (8 slots, GPU-like: 10 ms per token at batch 1, 30 % slower at a full batch), side by side in one run.
Prints a table of every run, then the row O1 of BENCHMARKS.md's table and its item under "## Details"; with --write FILE
puts both into that file (each in place of the O1 there, else after the table's last row and the list's last item).

  responses_layer.py [--gpuinfer BIN] [--simulator BIN] [--requests 200] [--concurrency 16] [--poll 0.1]
                     [--pairs 1] [--write BENCHMARKS.md]

Both sides are driven from this Python process with the same HTTP client: the `openai` package's own (httpx2,
with the pool and timeouts the package gives it), one client shared by --concurrency threads, each thread sending
one request and polling it every --poll seconds until it ends, then the next; so the ratio shows what the layer
costs (the Response object's record, its JSON and the client's typed objects), not a difference of language or
client library. The requests are the same on both sides: one user message, --tokens tokens, the small tier.
  /infer:   POST /infer {"messages": [...], "maxTokens", "route": "small"} → 202, then GET /results/{requestId}
            until it is not 404 (the equivalent of a background response and its retrieves; `?wait=N` would be
            the equivalent of a response created without `background`).
  openai:   client.responses.create(model="small", input=..., max_output_tokens=..., background=True), then
            client.responses.retrieve(id) until its status is no longer queued or in_progress.
The runs alternate, /infer first and last (before, between and after): --pairs openai runs between --pairs + 1
/infer runs, after a warm-up of 2 × --concurrency requests on each side that is not counted. Each run gives its
tokens per second (first send to last result), its time to result, the engine's slots busy (its /metrics read every
50 ms), the engine calls it made (the simulator's count), the HTTP calls per request, and CPU per request: of this
Python process (every thread, the reader of /metrics included, alike on both sides) and of `gpuinfer dev` (router
and worker, one process).

Run it with the Python of scripts/openai-client.sh's venv (scripts/bench.sh does).
"""

import argparse
import concurrent.futures
import datetime
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import openai

from sections import wrapped

ROOT = Path(__file__).resolve().parents[2]
ROW_ID = "O1"
# The row's what: a few words, which find its line and its item again (as benches/support's rows).
WHAT = "OpenAI layer vs /infer, simulator, 8 slots"
# The list of the rows' details, after the table (as benches/support writes it).
DETAILS_HEADING = "## Details"
DETAILS_INTRO = ("Per row, what the table lacks. runs: each run where a side had several (the reference's before, "
                 "between and after ours); busy: mean slots running (the engine's `/metrics`, every 50 ms); cores: "
                 "the engine's CPU-s per s; `+`: uncommitted changes. Default settings; llama.cpp runs gemma-3-270m.")
SLOTS = 8
# The engine simulator as benches/support (GPU_LIKE) starts it for the other simulator rows.
GPU_LIKE = ["--completion-tokens", "100000", "--token-ms", "10", "--batch-slowdown", "0.3"]
# A response still going; any other status is where it ended.
GOING = {"queued", "in_progress"}
# Ends a 48-token request may have on the simulator, which answers as many tokens as asked for: cut at its limit.
ENDED = {"completed", "incomplete"}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def log(message):
    print(f"responses_layer: {message}", file=sys.stderr, flush=True)


def prompt(i):
    return f"Benchmark request {i}: tell a story."


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def cpu_seconds(pid):
    """User and kernel CPU time of a process, from /proc."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def gauges(engine):
    """The engine simulator's /metrics: running, waiting, total calls."""
    with urllib.request.urlopen(f"{engine}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    values = dict(line.split() for line in text.splitlines() if line and not line.startswith("#"))
    return (int(values["engine_requests_running"]), int(values["engine_requests_waiting"]),
            int(values["engine_requests_total"]))


class Loads:
    """Reads the engine's load every 50 ms while a run goes on (as the P1 rows do)."""

    def __init__(self, engine):
        self.engine, self.readings, self.stop = engine, [], threading.Event()
        self.thread = threading.Thread(target=self.read, daemon=True)

    def read(self):
        while not self.stop.is_set():
            running, waiting, _ = gauges(self.engine)
            self.readings.append((running, waiting))
            self.stop.wait(0.05)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *_):
        self.stop.set()
        self.thread.join()

    def busy(self):
        """Requests running, the mean over the readings in which the engine had work."""
        working = [running for running, waiting in self.readings if running + waiting > 0]
        return statistics.fmean(working) if working else 0.0


def through_infer(http, base, i, tokens, poll):
    """One request through POST /infer, polled through GET /results/{requestId}: its completion tokens and the HTTP
    calls it took."""
    body = {"messages": [{"role": "user", "content": prompt(i)}], "maxTokens": tokens, "route": "small"}
    answer = http.post(f"{base}/infer", json=body)
    if answer.status_code != 202:
        raise SystemExit(f"responses_layer: POST /infer answered {answer.status_code}: {answer.text}")
    request_id, calls = answer.json()["requestId"], 1
    while True:
        time.sleep(poll)
        answer, calls = http.get(f"{base}/results/{request_id}"), calls + 1
        if answer.status_code == 404:
            continue
        document = answer.json()
        if answer.status_code != 200 or document.get("status") != "success":
            raise SystemExit(f"responses_layer: GET /results/{request_id}: {answer.status_code} {document}")
        return document["result"]["usage"]["completionTokens"], calls


def through_openai(client, i, tokens, poll):
    """One background response through the official client, retrieved until it ends: its output tokens and the HTTP
    calls it took."""
    response = client.responses.create(model="small", input=prompt(i), max_output_tokens=tokens, background=True)
    calls = 1
    while response.status in GOING:
        time.sleep(poll)
        response, calls = client.responses.retrieve(response.id), calls + 1
    if response.status not in ENDED or response.usage is None:
        raise SystemExit(f"responses_layer: response {response.id} ended {response.status}: {response.error}")
    return response.usage.output_tokens, calls


class Run:
    """One run of one side: its figures."""

    def __init__(self, side, requests, wall, tokens, latencies, http_calls, client_cpu, dev_cpu, busy, engine_calls):
        self.side, self.requests, self.wall, self.tokens, self.http_calls = side, requests, wall, tokens, http_calls
        self.latencies, self.client_cpu, self.dev_cpu = sorted(latencies), client_cpu, dev_cpu
        self.busy, self.engine_calls = busy, engine_calls

    @property
    def tok_s(self):
        return self.tokens / self.wall

    @property
    def req_s(self):
        return self.requests / self.wall

    def percentile(self, share):
        return self.latencies[min(len(self.latencies) - 1, int(share * len(self.latencies)))]


def run_side(side, send, args, engine, dev_pid, first):
    """`args.requests` requests through `send` (index → tokens, HTTP calls), `args.concurrency` at a time."""
    latencies, http_calls = [], []

    def one(i):
        started = time.monotonic()
        tokens, calls = send(i)
        latencies.append(time.monotonic() - started)
        http_calls.append(calls)
        if tokens != args.tokens:
            raise SystemExit(f"responses_layer: a request through {side} gave {tokens} tokens, not {args.tokens}")
        return tokens

    _, _, calls_before = gauges(engine)
    client_before, dev_before = time.process_time(), cpu_seconds(dev_pid)
    with Loads(engine) as loads, concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
        started = time.monotonic()
        tokens = sum(pool.map(one, range(first, first + args.requests)))
        wall = time.monotonic() - started
    client_cpu, dev_cpu = time.process_time() - client_before, cpu_seconds(dev_pid) - dev_before
    _, _, calls_after = gauges(engine)
    run = Run(side, args.requests, wall, tokens, latencies, sum(http_calls), client_cpu, dev_cpu, loads.busy(),
              calls_after - calls_before)
    log(f"{side}: {run.tok_s:.1f} tok/s, {run.requests} requests in {wall:.1f} s")
    return run


def mean(values):
    return statistics.fmean(values)


def figures(values):
    return ", ".join(f"{value:.1f}" for value in values)


def table(runs):
    lines = ["| run | side | requests | engine calls | s | requests/s | tok/s | time to result p50 / p95 | "
             "engine slots busy | HTTP calls per request | client CPU per request | gpuinfer dev CPU per request |",
             "|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for n, run in enumerate(runs, 1):
        lines.append(
            f"| {n} | {run.side} | {run.requests} | {run.engine_calls} | {run.wall:.1f} | {run.req_s:.2f} | "
            f"{run.tok_s:.1f} | {run.percentile(0.5):.2f} / {run.percentile(0.95):.2f} s | {run.busy:.2f} of {SLOTS} | "
            f"{run.http_calls / run.requests:.1f} | {1000 * run.client_cpu / run.requests:.2f} ms | "
            f"{1000 * run.dev_cpu / run.requests:.2f} ms |")
    return "\n".join(lines)


def per_request(runs, cpu):
    """Milliseconds of CPU per request over `runs`, of the client (`client_cpu`) or of `gpuinfer dev` (`dev_cpu`)."""
    return 1000 * sum(getattr(run, cpu) for run in runs) / sum(run.requests for run in runs)


def runs_of(values):
    """A side's runs, as the details say them (benches/support's `runs_of`): nothing for one run (the table has it),
    else "runs a, b, c; "."""
    return "" if len(values) < 2 else f"runs {figures(values)}; "


def side_note(runs):
    """What a row's details say of one side's runs."""
    p50 = statistics.median(latency for run in runs for latency in run.latencies)
    requests = sum(run.requests for run in runs)
    http_calls, engine_calls = sum(run.http_calls for run in runs), sum(run.engine_calls for run in runs)
    return (f"{runs_of([run.tok_s for run in runs])}{mean([run.req_s for run in runs]):.2f} requests/s, p50 "
            f"{p50:.2f} s, {mean([run.busy for run in runs]):.2f}/{SLOTS} busy, {engine_calls} engine calls for "
            f"{requests} requests; per request {http_calls / requests:.1f} HTTP calls, CPU: client "
            f"{per_request(runs, 'client_cpu'):.2f} ms, dev {per_request(runs, 'dev_cpu'):.2f} ms")


def run_label():
    """The run that measures the row, for its details: today's date and the commit checked out, with "+" after it
    where the working tree's tracked files differ from it (uncommitted changes)."""
    def git(*args):
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else None
    commit = git("rev-parse", "--short", "HEAD") or "commit unknown"
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += "+"
    return f"{datetime.date.today().isoformat()}, {commit}"


def row(args, infer_runs, openai_runs, run):
    """The row's line of the table and its item under "## Details" (as benches/support writes them), and its ratio."""
    ours_tok_s, reference_tok_s = mean([r.tok_s for r in openai_runs]), mean([r.tok_s for r in infer_runs])
    ratio = ours_tok_s / reference_tok_s
    line = f"| {ROW_ID} | {WHAT} | {ours_tok_s:.1f} tok/s | {reference_tok_s:.1f} tok/s | {ratio:.2f} | none |"
    details = (
        f"openai=={openai.__version__} background responses (`responses.create(background=True)` + "
        f"`responses.retrieve`) against POST /infer + GET "
        f"/results/{{requestId}}, both on httpx2 from Python, one `gpuinfer dev`; {args.requests} × {args.tokens} "
        f"tokens, {args.concurrency} threads, polls {1000 * args.poll:.0f} ms apart. Ours: {side_note(openai_runs)}. "
        f"Reference: {side_note(infer_runs)}.")
    return line, item(f"**{ROW_ID}** {WHAT}: {details} Run {run}."), ratio


def item(text):
    """`text` as an item of the details' list: "- " first, the lines after the first indented by two spaces."""
    return wrapped("- " + text, "  ")


def with_row(document, line, entry):
    """`document` with `line` as the row O1 of its first table (in place of the one there, else after its last row)
    and `entry` as O1's item of the list under "## Details" (in place of the one there, else after its last item;
    the section made after the table where the document has none)."""
    lines = document.splitlines(keepends=True)
    start = next((n for n, text in enumerate(lines) if text.startswith("|")), len(lines))
    end = next((n for n in range(start, len(lines)) if not lines[n].startswith("|")), len(lines))
    at = next((n for n in range(start, end) if lines[n].startswith(f"| {ROW_ID} | ")), None)
    if at is None:
        lines.insert(end, line + "\n")
        end += 1
    else:
        lines[at] = line + "\n"
    heading = next((n for n, text in enumerate(lines) if text.rstrip("\n") == DETAILS_HEADING), None)
    if heading is None:
        lines[end:end] = ["\n", DETAILS_HEADING + "\n", "\n", wrapped(DETAILS_INTRO, "")]
        heading = end + 1
    body_end = next((n for n in range(heading + 1, len(lines)) if lines[n].startswith("## ")), len(lines))
    first = next((n for n in range(heading + 1, body_end) if lines[n].startswith("- ")), None)
    if first is None:
        # No list yet: after the intro, a blank line either side.
        at = body_end
        while at > heading + 1 and not lines[at - 1].strip():
            at -= 1
        lines[at:at] = ["\n", entry] + (["\n"] if at < len(lines) and lines[at].strip() else [])
        return "".join(lines)
    # The items: each from its "- " line over the lines continuing it (indented), up to the list's end.
    items, n = [], first
    while n < body_end and (lines[n].startswith("- ") or lines[n].startswith("  ")):
        if lines[n].startswith("- "):
            items.append([n, n + 1])
        else:
            items[-1][1] = n + 1
        n += 1
    mine = next(((a, b) for a, b in items if lines[a].startswith(f"- **{ROW_ID}** ")), None)
    if mine is None:
        lines.insert(n, entry)
    else:
        lines[mine[0]:mine[1]] = [entry]
    return "".join(lines)


def start_stack(args, data, stack):
    """The engine simulator and `gpuinfer dev` in front of it: the engine's URL, the router's, dev's process."""
    engine_process = subprocess.Popen([args.simulator, "--listen", "127.0.0.1:0", "--slots", str(SLOTS), *GPU_LIKE],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    stack.append(engine_process)
    engine = engine_process.stdout.readline().decode().strip()
    if not engine.startswith("http://"):
        raise SystemExit("responses_layer: the engine simulator did not start")
    port = free_port()
    with open(data / "dev.log", "wb") as dev_log:  # the child keeps its own copy of the descriptor
        dev = subprocess.Popen([args.gpuinfer, "dev", "--listen", f"127.0.0.1:{port}", "--small-engine-url", engine,
                                "--classifier", "none", "--data-dir", str(data / "data")],
                               env={**os.environ, "RUST_LOG": "warn"}, stdout=subprocess.DEVNULL, stderr=dev_log)
    stack.append(dev)
    base = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    while True:
        try:
            with urllib.request.urlopen(f"{base}/healthz", timeout=2) as answer:
                if answer.status == 200:
                    return engine, base, dev
        except OSError:
            pass
        if dev.poll() is not None or time.monotonic() - started > 30:
            tail = (data / "dev.log").read_text(errors="replace")[-2000:]
            raise SystemExit(f"responses_layer: gpuinfer dev did not answer /healthz; its log ends:\n{tail}")
        time.sleep(0.05)


def stop(stack):
    for child in reversed(stack):
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    for child in reversed(stack):
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpuinfer", default=str(ROOT / "target/release/gpuinfer"))
    parser.add_argument("--simulator", default=str(ROOT / "target/release/engine-simulator"))
    parser.add_argument("--requests", type=int, default=200, help="requests per run")
    parser.add_argument("--tokens", type=int, default=48, help="max tokens of each request")
    parser.add_argument("--concurrency", type=int, default=16, help="client threads, one request in flight each")
    parser.add_argument("--poll", type=float, default=0.1, help="seconds between two polls of a request")
    parser.add_argument("--pairs", type=int, default=1, help="openai runs, each after an /infer run")
    parser.add_argument("--write", type=Path, help="put the row into this file's table and details")
    args = parser.parse_args()

    stack = []
    with tempfile.TemporaryDirectory(prefix="responses-layer-") as scratch:
        try:
            engine, base, dev = start_stack(args, Path(scratch), stack)
            http = openai.DefaultHttpxClient()
            client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
            sides = {
                "/infer": lambda i: through_infer(http, base, i, args.tokens, args.poll),
                "openai": lambda i: through_openai(client, i, args.tokens, args.poll),
            }
            order = ["/infer"] + ["openai", "/infer"] * args.pairs
            warm = argparse.Namespace(**{**vars(args), "requests": 2 * args.concurrency})
            first = 0
            for side in ("/infer", "openai"):
                run_side(f"{side} (warm-up)", sides[side], warm, engine, dev.pid, first)
                first += warm.requests
            runs = []
            for side in order:
                runs.append(run_side(side, sides[side], args, engine, dev.pid, first))
                first += args.requests
        finally:
            stop(stack)
    print(table(runs))
    infer_runs = [run for run in runs if run.side == "/infer"]
    openai_runs = [run for run in runs if run.side == "openai"]
    line, entry, ratio = row(args, infer_runs, openai_runs, run_label())
    client_ratio = per_request(openai_runs, "client_cpu") / per_request(infer_runs, "client_cpu")
    dev_ratio = per_request(openai_runs, "dev_cpu") / per_request(infer_runs, "dev_cpu")
    print(f"\nratio, tok/s, openai ÷ /infer (mean of each side's runs): {ratio:.2f}")
    print(f"CPU per request, openai ÷ /infer: client {client_ratio:.2f}, gpuinfer dev {dev_ratio:.2f}")
    print(f"\n{line}\n\n{entry}", end="")
    if args.write:
        args.write.write_text(with_row(args.write.read_text(), line, entry))
        log(f"wrote the row {ROW_ID} of {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
