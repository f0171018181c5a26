#!/usr/bin/env python3
"""Memory of `gpuinfer dev` under many large request bodies at once (docs/reliability.md, "hostile clients").

Starts the engine simulator and `gpuinfer dev` on loopback, sends N parallel 5 MB POST /infer/batch bodies, and
prints the process's peak RSS (VmHWM), its RSS a while after, and how the uploads were answered.

    python3 scripts/body-memory.py [--binary target/release/gpuinfer] [--uploads 150] [--budget-mib 128]
"""
import argparse, http.client, json, os, socket, subprocess, tempfile, threading, time

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

def memory_kib(pid, field):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0

def wait_for(port):
    for _ in range(200):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"nothing answers on port {port}")

def main():
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--binary", default="target/debug/gpuinfer")
    args.add_argument("--uploads", type=int, default=150)
    args.add_argument("--budget-mib", type=int, default=128)
    args = args.parse_args()
    engine_port, port = free_port(), free_port()
    # Built by any test or benchmark build, or by `cargo build --features test-support --bin engine-simulator`.
    simulator = os.path.join(os.path.dirname(args.binary), "engine-simulator")
    engine = subprocess.Popen([simulator, "--listen", f"127.0.0.1:{engine_port}"], stdout=subprocess.DEVNULL)
    data = tempfile.mkdtemp()
    dev = subprocess.Popen([args.binary, "dev", "--listen", f"127.0.0.1:{port}", "--data-dir", data,
                            "--small-engine-url", f"http://127.0.0.1:{engine_port}", "--classifier", "none",
                            "--http-body-memory-mib", str(args.budget_mib)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(port)
        idle = memory_kib(dev.pid, "VmRSS")
        body = json.dumps([{"prompt": "x" * 50_000, "maxTokens": 4} for _ in range(100)]).encode()
        answers = {}
        def upload():
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                conn.request("POST", "/infer/batch", body, {"content-type": "application/json"})
                status = conn.getresponse().status
            except OSError as error:
                status = type(error).__name__
            answers[status] = answers.get(status, 0) + 1
        threads = [threading.Thread(target=upload) for _ in range(args.uploads)]
        for t in threads: t.start()
        for t in threads: t.join()
        peak = memory_kib(dev.pid, "VmHWM")
        time.sleep(30)
        after = memory_kib(dev.pid, "VmRSS")
        print(f"| {args.uploads} parallel {len(body) / 1e6:.1f} MB batch uploads, body budget {args.budget_mib} MiB "
              f"({os.path.basename(os.path.dirname(args.binary))} build) | idle {idle / 1024:.0f} MiB | "
              f"peak {peak / 1024:.0f} MiB | 30 s later {after / 1024:.0f} MiB | answers {answers} |")
    finally:
        dev.terminate(); engine.terminate()
        dev.wait(); engine.wait()

main()
