#!/usr/bin/env python3
"""What one project's list costs beside another project's files (docs/reliability.md, "Answers and lists").

Starts `gpuinfer router` on 127.0.0.1 with keys of two projects, once on the embedded store (a data directory) and
once on S3 (the moto server `scripts/aws-emulator.sh start` runs), uploads one file as project b, times b's
`GET /v1/files?limit=1`, uploads `--files` files as project a, and times it again; then a's own list. Prints a table.

    scripts/aws-emulator.sh start && python3 scripts/list-cost.py [--binary target/debug/gpuinfer] [--files 4000]

Python 3.11 standard library only.
"""
import argparse, concurrent.futures, http.client, os, socket, statistics, subprocess, tempfile, time, urllib.request

LINE = b'{"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"model": "small", "prompt": "hi"}}\n'
FORM = (b'--X\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--X\r\nContent-Disposition: form-data; '
        b'name="file"; filename="in.jsonl"\r\n\r\n' + LINE + b"\r\n--X--\r\n")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Router:
    def __init__(self, binary, env):
        self.port, self.data = free_port(), tempfile.mkdtemp(prefix="gpuinfer-list-cost-")
        args = [binary, "router", "--listen", f"127.0.0.1:{self.port}", "--embedded-queues", "--data-dir", self.data,
                "--classifier", "none", "--api-key", "a=sk-a,b=sk-b"]
        self.process = subprocess.Popen(args, env=dict(os.environ, **env), stdout=subprocess.DEVNULL,
                                        stderr=open(os.path.join(self.data, "router.log"), "w"))
        deadline = time.monotonic() + 30
        while self.call("GET", "/healthz", "sk-a")[0] != 200:
            if time.monotonic() > deadline:
                raise SystemExit(f"the router did not start; see {self.data}/router.log")
            time.sleep(0.2)

    def call(self, method, path, key, body=b"", content_type="application/json"):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
            started = time.monotonic()
            conn.request(method, path, body, {"Authorization": f"Bearer {key}", "Content-Type": content_type})
            answer = conn.getresponse()
            answer.read()
            return answer.status, time.monotonic() - started
        except OSError:
            return None, 0.0

    def upload(self, key):
        return self.call("POST", "/v1/files", key, FORM, "multipart/form-data; boundary=X")[0]

    def list_ms(self, key, times=7):
        return statistics.median(self.call("GET", "/v1/files?limit=1", key)[1] for _ in range(times)) * 1000

    def stop(self):
        self.process.terminate()
        self.process.wait()


def measure(router, files):
    assert router.upload("sk-b") == 200, "b's file"
    time.sleep(6)  # a server's upkeep (every 5 s) indexes what came before each project's list
    alone = router.list_ms("sk-b")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        stored = list(pool.map(lambda _: router.upload("sk-a"), range(files))).count(200)
    return alone, router.list_ms("sk-b"), router.list_ms("sk-a", 3), stored


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default="target/debug/gpuinfer")
    parser.add_argument("--files", type=int, default=4000)
    parser.add_argument("--moto", default="http://127.0.0.1:15055")
    args = parser.parse_args()
    bucket = f"gpuinfer-list-cost-{int(time.time())}"
    urllib.request.urlopen(urllib.request.Request(f"{args.moto}/{bucket}", method="PUT")).read()
    aws = {"AWS_ENDPOINT_URL": args.moto, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
           "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
           "OUTPUT_DESTINATION": f"s3://{bucket}/results/"}
    print(f"| store | b's list alone | b's list beside {args.files} files of a's | a's own list (limit=1) |")
    print("|---|---|---|---|")
    for name, env in [("embedded", {}), ("S3 (moto)", aws)]:
        router = Router(args.binary, env)
        try:
            alone, beside, own, stored = measure(router, args.files)
        finally:
            router.stop()
        assert stored == args.files, f"{stored} of {args.files} files stored"
        print(f"| {name} | {alone:.1f} ms | {beside:.1f} ms | {own:.1f} ms |")


main()
