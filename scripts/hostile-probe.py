#!/usr/bin/env python3
"""Hostile clients against a real `gpuinfer dev` on loopback (docs/reliability.md, "Hostile clients: the probe set").

Starts engine simulators and `gpuinfer dev` instances on 127.0.0.1 only, runs fourteen probes (malformed forms, load,
stalled readers, borrowed body budget, slow headers and trickled bodies, Transfer-Encoding with Content-Length, ids
differing in case, cancel, upload bounds, racing upload completes and list pages, callback addresses, SIGTERM and
restart, one project's lists beside another's files and pages of the largest records, a large batch create and
one abandoned by kill -9), prints one figure line per probe
and a markdown table, and exits 1 naming each promise that did not hold.

    python3 scripts/hostile-probe.py [--binary target/debug/gpuinfer] [--keep-logs]

Python 3.11 standard library only; about two minutes on a 2-core machine.
"""
import argparse, concurrent.futures, http.client, http.server, json, os, re, select, shutil, signal, socket
import statistics, subprocess, sys, tempfile, threading, time, uuid

HOST = "127.0.0.1"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
# Short timeouts where a probe measures them (the defaults are 10, 10 and 30 s).
HEADER_TIMEOUT, BODY_TIMEOUT, WRITE_TIMEOUT = 3, 3, 2
SLOW_LATENCY_MS, SLOW_SLOTS = 2000, 4  # the engine behind the cancel, case and callback probes
MARGIN = 5.0  # seconds a cut may come after its timeout on a loaded 2-core machine

# Keys of two projects (probes 13, 14), and a batch input line.
KEYS = "a=sk-a,b=sk-b"
AS_A, AS_B = ("Authorization: Bearer sk-a",), ("Authorization: Bearer sk-b",)
LINE = b'{"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"model": "small", "prompt": "hi"}}\n'

# Requests sent to and connections opened with a probed `gpuinfer dev`, counted as they are made; polls are the
# GET /results calls that wait for documents.
USED = {"requests": 0, "polls": 0, "connections": 0}
USED_LOCK = threading.Lock()


def used(requests=0, connections=0, polls=0):
    with USED_LOCK:
        USED["requests"] += requests
        USED["polls"] += polls
        USED["connections"] += connections


def client(port, timeout=60):
    """A keep-alive HTTP client connection to a probed server (its requests are counted by `send`)."""
    used(connections=1)
    return http.client.HTTPConnection(HOST, port, timeout=timeout)


def send(conn, method, path, body=None, headers=None, poll=False):
    used(requests=0 if poll else 1, polls=1 if poll else 0)
    conn.request(method, path, body, headers or {})
    answer = conn.getresponse()
    return answer, answer.read()

# ---------------------------------------------------------------------------------------------------------------
# Processes


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def status_kib(pid, field):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class Simulator:
    """The engine simulator (`src/bin/engine-simulator.rs`) on a free loopback port."""

    def __init__(self, binary, latency_ms, slots):
        self.port = free_port()
        self.process = subprocess.Popen(
            [binary, "--listen", f"{HOST}:{self.port}", "--latency-ms", str(latency_ms), "--slots", str(slots)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.url = self.process.stdout.readline().strip()  # its base URL, once it listens
        if not self.url.startswith("http://127.0.0.1:"):
            raise SystemExit(f"the engine simulator did not start: {self.url!r}")

    def stats(self):
        conn = http.client.HTTPConnection(HOST, self.port, timeout=10)
        conn.request("GET", "/simulator/stats")
        return json.loads(conn.getresponse().read())

    def stop(self):
        stop(self.process)


class EngineLog:
    """A loopback proxy in front of an engine that notes each generation asked of it (when, and its body), so a
    probe can tell which requests reached the engine: the simulator's /simulator/stats only counts them."""

    def __init__(self, upstream_port):
        self.calls, self.lock = [], threading.Lock()
        log = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def forward(self, method):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if method == "POST":
                    with log.lock:
                        log.calls.append((time.monotonic(), body.decode("utf-8", "replace").lower()))
                try:
                    conn = http.client.HTTPConnection(HOST, upstream_port, timeout=300)
                    headers = {"Content-Type": self.headers.get("Content-Type", "application/json")}
                    conn.request(method, self.path, body, headers)
                    answer = conn.getresponse()
                    data = answer.read()
                    self.send_response(answer.status)
                    self.send_header("Content-Type", answer.getheader("Content-Type", "application/json"))
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    self.close_connection = True  # the worker dropped its call (a cancel): nothing to answer

            def do_GET(self):
                self.forward("GET")

            def do_POST(self):
                self.forward("POST")

        self.server = http.server.ThreadingHTTPServer((HOST, 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://{HOST}:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def arrivals(self, request_id):
        """When the engine was asked to generate for `request_id` (its prompts carry the id)."""
        with self.lock:
            return [at for at, body in self.calls if request_id.lower() in body]

    def stop(self):
        self.server.shutdown()


class Dev:
    """One `gpuinfer dev` on a free loopback port and a temporary data directory."""

    def __init__(self, binary, engine_url, logs, name, flags=(), data=None):
        self.binary, self.engine_url, self.flags, self.name = binary, engine_url, list(flags), name
        self.data = data or tempfile.mkdtemp(prefix=f"gpuinfer-probe-{name}-", dir=logs)
        self.logs = logs
        self.starts = 0
        self.start()

    def start(self):
        self.port = free_port()
        self.starts += 1
        self.log = os.path.join(self.logs, f"dev-{self.name}-{self.starts}.log")
        self.process = subprocess.Popen(
            [self.binary, "dev", "--listen", f"{HOST}:{self.port}", "--data-dir", self.data,
             "--small-engine-url", self.engine_url, "--classifier", "none", "--webhook-secret", SECRET,
             *self.flags],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "w"))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"gpuinfer dev ({self.name}) exited {self.process.returncode}; see {self.log}")
            try:
                conn = http.client.HTTPConnection(HOST, self.port, timeout=1)
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    return
            except OSError:
                time.sleep(0.1)
        raise SystemExit(f"gpuinfer dev ({self.name}) does not answer on port {self.port}; see {self.log}")

    @property
    def pid(self):
        return self.process.pid

    def alive(self):
        return self.process.poll() is None

    def stop(self):
        stop(self.process)


def stop(process):
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class RssPeak:
    """VmRSS peak of the processes `pids` while the block runs: VmHWM after resetting it (`clear_refs` 5), and
    VmRSS sampled every 20 ms where that reset is not allowed."""

    def __init__(self, *pids):
        self.pids, self.peak, self.running, self.cleared = list(pids), 0, True, {}

    def add(self, pid):
        """Watches `pid` too from now on (a restarted process)."""
        self.pids.append(pid)
        self.cleared[pid] = self.reset(pid)

    @staticmethod
    def reset(pid):
        try:
            with open(f"/proc/{pid}/clear_refs", "w") as f:
                f.write("5")
            return True
        except OSError:
            return False

    def sample(self):
        for pid in self.pids:
            self.peak = max(self.peak, status_kib(pid, "VmRSS"))

    def __enter__(self):
        self.cleared.update({pid: self.reset(pid) for pid in self.pids})
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return self

    def run(self):
        while self.running:
            self.sample()
            for pid in self.pids:
                if self.cleared.get(pid):
                    self.peak = max(self.peak, status_kib(pid, "VmHWM"))
            time.sleep(0.02)

    def __exit__(self, *exc):
        self.running = False
        self.thread.join()
        self.sample()

    @property
    def mib(self):
        return self.peak / 1024


# ---------------------------------------------------------------------------------------------------------------
# HTTP over raw sockets: what a hostile client sends, byte for byte


def request(method, path, body=b"", content_type="application/json", headers=(), close=True, length=None):
    used(requests=1)
    if isinstance(body, str):
        body = body.encode()
    target = path.encode() if isinstance(path, str) else path  # bytes: a target that is not UTF-8
    lines = [method.encode() + b" " + target + b" HTTP/1.1", b"Host: 127.0.0.1"]
    if close:
        lines.append(b"Connection: close")
    if content_type:
        lines.append(f"Content-Type: {content_type}".encode())
    if body or length is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body) if length is None else length}".encode())
    lines += [h.encode() for h in headers]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def connect(port, rcvbuf=None, timeout=10):
    used(connections=1)
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(timeout)
    s.connect((HOST, port))
    return s


def read_until_closed(s, timeout):
    """Everything the server sends until it closes the connection, and whether it closed within `timeout`."""
    data, deadline = bytearray(), time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return bytes(data), False
        s.settimeout(left)
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            return bytes(data), False
        except OSError:  # reset: closed
            return bytes(data), True
        if not chunk:
            return bytes(data), True
        data += chunk


def exchange(port, data, timeout=15):
    """Sends `data` on a connection of its own; (answer bytes, closed, seconds)."""
    started = time.monotonic()
    s = connect(port)
    try:
        try:
            s.sendall(data)
        except OSError:
            pass  # refused before the whole body went: its answer says why
        answer, closed = read_until_closed(s, timeout)
    finally:
        s.close()
    return answer, closed, time.monotonic() - started


class Answer:
    def __init__(self, raw):
        self.raw = raw
        head, _, rest = raw.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        match = re.match(rb"HTTP/1\.[01] (\d{3})", lines[0]) if lines else None
        self.status = int(match.group(1)) if match else None
        self.headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            self.headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
        if "content-length" in self.headers:
            self.body = rest[:int(self.headers["content-length"])]
        elif self.headers.get("transfer-encoding", "").lower() == "chunked":
            self.body = dechunk(rest)
        else:
            self.body = rest
        try:
            self.json = json.loads(self.body)
        except ValueError:
            self.json = None

    def error(self):
        """The error message of a JSON refusal, in the API's shape or OpenAI's."""
        if not isinstance(self.json, dict):
            return None
        error = self.json.get("error")
        return error.get("message") if isinstance(error, dict) else error


def answers(raw):
    """Every answer on a connection, in order (each framed by its Content-Length)."""
    found = []
    while raw.startswith(b"HTTP/1."):
        answer = Answer(raw)
        found.append(answer)
        head = raw.find(b"\r\n\r\n")
        if head < 0 or "content-length" not in answer.headers:
            break
        raw = raw[head + 4 + int(answer.headers["content-length"]):]
    return found


def dechunk(data):
    out = bytearray()
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out += data[:size]
        data = data[size + 2:]
    return bytes(out)


def call(port, method, path, body=b"", **kw):
    raw, _, seconds = exchange(port, request(method, path, body, **kw))
    answer = Answer(raw)
    answer.seconds = seconds
    return answer


def multipart(fields, boundary="probeform"):
    """A multipart/form-data body from (name, value, filename or None) fields."""
    parts = []
    for name, value, filename in fields:
        if isinstance(value, str):
            value = value.encode()
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        parts.append(f"--{boundary}\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + value + b"\r\n")
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def post_form(port, path, fields):
    body, content_type = multipart(fields)
    return call(port, "POST", path, body, content_type=content_type)


def watch_until_closed(sockets, timeout):
    """For each socket, what the server sent and when (monotonic) it closed the connection, None if it did not
    within `timeout`."""
    data = {s: bytearray() for s in sockets}
    closed_at = {s: None for s in sockets}
    deadline = time.monotonic() + timeout
    open_ = list(sockets)
    while open_ and time.monotonic() < deadline:
        readable, _, _ = select.select(open_, [], [], max(0.0, min(0.5, deadline - time.monotonic())))
        for s in readable:
            try:
                chunk = s.recv(65536)
            except OSError:
                chunk = b""
            if chunk:
                data[s] += chunk
            else:
                closed_at[s] = time.monotonic()
                open_.remove(s)
    return [(bytes(data[s]), closed_at[s]) for s in sockets]


def new_id():
    return str(uuid.uuid4())


def wait_results(port, ids, seconds, threads=1):
    """The result documents of `ids` (id → document) once all exist or `seconds` have passed."""
    documents, pending, deadline = {}, list(ids), time.monotonic() + seconds
    lock = threading.Lock()

    def poll(share):
        conn = client(port, 30)
        left = list(share)
        while left and time.monotonic() < deadline:
            still = []
            for request_id in left:
                try:
                    answer, body = send(conn, "GET", f"/results/{request_id}", poll=True)
                except (OSError, http.client.HTTPException):
                    conn = client(port, 30)
                    still.append(request_id)
                    continue
                if answer.status == 200:
                    with lock:
                        documents[request_id] = json.loads(body)
                else:
                    still.append(request_id)
            left = still
            if left:
                time.sleep(0.2)

    shares = [pending[i::threads] for i in range(threads)]
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(poll, shares))
    return documents


# ---------------------------------------------------------------------------------------------------------------
# The probes; each returns its row: figures, the table's cells, and the promises that did not hold


class Row:
    def __init__(self, number, name):
        self.number, self.name, self.failed = number, name, []
        self.figures = self.requests = self.held = self.refuse = ""
        self.rss = 0.0

    def must(self, condition, what):
        if not condition:
            self.failed.append(what)
        return condition

    def line(self):
        requests, connections = self.requests.split(" / ")
        requests = requests.replace(" + ", " requests + ") if " + " in requests else f"{requests} requests"
        return (f"probe {self.number} {self.name}: {self.figures}; {requests} on {connections} connections; "
                f"RSS peak {self.rss:.0f} MiB")


def probe_malformed(dev):
    row = Row(1, "malformed forms")
    uid = new_id()
    deep = "[" * 100_000 + "]" * 100_000
    ok = '{"prompt": "hello"}'
    infer_bodies = [
        ("empty body", ""), ("null", "null"), ("an array", "[]"), ("a number", "1"), ("a string", '"hello"'),
        ("truncated JSON", '{"prompt": "hi"'), ("not JSON", "prompt=hello"), ("non-UTF-8", b'{"prompt": "\xff\xfe"}'),
        ("prompt a number", '{"prompt": 5}'), ("prompt empty", '{"prompt": ""}'), ("prompt null", '{"prompt": null}'),
        ("maxTokens 1e400", '{"prompt": "x", "maxTokens": 1e400}'),
        ("maxTokens 30 digits", '{"prompt": "x", "maxTokens": 123456789012345678901234567890}'),
        ("maxTokens -1", '{"prompt": "x", "maxTokens": -1}'), ("maxTokens 1.5", '{"prompt": "x", "maxTokens": 1.5}'),
        ("maxTokens a string", '{"prompt": "x", "maxTokens": "10"}'),
        ("maxTokens 5000", '{"prompt": "x", "maxTokens": 5000}'),
        ("temperature 3", '{"prompt": "x", "temperature": 3}'),
        ("temperature NaN", '{"prompt": "x", "temperature": NaN}'),
        ("topP 0", '{"prompt": "x", "topP": 0}'), ("unknown field", '{"prompt": "x", "bogus": 1}'),
        ("empty field name", '{"prompt": "x", "": 1}'), ("field given twice", '{"prompt": "x", "prompt": "y"}'),
        ("prompt nested 100,000 deep", '{"prompt": ' + deep + "}"), ("body nested 100,000 deep", deep),
        ("messages empty", '{"messages": []}'),
        ("messages bad role", '{"messages": [{"role": "root", "content": "x"}]}'),
        ("messages nested arrays", '{"messages": [[[[["x"]]]]]}'),
        ("prompt and messages", '{"prompt": "x", "messages": [{"role": "user", "content": "x"}]}'),
        ("requestId not a UUID", '{"prompt": "x", "requestId": "not-a-uuid"}'),
        ("requestId UUID v1", '{"prompt": "x", "requestId": "550e8400-e29b-11d4-a716-446655440000"}'),
        ("requestId a number", '{"prompt": "x", "requestId": 42}'),
        ("requestId traversal", '{"prompt": "x", "requestId": "../../etc/passwd"}'),
        ("deadlineSeconds 0", '{"prompt": "x", "deadlineSeconds": 0}'),
        ("deadline not RFC 3339", '{"prompt": "x", "deadline": "tomorrow"}'),
        ("both deadline fields", '{"prompt": "x", "deadlineSeconds": 60, "deadline": "2030-01-01T00:00:00Z"}'),
        ("route medium", '{"prompt": "x", "route": "medium"}'),
        ("priority urgent", '{"prompt": "x", "priority": "urgent"}'),
        ("callbackUrl ftp", '{"prompt": "x", "callbackUrl": "ftp://example.com/x"}'),
        ("callbackUrl credentials", '{"prompt": "x", "callbackUrl": "https://u:p@example.com/x"}'),
        ("callbackUrl not a URL", '{"prompt": "x", "callbackUrl": "::::"}'),
    ]
    cases = [(f"POST /infer {name}", request("POST", "/infer", body)) for name, body in infer_bodies]
    cases += [
        ("POST /infer text/plain", request("POST", "/infer", ok, content_type="text/plain")),
        # A missing Content-Type is read as JSON (as `curl -d` sends it): a body that is not JSON is still refused.
        ("POST /infer no content type, not JSON", request("POST", "/infer", "prompt=hello", content_type=None)),
        ("POST /infer form type, not JSON", request("POST", "/infer", "prompt=hello",
                                                   content_type="application/x-www-form-urlencoded")),
        ("POST /infer over 1 MiB (announced)", request("POST", "/infer", b'{"prompt": "' + b"x" * 1000,
                                                       length=1_100_000)),
        ("POST /infer/batch an object", request("POST", "/infer/batch", ok)),
        ("POST /infer/batch empty array", request("POST", "/infer/batch", "[]")),
        ("POST /infer/batch 101 entries", request("POST", "/infer/batch", "[" + ",".join([ok] * 101) + "]")),
        ("POST /infer/batch nested 100,000 deep", request("POST", "/infer/batch", deep)),
        ("POST /infer/batch not JSON", request("POST", "/infer/batch", "[{")),
        ("POST /infer/batch over 5 MiB (announced)", request("POST", "/infer/batch", b"[", length=6_000_000)),
    ]
    bad_ids = ["not-a-uuid", "550e8400-e29b-41d4-a716-44665544000", "550e8400-e29b-11d4-a716-446655440000",
               "550e8400e29b41d4a716446655440000", "%7B" + uid + "%7D", "..%2F..%2Fetc%2Fpasswd", "%2e%2e",
               "%zz", "%00", "%C0%AE%C0%AE", "urn:uuid:" + uid, uid + "%20", "x" * 5000]
    cases += [(f"GET /results/{i[:24]}", request("GET", f"/results/{i}", content_type=None)) for i in bad_ids]
    cases += [(f"DELETE /results/{i[:24]}", request("DELETE", f"/results/{i}", content_type=None))
              for i in bad_ids[:3] + ["%zz"]]
    cases += [
        ("DELETE /results/ an id never accepted", request("DELETE", f"/results/{new_id()}", content_type=None)),
        ("GET /results/ non-UTF-8 bytes", request("GET", b"/results/\xff\xfe", content_type=None)),
        ("GET /results/a b (space)", request("GET", "/results/a b", content_type=None)),
        ("GET /../../etc/passwd", request("GET", "/../../etc/passwd", content_type=None)),
        ("GET 70 KiB path", request("GET", "/results/" + "a" * 70_000, content_type=None)),
        ("GET 120 headers", request("GET", "/healthz", content_type=None,
                                    headers=[f"X-Pad-{i}: {i}" for i in range(120)])),
        ("GET /infer/x", request("GET", "/infer/x", content_type=None)),
        ("PUT /infer", request("PUT", "/infer", ok)), ("PATCH /healthz", request("PATCH", "/healthz", "")),
        ("BREW /infer", request("BREW", "/infer", content_type=None)),
    ]
    for path in ["/v1/files", "/v1/batches"]:
        for query in ["limit=many", "limit=-1", "limit=100000000000000000000000", "limit=", "after=", "after=&limit=2"]:
            cases.append((f"GET {path}?{query}", request("GET", f"{path}?{query}", content_type=None)))
    form_no_file, ctype = multipart([("purpose", "batch", None)])
    form_bad_purpose, _ = multipart([("purpose", "fine-tune", None), ("file", '{"a": 1}\n', "in.jsonl")])
    form_bad_line, _ = multipart([("purpose", "batch", None), ("file", '{"a": 1}\nnot json\n', "in.jsonl")])
    form_array_line, _ = multipart([("purpose", "batch", None), ("file", "[[[[1]]]]\n", "in.jsonl")])
    cases += [
        ("POST /v1/files JSON body", request("POST", "/v1/files", '{"purpose": "batch"}')),
        ("POST /v1/files multipart without boundary", request("POST", "/v1/files", form_no_file,
                                                                content_type="multipart/form-data")),
        ("POST /v1/files without file", request("POST", "/v1/files", form_no_file, content_type=ctype)),
        ("POST /v1/files purpose fine-tune", request("POST", "/v1/files", form_bad_purpose, content_type=ctype)),
        ("POST /v1/files a line not JSON", request("POST", "/v1/files", form_bad_line, content_type=ctype)),
        ("POST /v1/files a line of nested arrays", request("POST", "/v1/files", form_array_line, content_type=ctype)),
        ("GET /v1/files/..%2F..%2Fetc%2Fpasswd", request("GET", "/v1/files/..%2F..%2Fetc%2Fpasswd", content_type=None)),
        ("GET /v1/files/file-%00/content", request("GET", "/v1/files/file-%00/content", content_type=None)),
        ("GET /v1/files/%zz", request("GET", "/v1/files/%zz", content_type=None)),
        ("DELETE /v1/files/file-missing", request("DELETE", "/v1/files/file-missing", content_type=None)),
        ("POST /v1/batches not JSON", request("POST", "/v1/batches", "{")),
        ("POST /v1/batches empty object", request("POST", "/v1/batches", "{}")),
        ("POST /v1/batches wrong types", request("POST", "/v1/batches",
                                                 '{"input_file_id": 7, "endpoint": [], "completion_window": 24}')),
        ("POST /v1/batches unknown file", request("POST", "/v1/batches", '{"input_file_id": "file-missing", '
                                                  '"endpoint": "/v1/chat/completions", "completion_window": "24h"}')),
        ("POST /v1/batches endpoint /v1/embeddings", request(
            "POST", "/v1/batches",
            '{"input_file_id": "file-x", "endpoint": "/v1/embeddings", "completion_window": "24h"}')),
        ("POST /v1/batches window 48h", request("POST", "/v1/batches", '{"input_file_id": "file-x", '
                                                '"endpoint": "/v1/chat/completions", "completion_window": "48h"}')),
        ("GET /v1/batches/../x", request("GET", "/v1/batches/..%2Fx", content_type=None)),
        ("POST /v1/batches/batch_missing/cancel", request("POST", "/v1/batches/batch_missing/cancel", "")),
        ("POST /v1/uploads empty object", request("POST", "/v1/uploads", "{}")),
        ("POST /v1/uploads bytes -1", request("POST", "/v1/uploads", '{"filename": "a.jsonl", "purpose": "batch", '
                                              '"bytes": -1, "mime_type": "text/jsonl"}')),
        ("POST /v1/uploads bytes 1e30", request("POST", "/v1/uploads", '{"filename": "a.jsonl", "purpose": "batch", '
                                                '"bytes": 1e30, "mime_type": "text/jsonl"}')),
        ("POST /v1/uploads bytes over 200 MB", request(
            "POST", "/v1/uploads",
            '{"filename": "a.jsonl", "purpose": "batch", "bytes": 209715201, "mime_type": "text/jsonl"}')),
        ("POST /v1/uploads/upload_missing/parts", request("POST", "/v1/uploads/upload_missing/parts",
                                                          *multipart([("data", "x", "p")]))),
        ("POST /v1/uploads/%zz/complete", request("POST", "/v1/uploads/%zz/complete", '{"part_ids": []}')),
    ]
    counts = {"4xx JSON": 0}
    problems, times = [], []
    with RssPeak(dev.pid) as rss:
        for name, data in cases:
            raw, _, seconds = exchange(dev.port, data)
            times.append(seconds)
            answer = Answer(raw)
            if answer.status is None:
                kind = "no answer"
            elif answer.status >= 500:
                kind = "5xx"
            elif not 400 <= answer.status < 500:
                kind = f"{answer.status}"
            elif answer.error() is None:
                kind = "non-JSON"
            else:
                kind = "4xx JSON"
            counts[kind] = counts.get(kind, 0) + 1
            if kind != "4xx JSON":
                problems.append(f"{name} → {answer.status} {answer.body[:120]!r}")
    row.rss = rss.mib
    crashed = not dev.alive()
    bad = len(cases) - counts["4xx JSON"]
    other = bad - counts.get("non-JSON", 0) - counts.get("5xx", 0)
    row.figures = (f"{len(cases)} variants, each on a connection of its own: {counts['4xx JSON']} answered 4xx with a "
                   f"JSON error, {counts.get('non-JSON', 0)} non-JSON, {counts.get('5xx', 0)} 5xx, {other} other; "
                   f"dev {'crashed' if crashed else 'alive'}; "
                   f"answered in {statistics.median(times) * 1000:.1f} ms median, {max(times) * 1000:.0f} ms max")
    for problem in problems:
        print(f"  probe 1: {problem}")
    row.held = f"{counts['4xx JSON']}/{len(cases)} 4xx JSON, 0 crash" if not crashed else "dev crashed"
    row.refuse = f"{statistics.median(times) * 1000:.1f} ms median, {max(times) * 1000:.0f} ms max"
    row.must(bad == 0, f"every malformed request gets a 4xx JSON answer ({bad} did not)")
    row.must(not crashed, "gpuinfer dev survives the malformed requests")
    return row


def probe_load(dev, simulator, total=2000, clients=100):
    row = Row(2, "load")
    before = simulator.stats()["calls"]
    ids = [new_id() for _ in range(total)]
    statuses, lock = {}, threading.Lock()

    def producer(share):
        conn = client(dev.port)
        for request_id in share:
            body = json.dumps({"requestId": request_id, "prompt": f"load {request_id}", "maxTokens": 8})
            try:
                status = send(conn, "POST", "/infer", body, {"Content-Type": "application/json"})[0].status
            except (OSError, http.client.HTTPException) as error:
                status = type(error).__name__
                conn = client(dev.port)
            with lock:
                statuses[status] = statuses.get(status, 0) + 1

    started = time.monotonic()
    with RssPeak(dev.pid) as rss:
        with concurrent.futures.ThreadPoolExecutor(clients) as pool:
            list(pool.map(producer, [ids[i::clients] for i in range(clients)]))
        accepted_in = time.monotonic() - started
        documents = wait_results(dev.port, ids, 120, threads=clients)
        done_in = time.monotonic() - started
    row.rss = rss.mib
    calls = simulator.stats()["calls"] - before
    accepted = statuses.get(202, 0)
    success = sum(1 for d in documents.values() if d.get("status") == "success")
    row.figures = (f"{total} POST /infer on {clients} keep-alive connections: {accepted} accepted (answers {statuses}) "
                   f"in {accepted_in:.1f} s ({total / accepted_in:.0f}/s); {len(documents)} result documents "
                   f"({success} success) {done_in:.1f} s after the first POST (polled on {clients} more connections); "
                   f"{calls} engine calls")
    row.held = f"{accepted} accepted, {len(documents)} documents, {calls} engine calls"
    row.refuse = f"— (all accepted in {accepted_in:.1f} s, all done in {done_in:.1f} s)"
    row.must(accepted == total, f"all {total} requests accepted ({accepted} were)")
    row.must(len(documents) == accepted, f"every accepted request has a document ({len(documents)} of {accepted})")
    row.must(calls >= accepted, f"every accepted request reached the engine ({calls} engine calls)")
    return row


def probe_stalled_readers(binary, simulator, logs, cap=8):
    row = Row(3, "stalled readers")
    dev = Dev(binary, simulator.url, logs, "capped",
              ["--http-max-connections", str(cap), "--http-write-timeout-seconds", str(WRITE_TIMEOUT),
               "--http-header-timeout-seconds", "60"])
    try:
        pad = "x" * 900
        lines = [json.dumps({"custom_id": f"line-{n}", "method": "POST", "url": "/v1/chat/completions",
                             "body": {"model": "small", "messages": [{"role": "user", "content": f"{n} {pad}"}]}})
                 for n in range(21_000)]
        content = ("\n".join(lines) + "\n").encode()
        body, ctype = multipart([("purpose", "batch", None), ("file", content, "input.jsonl")])
        with RssPeak(dev.pid) as rss:
            uploaded = Answer(exchange(dev.port, request("POST", "/v1/files", body, content_type=ctype), 120)[0])
            row.must(uploaded.status == 200, f"the {len(content) / 1e6:.0f} MB upload is stored "
                                             f"({uploaded.status} {uploaded.body[:200]!r})")
            file_id = (uploaded.json or {}).get("id", "file-missing")
            downloads = []
            for _ in range(cap):
                s = connect(dev.port, rcvbuf=16384, timeout=10)
                s.sendall(request("GET", f"/v1/files/{file_id}/content", content_type=None, close=False))
                status = b""
                while len(status) < 12:
                    chunk = s.recv(12 - len(status))
                    if not chunk:
                        break
                    status += chunk
                row.must(status == b"HTTP/1.1 200", f"each download starts ({status!r})")
                downloads.append(s)
            stalled = time.monotonic()
            health = connect(dev.port, timeout=30)
            health.sendall(request("GET", "/healthz", content_type=None))
            answer, _ = read_until_closed(health, 30)
            waited = time.monotonic() - stalled
            served = Answer(answer).status == 200
            # Read nothing until every download is past its write timeout: reading one the server still holds would
            # let it go on.
            time.sleep(WRITE_TIMEOUT + 1)
            cut, received = 0, []
            for s in downloads:
                data, closed = read_until_closed(s, MARGIN)
                received.append(len(data) + 12)
                cut += closed and len(data) + 12 < len(content)
                s.close()
        row.rss = rss.mib
        row.figures = (f"a {len(content) / 1e6:.1f} MB file, {cap} downloads never read under a cap of {cap} "
                       f"connections, write timeout {WRITE_TIMEOUT} s: GET /healthz answered "
                       f"{'200' if served else 'not'} {waited:.1f} s after they stalled; {cut}/{cap} downloads dropped "
                       f"(each had taken at most {max(received) / 1e6:.1f} MB)")
        row.held = f"healthz served; {cut}/{cap} stalled downloads dropped"
        row.refuse = f"healthz after {waited:.1f} s (write timeout {WRITE_TIMEOUT} s)"
        row.must(served and waited <= WRITE_TIMEOUT + MARGIN,
                 f"GET /healthz is served within the write timeout with {cap} downloads stalled ({waited:.1f} s)")
        row.must(cut == cap, f"every stalled download is dropped ({cut} of {cap})")
    finally:
        dev.stop()
    return row


def probe_body_budget(dev):
    row = Row(4, "borrowed body budget")
    stalled = []
    with RssPeak(dev.pid) as rss:
        for length in [5 * 1024 * 1024] * 25 + [1024 * 1024] * 3:
            s = connect(dev.port, timeout=30)
            s.sendall(request("POST", "/infer/batch", b"[", close=False, length=length))
            stalled.append((s, time.monotonic()))
        time.sleep(0.5)  # the server has read their headers and their byte
        tries, accepted, latencies = 10, 0, []
        for _ in range(tries):
            answer = call(dev.port, "POST", "/infer", '{"prompt": "beside the stalled bodies"}')
            accepted += answer.status == 202
            latencies.append(answer.seconds)
        sockets = [s for s, _ in stalled]
        readable, _, _ = select.select(sockets, [], [], 0)
        early = len(readable)  # answered or closed while the tries ran: the tries were not beside all of them
        cut_after, kinds = [], {}
        for (s, sent), (data, closed_at) in zip(stalled, watch_until_closed(sockets, BODY_TIMEOUT + 2 * MARGIN)):
            s.close()
            if closed_at is not None:
                cut_after.append(closed_at - sent)
            answer = Answer(data)
            key = f"{answer.status} JSON" if answer.error() else f"{answer.status}"
            kinds[key] = kinds.get(key, 0) + 1
    row.rss = rss.mib
    cut = len(cut_after)
    slowest = max(cut_after) if cut_after else float("nan")
    row.figures = (f"25 × 5 MiB + 3 × 1 MiB announced (the whole 128 MiB budget), one byte each sent: "
                   f"{accepted}/{tries} POST /infer beside them got 202 ({max(latencies) * 1000:.0f} ms at most); "
                   f"{cut}/28 stalled bodies cut {min(cut_after or [0]):.2f}–{slowest:.2f} s after they began "
                   f"(body timeout {BODY_TIMEOUT} s), answered {kinds}")
    row.held = f"{accepted}/{tries} POST /infer 202; {cut}/28 stalled cut"
    row.refuse = f"stalled cut after {min(cut_after or [0]):.2f}–{slowest:.2f} s (body timeout {BODY_TIMEOUT} s)"
    row.must(accepted == tries, f"a POST /infer beside budget-announcing stalled bodies gets 202 ({accepted}/{tries})")
    row.must(early == 0, f"the stalled bodies were still held while the tries ran ({early} were already cut)")
    row.must(cut == 28 and slowest <= BODY_TIMEOUT + MARGIN,
             f"every stalled body is cut by its body timeout ({cut}/28, slowest {slowest:.1f} s)")
    return row


def probe_slow_clients(dev):
    row = Row(5, "slow headers, trickled body")
    outcome = {}

    def nothing():
        s, started = connect(dev.port, timeout=30), time.monotonic()
        data, closed = read_until_closed(s, HEADER_TIMEOUT + 2 * MARGIN)
        outcome["nothing sent"] = (time.monotonic() - started, closed, Answer(data))

    def half_header():
        s, started = connect(dev.port, timeout=30), time.monotonic()
        used(requests=1)
        s.sendall(b"POST /infer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
        data, closed = read_until_closed(s, HEADER_TIMEOUT + 2 * MARGIN)
        outcome["half a header"] = (time.monotonic() - started, closed, Answer(data))

    def trickle(name="body at 1 byte/s", path="/infer", content_type="application/json",
                body=b'{"prompt": "' + b"x" * 86 + b'"}'):
        s = connect(dev.port, timeout=30)
        s.sendall(request("POST", path, b"", content_type=content_type, length=len(body)))
        started, sent, closed, data = time.monotonic(), 0, False, b""
        while time.monotonic() - started < BODY_TIMEOUT + 2 * MARGIN and sent < len(body):
            try:
                s.sendall(body[sent:sent + 1])
                sent += 1
            except OSError:
                break
            readable, _, _ = select.select([s], [], [], 1.0)
            if readable:
                break
        data, closed = read_until_closed(s, 2 * MARGIN)
        outcome[name] = (time.monotonic() - started, closed, Answer(data), sent)

    form, form_type = multipart([("purpose", "batch", None), ("file", LINE * 2, "in.jsonl")])
    trickle_form = lambda: trickle("multipart at 1 byte/s", "/v1/files", form_type, form)
    with RssPeak(dev.pid) as rss:
        threads = [threading.Thread(target=f) for f in (nothing, half_header, trickle, trickle_form)]
        for t in threads: t.start()
        for t in threads: t.join()
    row.rss = rss.mib
    order = ["nothing sent", "half a header", "body at 1 byte/s", "multipart at 1 byte/s"]
    outcome = {name: outcome[name] for name in order}
    parts = []
    for name, (seconds, closed, answer, *rest) in outcome.items():
        answered = f"{answer.status} {answer.error()!r}" if answer.status else "no answer"
        extra = f", {rest[0]} bytes sent" if rest else ""
        parts.append(f"{name}: {'closed' if closed else 'still open'} after {seconds:.1f} s ({answered}{extra})")
    row.figures = (f"header timeout {HEADER_TIMEOUT} s, body timeout {BODY_TIMEOUT} s: " + "; ".join(parts))
    row.held = f"{sum(o[1] for o in outcome.values())}/4 closed"
    row.refuse = ", ".join(f"{name} {o[0]:.2f} s" for name, o in outcome.items())
    for name, timeout in [("nothing sent", HEADER_TIMEOUT), ("half a header", HEADER_TIMEOUT),
                          ("body at 1 byte/s", BODY_TIMEOUT), ("multipart at 1 byte/s", BODY_TIMEOUT)]:
        seconds, closed = outcome[name][:2]
        row.must(closed and seconds <= timeout + MARGIN and seconds + 0.5 >= timeout,
                 f"a connection with {name} is closed at its {timeout} s timeout ({seconds:.1f} s, closed {closed})")
    trickled = outcome["body at 1 byte/s"][2]
    row.must(trickled.status == 400 and trickled.error() is not None,
             f"a trickled body gets a JSON 400 ({trickled.status} {trickled.body[:120]!r})")
    trickled_form = outcome["multipart at 1 byte/s"][2]
    row.must(trickled_form.status == 400 and "came slower" in (trickled_form.error() or ""),
             f"a trickled upload gets a 400 naming the pace ({trickled_form.status} {trickled_form.body[:160]!r})")
    return row


def probe_both_lengths(dev):
    row = Row(6, "Transfer-Encoding with Content-Length")
    post = b"POST /infer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    chunked = b'13\r\n{"prompt": "hello"}\r\n0\r\n\r\n'
    pipelined = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    plain_body = b'{"prompt": "first"}'
    plain = post + b"Content-Length: %d\r\n\r\n" % len(plain_body) + plain_body
    cases = {
        "Content-Length first": post + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked + pipelined,
        "Transfer-Encoding first":
            post + b"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n" + chunked + pipelined,
        "after a request on the connection": plain + post + b"Transfer-Encoding: chunked\r\nContent-Length: 99\r\n\r\n"
                                             + chunked + pipelined,
    }
    results, times = [], []
    with RssPeak(dev.pid) as rss:
        for name, data in cases.items():
            used(requests=data.count(b" HTTP/1.1\r\n"))
            raw, closed, seconds = exchange(dev.port, data, 10)
            times.append(seconds)
            # The last answer on the connection is the refusal; one before it answers the plain request.
            given = answers(raw)
            refusal = given[-1] if given else Answer(b"")
            expected = [202, 400] if name.startswith("after") else [400]
            held = ([a.status for a in given] == expected and closed and (refusal.error() or "").startswith(
                "request: Transfer-Encoding and Content-Length"))
            results.append(held)
            print(f"  probe 6: {name}: answers {[a.status for a in given]}, last {refusal.error()!r}, "
                  f"{'closed' if closed else 'left open'}")
            row.must(held, f"both lengths ({name}): JSON 400, connection closed, pipelined request unanswered")
    row.rss = rss.mib
    row.figures = (f"{len(cases)} connections giving both lengths (either order, and after a request): "
                   f"{sum(results)}/{len(cases)} refused with a JSON 400 and closed, the pipelined GET /healthz never "
                   f"answered; {max(times) * 1000:.0f} ms at most")
    row.held = f"{sum(results)}/{len(cases)} JSON 400 + closed"
    row.refuse = f"{max(times) * 1000:.0f} ms"
    return row


def probe_case(dev, engine):
    row = Row(7, "ids differing in case")
    first, second = new_id(), new_id()
    prompt = '{{"requestId": "{}", "prompt": "case {}"}}'
    with RssPeak(dev.pid) as rss:
        lower = call(dev.port, "POST", "/infer", prompt.format(first, first))
        upper = call(dev.port, "POST", "/infer", prompt.format(first.upper(), first))
        bulk = call(dev.port, "POST", "/infer/batch",
                    "[" + prompt.format(second, second) + "," + prompt.format(second.upper(), second) + "]")
        cancel_other = call(dev.port, "DELETE", f"/results/{first.upper()}", content_type=None)
        documents = wait_results(dev.port, [first, second], 60)
        upper_after = call(dev.port, "POST", "/infer", prompt.format(first.upper(), first))
        time.sleep(1)
    row.rss = rss.mib
    entries = [e.get("status") for e in (bulk.json or {}).get("results", [])]
    calls = {request_id: len(engine.arrivals(request_id)) for request_id in (first, second)}
    ended = [documents.get(i, {}).get("status") for i in (first, second)]
    row.figures = (f"lower case {lower.status}, upper case {upper.status} (holder {(upper.json or {}).get('status')}), "
                   f"again once done {upper_after.status} (holder {(upper_after.json or {}).get('status')}); "
                   f"both spellings in one /infer/batch: {bulk.status} with entries {entries}; cancel in the other "
                   f"spelling {cancel_other.status}; documents {ended}; "
                   f"engine calls per id {list(calls.values())}")
    row.held = f"409 ×2, batch {entries}, engine calls {list(calls.values())}"
    row.refuse = f"{upper.seconds * 1000:.0f} ms (409)"
    row.must(lower.status == 202 and upper.status == 409 and upper_after.status == 409,
             f"an upper-case spelling of an accepted id is refused 409 ({lower.status}, {upper.status}, "
             f"{upper_after.status})")
    row.must(sorted(entries) == [202, 400], f"two spellings in one batch: one refused ({entries})")
    row.must(cancel_other.status == 404, f"a cancel in the other spelling gets 404 ({cancel_other.status})")
    row.must(all(d.get("status") == "success" for d in documents.values()) and len(documents) == 2,
             "both ids end in a success document")
    row.must(list(calls.values()) == [1, 1], f"each id reaches the engine once ({list(calls.values())})")
    return row


def probe_cancel(dev, engine, simulator, total=50):
    row = Row(8, "cancel")
    ids = [new_id() for _ in range(total)]
    before = simulator.stats()["calls"]
    conn = client(dev.port, 30)
    accepted = 0
    with RssPeak(dev.pid) as rss:
        for request_id in ids:
            body = json.dumps({"requestId": request_id, "prompt": f"cancel probe {request_id}", "maxTokens": 8})
            accepted += send(conn, "POST", "/infer", body, {"Content-Type": "application/json"})[0].status == 202
        canceled, window, times = ids[1::2], {}, []
        statuses = {}
        for request_id in canceled:
            sent = time.monotonic()
            answer, body = send(conn, "DELETE", f"/results/{request_id}")
            document = json.loads(body or b"null")
            window[request_id] = (sent, time.monotonic())
            times.append(window[request_id][1] - sent)
            code = (document or {}).get("error", {}).get("code") if answer.status == 200 else None
            key = f"{answer.status} {code}" if code else f"{answer.status}"
            statuses[key] = statuses.get(key, 0) + 1
        documents = wait_results(dev.port, ids, 90)
        time.sleep(1.5)  # anything still on its way to the engine arrives
    row.rss = rss.mib
    kept = [i for i in ids if i not in window]
    canceled_docs = sum(1 for i in canceled if documents.get(i, {}).get("error", {}).get("code") == "canceled")
    success_canceled = sum(1 for i in canceled if documents.get(i, {}).get("status") == "success")
    kept_success = sum(1 for i in kept if documents.get(i, {}).get("status") == "success")
    at_engine, after = 0, 0
    kept_calls = sum(len(engine.arrivals(i)) for i in kept)
    canceled_calls = sum(len(engine.arrivals(i)) for i in canceled)
    for request_id in canceled:
        sent, answered = window[request_id]
        arrivals = engine.arrivals(request_id)
        at_engine += any(at <= answered for at in arrivals)
        after += sum(1 for at in arrivals if at > answered)
    calls = simulator.stats()["calls"] - before
    row.figures = (f"{total} POST /infer ({accepted} accepted) to an engine of {SLOW_SLOTS} slots at "
                   f"{SLOW_LATENCY_MS / 1000:.0f} s each, every second one DELETEd at once: answers {statuses} in "
                   f"{max(times) * 1000:.0f} ms at most; {canceled_docs}/25 canceled documents, {success_canceled} "
                   f"canceled ones ended success; {at_engine} of the canceled were already at the engine when "
                   f"canceled, {after} engine calls for a canceled one after its cancel; the other 25: {kept_success} "
                   f"success; {calls} engine calls in all ({kept_calls} for the 25 others, {canceled_calls} for the "
                   f"canceled)")
    row.held = f"{canceled_docs}/25 canceled, {after} engine calls after a cancel"
    row.refuse = f"cancel answered in {max(times) * 1000:.0f} ms at most"
    row.must(accepted == total and statuses.get("200 canceled", 0) == 25,
             f"every cancel answers 200 with a canceled document ({statuses})")
    row.must(canceled_docs == 25 and success_canceled == 0, f"the 25 canceled end canceled ({canceled_docs}, "
                                                            f"{success_canceled} success)")
    row.must(after == 0, f"a canceled request never reaches the engine after its cancel ({after} calls did)")
    row.must(kept_success == 25, f"the 25 others end success ({kept_success})")
    return row


def probe_uploads(dev):
    row = Row(9, "upload bounds")
    with RssPeak(dev.pid) as rss:
        opened = call(dev.port, "POST", "/v1/uploads", '{"filename": "in.jsonl", "purpose": "batch", "bytes": 100, '
                                                       '"mime_type": "text/jsonl"}')
        upload = (opened.json or {}).get("id", "upload_missing")
        row.must(opened.status == 200, f"an upload of 100 bytes opens ({opened.status} {opened.body[:160]!r})")
        part_kib = b'{"pad": "' + b"x" * (1024 - 12) + b'"}\n'
        accepted, refusal, tries = 0, None, 0
        while tries < 20 and refusal is None:
            tries += 1
            answer = post_form(dev.port, f"/v1/uploads/{upload}/parts", [("data", part_kib, "part")])
            if answer.status == 200:
                accepted += 1
            else:
                refusal = answer
        exactly = b'{"pad": "' + b"y" * 88 + b'"}\n'  # 100 bytes
        fits = post_form(dev.port, f"/v1/uploads/{upload}/parts", [("data", exactly, "part")])
        one_more = post_form(dev.port, f"/v1/uploads/{upload}/parts", [("data", b"\n", "part")])
    row.rss = rss.mib
    refused = refusal.status if refusal else None
    message = refusal.error() if refusal else None
    row.figures = (f"an upload opened for 100 bytes, 1 KiB parts added until refused: {accepted} accepted, then "
                   f"{refused} {message!r} ({refusal.seconds * 1000 if refusal else 0:.0f} ms); a 100-byte part "
                   f"then {fits.status}, one byte more {one_more.status}")
    row.held = f"{accepted} parts of 1 KiB accepted ({accepted * 1024} bytes over a 100-byte upload)"
    row.refuse = f"{refusal.seconds * 1000 if refusal else 0:.0f} ms (the first part)"
    row.must(accepted == 0 and refused == 400 and message is not None,
             f"no 1 KiB part is taken by a 100-byte upload ({accepted} were; refusal {refused})")
    row.must(fits.status == 200 and one_more.status == 400,
             f"exactly the bytes announced are taken ({fits.status}, then {one_more.status})")
    return row


def probe_races_and_pages(dev, completes=20):
    row = Row(12, "racing completes, list pages")
    line = b'{"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"model": "small", "prompt": "hi"}}\n'
    with RssPeak(dev.pid) as rss:
        files_before = len((call(dev.port, "GET", "/v1/files").json or {}).get("data", []))
        opened = call(dev.port, "POST", "/v1/uploads", json.dumps(
            {"filename": "race.jsonl", "purpose": "batch", "bytes": len(line), "mime_type": "text/jsonl"}))
        upload = (opened.json or {}).get("id", "upload_missing")
        part = (post_form(dev.port, f"/v1/uploads/{upload}/parts", [("data", line, "part")]).json or {}).get("id")
        body = json.dumps({"part_ids": [part]})
        with concurrent.futures.ThreadPoolExecutor(completes) as pool:
            answers = list(pool.map(lambda _: call(dev.port, "POST", f"/v1/uploads/{upload}/complete", body),
                                    range(completes)))
        files_after = len((call(dev.port, "GET", "/v1/files").json or {}).get("data", []))
        pages = [call(dev.port, "GET", path) for path in
                 ("/v1/files?limit=0", "/v1/files?limit=10001", "/v1/batches?limit=101", "/v1/files?order=up")]
    row.rss = rss.mib
    ok = [answer for answer in answers if answer.status == 200]
    named = {((answer.json or {}).get("file") or {}).get("id") for answer in ok}
    stored = files_after - files_before
    row.figures = (f"{completes} completes of one upload at once: {len(ok)} answered 200 naming {len(named)} "
                   f"file(s), {stored} stored; limit 0, 10001, 101 and order=up: {[p.status for p in pages]}")
    row.held = f"{stored} file(s) from {completes} completes; {sum(p.status == 400 for p in pages)}/4 pages refused"
    row.refuse = f"{max(p.seconds for p in pages) * 1000:.0f} ms (slowest page refusal)"
    row.must(stored == 1 and len(named) == 1, f"one upload stores one file ({stored} stored, {len(named)} named)")
    row.must(all(p.status == 400 for p in pages), f"pages out of range are 400 ({[p.status for p in pages]})")
    return row




def upload_file(dev, key, data=LINE, filename="in.jsonl"):
    body, content_type = multipart([("purpose", "batch", None), ("file", data, filename)])
    return call(dev.port, "POST", "/v1/files", body, content_type=content_type, headers=key)


def median_ms(ask, times=7):
    return statistics.median(ask().seconds for _ in range(times)) * 1000


def probe_projects(dev, foreign=4000, batches=40, readers=8):
    row = Row(13, "project lists, answer memory")
    own = upload_file(dev, AS_B)
    time.sleep(1.5)  # the upkeep (every second) indexes what came before the project index
    b_list = lambda: call(dev.port, "GET", "/v1/files?limit=1", headers=AS_B)
    alone = median_ms(b_list)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        uploaded = list(pool.map(lambda _: upload_file(dev, AS_A).status, range(foreign)))
    among = median_ms(b_list)
    b_sees = [f.get("id") for f in (b_list().json or {}).get("data", [])]
    long_name = upload_file(dev, AS_A, filename="n" * 257)
    utf16 = call(dev.port, "POST", "/infer", '{"prompt": "hi"}', content_type="application/json; charset=utf-16",
                 headers=AS_A)
    created = call(dev.port, "POST", "/v1/responses", '{"model": "small", "input": "hi", "background": true}',
                   headers=AS_A).json or {}
    request_id = str(uuid.UUID(created.get("id", "resp_" + "0" * 32)[len("resp_"):]))
    deadline = time.monotonic() + 30
    while call(dev.port, "GET", f"/results/{request_id}", headers=AS_A).status != 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    theirs = [call(dev.port, method, f"/results/{request_id}", headers=AS_B).status for method in ("GET", "DELETE")]
    over = {f"k{i}": "v" for i in range(17)}
    file_a = (upload_file(dev, AS_A).json or {}).get("id")
    ask = lambda metadata: json.dumps({"input_file_id": file_a, "endpoint": "/v1/completions",
                                       "completion_window": "24h", "metadata": metadata})
    too_many = call(dev.port, "POST", "/v1/batches", ask(over), headers=AS_A)
    widest = {f"key-{i:02}-{'k' * 56}": "\U0001F600" * 512 for i in range(16)}  # 64-character keys, 2 KiB values
    made = [call(dev.port, "POST", "/v1/batches", ask(widest), headers=AS_A).status for _ in range(batches)]
    with RssPeak(dev.pid) as rss:
        with concurrent.futures.ThreadPoolExecutor(readers) as pool:
            pages = list(pool.map(lambda _: call(dev.port, "GET", "/v1/batches?limit=100", headers=AS_A),
                                  range(readers)))
    row.rss = rss.mib
    largest = max(len(p.body) for p in pages)
    held = [len((p.json or {}).get("data", [])) for p in pages]
    row.figures = (f"b's GET /v1/files?limit=1: {alone:.1f} ms alone, {among:.1f} ms beside {foreign} files of a's "
                   f"({uploaded.count(200)} stored); a filename of 257 characters {long_name.status}, 17 metadata "
                   f"pairs {too_many.status}, charset=utf-16 {utf16.status}; b's GET and DELETE of a's response at "
                   f"/results: {theirs}; {batches} batches with metadata at OpenAI's bounds, {readers} pages of "
                   f"limit=100 at once: {held[0]} batches and {largest / 1024:.0f} KiB each at most")
    row.held = f"b's list {among:.1f} ms beside {foreign} foreign files ({alone:.1f} ms alone); pages ≤ {largest / 1024:.0f} KiB"
    row.refuse = f"{max(long_name.seconds, too_many.seconds) * 1000:.0f} ms (name, metadata)"
    row.must(uploaded.count(200) == foreign and made.count(200) == batches, "every upload and batch is taken")
    row.must(b_sees == [(own.json or {}).get("id")], f"b lists its own file only ({b_sees})")
    row.must(among <= 3 * alone + 20, f"another project's files cost b's list nothing ({alone:.1f} → {among:.1f} ms)")
    row.must(long_name.status == 400 and too_many.status == 400, "names and metadata are bounded as OpenAI's")
    row.must(utf16.status == 415, f"a body in another charset is refused ({utf16.status})")
    row.must(theirs == [404, 404], f"another project's response is unknown at /results ({theirs})")
    row.must(largest <= 1024 * 1024 + 64 * 1024 and 0 < held[0] < batches,
             f"a page ends at its byte bound ({largest} bytes, {held[0]} of {batches} batches)")
    return row


def probe_large_batch(dev, lines=50_000):
    row = Row(14, "a large batch create")
    data = b"".join(LINE.replace(b'"a"', f'"line-{i}"'.encode()) for i in range(lines))
    file_id = (upload_file(dev, AS_A, data).json or {}).get("id")
    ask = json.dumps({"input_file_id": file_id, "endpoint": "/v1/completions", "completion_window": "24h"})

    def created():
        answer = call(dev.port, "POST", "/v1/batches", ask, headers=AS_A)
        return answer, (answer.json or {}).get("id", "batch_missing")

    def admitted(batch, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            state = call(dev.port, "GET", f"/v1/batches/{batch}", headers=AS_A).json or {}
            if state.get("status") not in (None, "validating"):
                return state
            time.sleep(0.25)
        return {}

    with RssPeak(dev.pid) as rss:
        first, batch = created()
        started = time.monotonic()
        state = admitted(batch, 120)
        admission = time.monotonic() - started
        call(dev.port, "POST", f"/v1/batches/{batch}/cancel", headers=AS_A)
        second, abandoned = created()
        dev.process.kill()  # kill -9 as the batch's admission begins
        dev.process.wait()
        dev.start()
        rss.add(dev.pid)
        restarted = time.monotonic()
        resumed = admitted(abandoned, 90)
        taken_up = time.monotonic() - restarted
        call(dev.port, "POST", f"/v1/batches/{abandoned}/cancel", headers=AS_A)
    row.rss = rss.mib
    total = (state.get("request_counts") or {}).get("total")
    resumed_total = (resumed.get("request_counts") or {}).get("total")
    row.figures = (f"POST /v1/batches on {lines} lines ({len(data) / 1e6:.1f} MB): {first.status} "
                   f"{(first.json or {}).get('status')} in {first.seconds * 1000:.0f} ms, {state.get('status')} with "
                   f"{total} lines {admission:.1f} s later; one abandoned by kill -9 at once: {resumed.get('status')} "
                   f"with {resumed_total} lines {taken_up:.1f} s after the restart")
    row.held = f"answered in {first.seconds * 1000:.0f} ms; admitted in {admission:.1f} s; abandoned taken up in {taken_up:.1f} s"
    row.refuse = "-"
    row.must(first.status == 200 and (first.json or {}).get("status") == "validating" and first.seconds < 1,
             f"the create answers validating within a second ({first.status}, {first.seconds:.2f} s)")
    row.must(second.status == 200 and second.seconds < 1, f"so does the second ({second.seconds:.2f} s)")
    row.must(state.get("status") == "in_progress" and total == lines, f"the batch is admitted whole ({state})")
    row.must(resumed.get("status") == "in_progress" and resumed_total == lines and taken_up < 60,
             f"an abandoned create is taken up within a minute ({taken_up:.1f} s, {resumed.get('status')})")
    return row


CALLBACK_LITERALS = [
    "127.0.0.1", "127.1", "127.0.0.1.", "0x7f.1", "0x7f000001", "2130706433", "0177.0.0.1", "017700000001",
    "%31%32%37.0.0.1", "\uff11\uff12\uff17.\uff10.\uff10.\uff11", "127.0.0.1:0", "[::1]", "[0:0:0:0:0:0:0:1]",
    "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::ffff:0:127.0.0.1]", "[::127.0.0.1]", "[64:ff9b::7f00:1]",
    "[2002:7f00:1::]", "169.254.169.254", "169.254.170.2", "0251.0376.0251.0376", "2852039166",
    "[::ffff:169.254.169.254]", "[64:ff9b::a9fe:a9fe]", "[fd00:ec2::254]", "10.0.0.1", "012.0.0.1", "0xa.0.0.1",
    "167772161", "172.16.0.1", "192.168.1.1", "100.64.0.1", "192.0.0.1", "0.0.0.0", "0", "[::]", "224.0.0.1",
    "255.255.255.255", "240.0.0.1", "192.0.2.1", "198.18.0.1", "192.88.99.1", "[fe80::1]", "[fc00::1]",
    "[fec0::1]", "[ff02::1]", "[100::1]", "[2001:db8::1]",
]
# localhost names are loopback (RFC 6761), refused at POST without a lookup; any accepted would be canceled before a
# worker could take it, so no name is ever resolved.
CALLBACK_NAMES = ["localhost", "localhost.", "api.localhost", "LOCALHOST."]


def probe_callbacks(dev):
    row = Row(10, "callback addresses")
    refused, accepted_names, names_refused, canceled, leaks, times = 0, 0, 0, 0, [], []
    with RssPeak(dev.pid) as rss:
        # A queue in front of the names: 12 requests on an engine of 4 slots at 2 s each (SLOW_*).
        ahead = "[" + ",".join(['{"prompt": "ahead of the names"}'] * 12) + "]"
        blockers = call(dev.port, "POST", "/infer/batch", ahead)
        row.must(blockers.status == 202, f"the requests queued ahead are accepted ({blockers.status})")
        for host in CALLBACK_LITERALS:
            body = json.dumps({"prompt": "callback", "callbackUrl": f"https://{host}/hook"}, ensure_ascii=False)
            answer = call(dev.port, "POST", "/infer", body.encode())
            times.append(answer.seconds)
            if answer.status == 400 and "callbackUrl" in (answer.error() or ""):
                refused += 1
            else:
                leaks.append(f"{host} → {answer.status} {answer.body[:160]!r}")
                if answer.status == 202:
                    call(dev.port, "DELETE", f"/results/{answer.json['requestId']}", content_type=None)
        for host in CALLBACK_NAMES:
            answer = call(dev.port, "POST", "/infer", json.dumps({"prompt": "callback",
                                                                  "callbackUrl": f"https://{host}/hook"}))
            if answer.status == 202:
                accepted_names += 1
                cancel = call(dev.port, "DELETE", f"/results/{answer.json['requestId']}", content_type=None)
                canceled += cancel.status == 200
            elif answer.status == 400:
                names_refused += 1
    row.rss = rss.mib
    for leak in leaks:
        print(f"  probe 10: {leak}")
    n = len(CALLBACK_LITERALS)
    row.figures = (f"{n} https callback URLs naming a loopback, private, link-local, metadata or special-purpose "
                   f"address in some encoding: {refused}/{n} refused at POST with a 400 naming callbackUrl "
                   f"({max(times) * 1000:.0f} ms at most); {len(CALLBACK_NAMES)} names ({', '.join(CALLBACK_NAMES)}): "
                   f"{names_refused} refused at POST without a lookup, {accepted_names} accepted "
                   f"({canceled} canceled before a worker took them)")
    row.held = f"{refused}/{n} address literals refused"
    row.refuse = f"{statistics.median(times) * 1000:.0f} ms median, {max(times) * 1000:.0f} ms max"
    row.must(refused == n, f"every address literal is refused at POST ({refused}/{n})")
    row.must(names_refused == len(CALLBACK_NAMES), f"localhost names are refused at POST ({names_refused})")
    row.must(canceled == accepted_names, "the names accepted are canceled before they run")
    return row


def probe_sigterm(binary, logs, total=200):
    row = Row(11, "SIGTERM with a queue")
    simulator = Simulator(binary.simulator, 100, 4)
    dev = Dev(binary.gpuinfer, simulator.url, logs, "restart")
    try:
        ids = [new_id() for _ in range(total)]
        accepted = []
        with RssPeak(dev.pid) as rss:
            for start in range(0, total, 100):
                share = ids[start:start + 100]
                body = "[" + ",".join(json.dumps({"requestId": i, "prompt": f"restart {i}"}) for i in share) + "]"
                answer = call(dev.port, "POST", "/infer/batch", body)
                for entry, request_id in zip((answer.json or {}).get("results", []), share):
                    if entry.get("status") == 202:
                        accepted.append(request_id)
            at_engine = simulator.stats()["calls"]
            signaled = time.monotonic()
            dev.process.send_signal(signal.SIGTERM)
            try:
                code = dev.process.wait(60)
            except subprocess.TimeoutExpired:
                code = "still running after 60 s"
            exited_in = time.monotonic() - signaled
            results = os.path.join(dev.data, "results")
            stored = sum(os.path.exists(os.path.join(results, f"{i}.json")) for i in accepted)
            dev.start()
            rss.add(dev.pid)
            restarted = time.monotonic()
            documents = wait_results(dev.port, accepted, 90)
            done_in = time.monotonic() - restarted
        row.rss = rss.mib
        lost = len(accepted) - len(documents)
        row.figures = (f"{total} requests posted in 2 bulk calls ({len(accepted)} accepted, {at_engine} sent to the "
                       f"engine when signaled), SIGTERM: exit {code} after {exited_in:.1f} s with {stored} documents "
                       f"stored and {len(accepted) - stored} still queued; restarted on the same data directory: "
                       f"{len(documents)}/{len(accepted)} with a document {done_in:.1f} s later, {lost} lost")
        row.held = f"exit {code}; {lost} lost of {len(accepted)}"
        row.refuse = f"exit {exited_in:.1f} s after SIGTERM"
        row.must(len(accepted) == total, f"all {total} requests accepted ({len(accepted)})")
        row.must(code == 0, f"gpuinfer dev exits 0 on SIGTERM ({code})")
        row.must(lost == 0, f"every accepted request ends with a document after the restart ({lost} lost)")
    finally:
        dev.stop()
        simulator.stop()
    return row


# ---------------------------------------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default="target/debug/gpuinfer")
    parser.add_argument("--keep-logs", action="store_true", help="keep the data directories and dev's logs")
    args = parser.parse_args()
    # Hard links to the binaries, so a build that replaces them meanwhile does not change what the probe runs.
    logs = tempfile.mkdtemp(prefix="gpuinfer-hostile-probe-")
    pinned = tempfile.mkdtemp(prefix=".hostile-probe-", dir=os.path.dirname(os.path.abspath(args.binary)))

    class Binaries:
        pass

    binary = Binaries()
    for name, source in [("gpuinfer", args.binary),
                         ("simulator", os.path.join(os.path.dirname(args.binary), "engine-simulator"))]:
        target = os.path.join(pinned, os.path.basename(source))
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target)
        setattr(binary, name, target)
    started = time.monotonic()
    rows, processes = [], []
    try:
        timeouts = ["--http-header-timeout-seconds", str(HEADER_TIMEOUT), "--http-body-timeout-seconds",
                    str(BODY_TIMEOUT), "--http-write-timeout-seconds", str(WRITE_TIMEOUT)]
        fast = Simulator(binary.simulator, 5, 64)
        processes.append(fast)
        main_dev = Dev(binary.gpuinfer, fast.url, logs, "main", timeouts)
        processes.append(main_dev)
        slow = Simulator(binary.simulator, SLOW_LATENCY_MS, SLOW_SLOTS)
        processes.append(slow)
        engine = EngineLog(slow.port)
        processes.append(engine)
        slow_dev = None

        def run(probe, *probe_args):
            before = dict(USED)
            row = probe(*probe_args)
            requests, polls, connections = (USED[k] - before[k] for k in ("requests", "polls", "connections"))
            row.requests = f"{requests}{f' + {polls} polls' if polls else ''} / {connections}"
            rows.append(row)
            print(row.line(), flush=True)
            for failure in row.failed:
                print(f"  FAILED: {failure}", flush=True)

        run(probe_malformed, main_dev)
        run(probe_load, main_dev, fast)
        run(probe_stalled_readers, binary.gpuinfer, fast, logs)
        run(probe_body_budget, main_dev)
        run(probe_slow_clients, main_dev)
        run(probe_both_lengths, main_dev)
        slow_dev = Dev(binary.gpuinfer, engine.url, logs, "slow-engine")
        processes.append(slow_dev)
        run(probe_case, slow_dev, engine)
        run(probe_cancel, slow_dev, engine, slow)
        run(probe_uploads, main_dev)
        run(probe_races_and_pages, main_dev)
        run(probe_callbacks, slow_dev)
        for process in (main_dev, slow_dev):
            process.stop()
        run(probe_sigterm, binary, logs)
        keyed = Dev(binary.gpuinfer, fast.url, logs, "projects", ["--api-key", KEYS])
        processes.append(keyed)
        run(probe_projects, keyed)
        run(probe_large_batch, keyed)
    finally:
        for process in reversed(processes):
            process.stop()
        shutil.rmtree(pinned, ignore_errors=True)
        if not args.keep_logs and not any(row.failed for row in rows):
            shutil.rmtree(logs, ignore_errors=True)
        else:
            print(f"logs and data directories: {logs}")

    print(f"\n{len(rows)} probes in {time.monotonic() - started:.0f} s "
          f"({os.path.basename(os.path.dirname(os.path.abspath(args.binary)))} build, {os.cpu_count()} cores)\n")
    print("| probe | requests / connections | held | RSS peak | time to refuse |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row.number}. {row.name} | {row.requests} | {row.held} | {row.rss:.0f} MiB | {row.refuse} |")
    failed = [(row, failure) for row in rows for failure in row.failed]
    if failed:
        print(f"\n{len(failed)} promise(s) did not hold:")
        for row, failure in failed:
            print(f"  probe {row.number} ({row.name}): {failure}")
        sys.exit(1)
    print("\nevery promise held")


main()
