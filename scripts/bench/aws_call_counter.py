"""A recording HTTP proxy for counting AWS calls: it sits between AWS SDKs and the moto server (clients get
AWS_ENDPOINT_URL=http://127.0.0.1:<port>), forwards every request, and records each one by caller, service and
operation. It can also sit in front of any plain HTTP server (a router), recording each request by method and path.

  aws_call_counter.py --control PORT --aws PORT=UPSTREAM [--http NAME=PORT=UPSTREAM ...]

--aws ports forward to moto. The caller of an AWS call is its access key id (lower-cased), so one port serves every
process and each process is told apart by the AWS_ACCESS_KEY_ID it is given (moto takes any key as its default
account). The service comes from the SigV4 credential scope (`Credential=KEY/DATE/REGION/SERVICE/aws4_request`,
`monitoring` is CloudWatch); the operation from the `X-Amz-Target` header (AWS JSON protocols), the
`/service/S/operation/OP` path (Smithy RPC v2 CBOR), `Action=` in the form body or query (query protocol), or, for
S3 and Lambda's REST APIs, the method, path and query (PutObject, GetObject, HeadObject, ListObjectsV2, ...).
--http ports forward to a plain HTTP server; the caller is NAME, the service `http`, the operation the method and
path with ids replaced by `{id}` (`GET /results/{id}`).

The control port answers GET /calls (every call recorded so far, as JSON: caller, service, operation, status,
start and end in seconds since the epoch) and POST /reset (forget them). Only 127.0.0.1 is listened on.
"""

import argparse
import http.client
import json
import re
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
}
CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/\d{8}/[^/]+/([^/]+)/aws4_request")
SERVICE_NAMES = {"monitoring": "cloudwatch", "execute-api": "apigateway"}
ID_IN_PATH = re.compile(r"/(?:[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|[0-9a-fA-F]{32})")


def caller_and_service(headers, query):
    """(access key id lower-cased, service) from the SigV4 Authorization header or a presigned URL's query."""
    found = CREDENTIAL.search(headers.get("authorization", ""))
    if not found and "X-Amz-Credential" in query:
        found = CREDENTIAL.search("Credential=" + query["X-Amz-Credential"][0])
    if not found:
        return "unsigned", "unknown"
    key, service = found.group(1), found.group(2)
    return key.lower(), SERVICE_NAMES.get(service, service)


def s3_operation(method, path, query, headers):
    """The S3 REST operation of a path-style (or virtual-hosted) request."""
    host = headers.get("host", "").split(":")[0]
    parts = urllib.parse.unquote(path).lstrip("/").split("/", 1)
    virtual = host.count(".") >= 1 and not re.fullmatch(r"[\d.]+", host) and host.split(".")[0] not in ("s3", "localhost")
    bucket, key = (host.split(".")[0], "/".join(parts)) if virtual else (parts[0], parts[1] if len(parts) > 1 else "")
    subresource = next((name for name in query if name in S3_SUBRESOURCES), None)
    copy = "x-amz-copy-source" in headers
    if not bucket:
        return "ListBuckets" if method == "GET" else f"{method} /"
    if not key:
        if method == "GET":
            if query.get("list-type") == ["2"]:
                return "ListObjectsV2"
            if subresource == "uploads":
                return "ListMultipartUploads"
            if subresource == "versions":
                return "ListObjectVersions"
            return f"GetBucket{S3_SUBRESOURCES[subresource]}" if subresource else "ListObjects"
        if method == "PUT":
            return f"PutBucket{S3_SUBRESOURCES[subresource]}" if subresource else "CreateBucket"
        if method == "POST" and "delete" in query:
            return "DeleteObjects"
        return {"HEAD": "HeadBucket", "DELETE": "DeleteBucket"}.get(method, f"{method} bucket")
    if method == "PUT":
        if "uploadId" in query:
            return "UploadPartCopy" if copy else "UploadPart"
        if subresource in ("tagging", "acl", "retention", "legal-hold"):
            return f"PutObject{S3_SUBRESOURCES[subresource]}"
        return "CopyObject" if copy else "PutObject"
    if method == "GET":
        if "uploadId" in query:
            return "ListParts"
        if subresource in ("tagging", "acl", "attributes", "retention", "legal-hold"):
            return f"GetObject{S3_SUBRESOURCES[subresource]}"
        return "GetObject"
    if method == "HEAD":
        return "HeadObject"
    if method == "DELETE":
        return "AbortMultipartUpload" if "uploadId" in query else "DeleteObject"
    if method == "POST":
        if "uploads" in query:
            return "CreateMultipartUpload"
        if "uploadId" in query:
            return "CompleteMultipartUpload"
        return "PostObject"
    return f"{method} object"


S3_SUBRESOURCES = {
    "acl": "Acl",
    "attributes": "Attributes",
    "cors": "Cors",
    "encryption": "Encryption",
    "legal-hold": "LegalHold",
    "lifecycle": "Lifecycle",
    "location": "Location",
    "notification": "NotificationConfiguration",
    "policy": "Policy",
    "retention": "Retention",
    "tagging": "Tagging",
    "uploads": "Uploads",
    "versioning": "Versioning",
    "versions": "Versions",
}


def classify(method, target, headers, body):
    """(caller, service, operation) of one AWS request; `target` is the request line's path and query, `headers`
    a dict with lower-case names, `body` the bytes sent."""
    path, _, raw_query = target.partition("?")
    query = urllib.parse.parse_qs(raw_query, keep_blank_values=True)
    caller, service = caller_and_service(headers, query)
    amz_target = headers.get("x-amz-target")
    if amz_target:
        return caller, service, amz_target.rsplit(".", 1)[-1]
    rpc = re.fullmatch(r"/service/[^/]+/operation/([^/]+)", path)
    if rpc:
        return caller, service, rpc.group(1)
    if "Action" in query:
        return caller, service, query["Action"][0]
    if headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        form = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
        if "Action" in form:
            return caller, service, form["Action"][0]
    if service == "s3":
        return caller, service, s3_operation(method, path, query, headers)
    if service == "lambda" and re.fullmatch(r"/[\d-]+/functions/[^/]+/invocations", path):
        return caller, service, "Invoke"
    bedrock = re.fullmatch(r"/model/[^/]+/(converse|converse-stream|invoke|invoke-with-response-stream)", path)
    if bedrock:
        return caller, service, {"converse": "Converse", "invoke": "InvokeModel"}.get(bedrock.group(1), bedrock.group(1))
    return caller, service, f"{method} {ID_IN_PATH.sub('/{id}', path)}"


def http_operation(method, target):
    """The operation of a request to a plain HTTP server: method and path, ids replaced by {id}."""
    return f"{method} {ID_IN_PATH.sub('/{id}', target.partition('?')[0])}"


class Recorder:
    def __init__(self):
        self.lock = threading.Lock()
        self.calls = []

    def add(self, call):
        with self.lock:
            self.calls.append(call)

    def snapshot(self):
        with self.lock:
            return list(self.calls)

    def reset(self):
        with self.lock:
            self.calls.clear()


def read_body(handler):
    if handler.headers.get("transfer-encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(chunks)
            chunks.append(handler.rfile.read(size))
            handler.rfile.readline()
    length = int(handler.headers.get("content-length") or 0)
    return handler.rfile.read(length) if length else b""


def forwarding_handler(recorder, upstream, name):
    """A handler class forwarding to `upstream` (http://host:port); `name` None classifies AWS calls, else the
    requests of a plain HTTP server called `name`."""
    parsed = urllib.parse.urlsplit(upstream)
    local = threading.local()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def connection_upstream(self, fresh=False):
            if fresh or getattr(local, "connection", None) is None:
                local.connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=180)
            return local.connection

        def forward(self):
            started = time.time()
            body = read_body(self)
            headers = {k.lower(): v for k, v in self.headers.items()}
            if name is None:
                caller, service, operation = classify(self.command, self.path, headers, body)
            else:
                caller, service, operation = name, "http", http_operation(self.command, self.path)
            status, reply_headers, reply = 502, [], b"counter: upstream unreachable"
            for attempt in range(2):
                connection = self.connection_upstream(fresh=attempt > 0)
                try:
                    connection.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                    for key, value in self.headers.items():
                        if key.lower() not in HOP_BY_HOP:
                            connection.putheader(key, value)
                    if body or self.command in ("POST", "PUT", "PATCH"):
                        connection.putheader("Content-Length", str(len(body)))
                    connection.endheaders(body)
                    response = connection.getresponse()
                    reply = response.read()
                    status, reply_headers = response.status, response.getheaders()
                    break
                except (http.client.HTTPException, OSError):
                    connection.close()
                    local.connection = None
            recorder.add(
                {
                    "caller": caller,
                    "service": service,
                    "operation": operation,
                    "status": status,
                    "start": started,
                    "end": time.time(),
                    "bytes": len(body),
                }
            )
            self.send_response_only(status)
            length_sent = False
            for key, value in reply_headers:
                lower = key.lower()
                if lower == "content-length" and self.command == "HEAD":
                    self.send_header(key, value)
                    length_sent = True
                elif lower not in HOP_BY_HOP:
                    self.send_header(key, value)
            if not length_sent:
                self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(reply)

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = do_OPTIONS = forward

    return Handler


def control_handler(recorder):
    class Control(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def reply(self, payload):
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self.reply({"calls": recorder.snapshot()})

        def do_POST(self):
            recorder.reset()
            self.reply({"reset": True})

    return Control


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128


def serve(control_port, aws, plain):
    """Starts every listener in background threads; returns the recorder and the servers."""
    recorder = Recorder()
    servers = [Server(("127.0.0.1", control_port), control_handler(recorder))]
    for port, upstream in aws:
        servers.append(Server(("127.0.0.1", port), forwarding_handler(recorder, upstream, None)))
    for name, port, upstream in plain:
        servers.append(Server(("127.0.0.1", port), forwarding_handler(recorder, upstream, name)))
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    return recorder, servers


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--control", type=int, required=True)
    parser.add_argument("--aws", action="append", default=[], help="PORT=UPSTREAM (moto)")
    parser.add_argument("--http", action="append", default=[], help="NAME=PORT=UPSTREAM (a plain HTTP server)")
    args = parser.parse_args()
    aws = [(int(port), upstream) for port, upstream in (spec.split("=", 1) for spec in args.aws)]
    plain = [(name, int(port), upstream) for name, port, upstream in (spec.split("=", 2) for spec in args.http)]
    serve(args.control, aws, plain)
    print("aws_call_counter: ready", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
