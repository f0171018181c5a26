"""Drives gpuinfer's Batch API with the official OpenAI Python client, as a user's code would.

Each command prints one JSON object on stdout; tests/it/batch_api.rs runs it and checks that object. Any
unexpected answer raises, so the process exits non-zero.

  batch_client.py --base-url URL [--api-key KEY] submit --lines N [--endpoint completions|chat]
                  [--failing-lines K] [--chunked-part-bytes B]       upload a file, create a batch
  batch_client.py ... wait --batch ID [--timeout S]                   poll until it ends, read its files
  batch_client.py ... cancel --batch ID                                cancel it
  batch_client.py ... refusals                                         what gpuinfer refuses, and how
  batch_client.py ... progress --batch ID                              its request counts now
"""

import argparse
import io
import json
import sys
import time

import openai

TERMINAL = {"completed", "failed", "expired", "cancelled"}


def client(args):
    return openai.OpenAI(base_url=args.base_url + "/v1", api_key=args.api_key, max_retries=0, timeout=120)


def line(endpoint, custom_id, text, max_tokens):
    if endpoint == "chat":
        body = {"model": "small", "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens}
        url = "/v1/chat/completions"
    else:
        body = {"model": "small", "prompt": text, "max_tokens": max_tokens, "temperature": 0}
        url = "/v1/completions"
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": url, "body": body})


def submit(args):
    c = client(args)
    lines = [line(args.endpoint, f"req-{i}", f"Count to {i % 7 + 2}:", args.max_tokens) for i in range(args.lines)]
    # A prompt far beyond the engine's context: the engine refuses it, so its line ends in the error file.
    lines += [line(args.endpoint, f"too-long-{i}", "word " * 4000, 4) for i in range(args.failing_lines)]
    data = ("\n".join(lines) + "\n").encode()
    if args.chunked_part_bytes:
        upload = c.uploads.upload_file_chunked(
            file=data, filename="input.jsonl", bytes=len(data), mime_type="application/jsonl",
            purpose="batch", part_size=args.chunked_part_bytes,
        )
        assert upload.status == "completed", upload
        input_file = upload.file
    else:
        input_file = c.files.create(file=("input.jsonl", io.BytesIO(data)), purpose="batch")
    assert input_file.bytes == len(data), (input_file.bytes, len(data))
    assert c.files.retrieve(input_file.id).filename == "input.jsonl"
    assert c.files.content(input_file.id).read() == data, "the file reads back as uploaded"
    endpoint = "/v1/chat/completions" if args.endpoint == "chat" else "/v1/completions"
    batch = c.batches.create(input_file_id=input_file.id, endpoint=endpoint, completion_window="24h",
                             metadata={"purpose": "gpuinfer test"})
    batch = admitted(c, batch)
    assert batch.status not in ("validating", "failed"), batch
    assert batch.request_counts.total == len(lines), batch.request_counts
    listed = [b.id for b in c.batches.list(limit=100)]
    assert batch.id in listed, listed
    models = [m.id for m in c.models.list()]
    print(json.dumps({"batch_id": batch.id, "input_file_id": input_file.id, "lines": len(lines), "models": models}))


def admitted(c, batch):
    """The batch once its lines were checked: a create answers at once, as OpenAI's, `validating` meanwhile."""
    assert batch.status in ("validating", "in_progress", "failed"), batch
    started = time.monotonic()
    while batch.status == "validating" and time.monotonic() - started < 60:
        time.sleep(0.1)
        batch = c.batches.retrieve(batch.id)
    return batch


def read_lines(c, file_id):
    if file_id is None:
        return []
    return [json.loads(text) for text in c.files.content(file_id).read().decode().splitlines() if text.strip()]


def wait(args):
    c = client(args)
    started = time.monotonic()
    batch = c.batches.retrieve(args.batch)
    while batch.status not in TERMINAL:
        if time.monotonic() - started > args.timeout:
            raise SystemExit(f"batch {args.batch} still {batch.status} after {args.timeout} s: {batch.request_counts}")
        time.sleep(0.25)
        batch = c.batches.retrieve(args.batch)
    outputs = read_lines(c, batch.output_file_id)
    errors = read_lines(c, batch.error_file_id)
    custom_ids = [o["custom_id"] for o in outputs + errors]
    for output in outputs:
        assert output["response"]["status_code"] == 200, output
        body = output["response"]["body"]
        assert body["object"] in ("text_completion", "chat.completion"), body
        choice = body["choices"][0]
        text = choice["text"] if body["object"] == "text_completion" else choice["message"]["content"]
        assert isinstance(text, str) and body["usage"]["completion_tokens"] >= 1, body
    print(json.dumps({
        "status": batch.status,
        "counts": batch.request_counts.model_dump(),
        "output_ids": sorted(o["custom_id"] for o in outputs),
        "error_ids": sorted(e["custom_id"] for e in errors),
        "error_codes": sorted({(e["error"] or {}).get("code") or str(e["response"]["status_code"]) for e in errors}),
        "duplicates": len(custom_ids) - len(set(custom_ids)),
        "output_file_id": batch.output_file_id,
        "seconds": round(time.monotonic() - started, 2),
    }))


def cancel(args):
    batch = client(args).batches.cancel(args.batch)
    print(json.dumps({"status": batch.status}))


def progress(args):
    batch = client(args).batches.retrieve(args.batch)
    print(json.dumps({"status": batch.status, "counts": batch.request_counts.model_dump()}))


def refusals(args):
    c = client(args)
    found = {}
    try:
        c.files.create(file=("bad.jsonl", io.BytesIO(b'{"custom_id": "a"}\nnot json\n')), purpose="batch")
        found["malformed_file"] = "accepted"
    except openai.BadRequestError as e:
        found["malformed_file"] = e.body["message"] if isinstance(e.body, dict) else str(e)
    bad = "\n".join([
        line("completions", "ok", "fine", 4),
        json.dumps({"custom_id": "ok", "method": "POST", "url": "/v1/completions", "body": {"model": "small", "prompt": "x"}}),
        json.dumps({"custom_id": "b", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x"}}),
    ]).encode()
    f = c.files.create(file=("invalid-lines.jsonl", io.BytesIO(bad)), purpose="batch")
    batch = admitted(c, c.batches.create(input_file_id=f.id, endpoint="/v1/completions", completion_window="24h"))
    found["invalid_lines_status"] = batch.status
    found["invalid_lines_errors"] = [(e.line, e.param) for e in batch.errors.data]
    upload = c.uploads.create(bytes=10, filename="x.jsonl", mime_type="application/jsonl", purpose="batch")
    try:
        c.uploads.complete(upload.id, part_ids=["part_00000000000000000000000000000000"])
        found["unknown_part"] = "accepted"
    except openai.BadRequestError as e:
        found["unknown_part"] = e.body["message"] if isinstance(e.body, dict) else str(e)
    try:
        c.batches.retrieve("batch_00000000000000000000000000000000")
        found["unknown_batch"] = "found"
    except openai.NotFoundError:
        found["unknown_batch"] = "404"
    try:
        openai.OpenAI(base_url=args.base_url + "/v1", api_key="wrong", max_retries=0).models.list()
        found["wrong_key"] = "accepted"
    except openai.AuthenticationError:
        found["wrong_key"] = "401"
    print(json.dumps(found))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--api-key", default="unused")
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("submit")
    p.add_argument("--lines", type=int, required=True)
    p.add_argument("--endpoint", choices=["completions", "chat"], default="completions")
    p.add_argument("--failing-lines", type=int, default=0)
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--chunked-part-bytes", type=int, default=0)
    p.set_defaults(run=submit)
    p = commands.add_parser("wait")
    p.add_argument("--batch", required=True)
    p.add_argument("--timeout", type=float, default=300)
    p.set_defaults(run=wait)
    p = commands.add_parser("cancel")
    p.add_argument("--batch", required=True)
    p.set_defaults(run=cancel)
    p = commands.add_parser("progress")
    p.add_argument("--batch", required=True)
    p.set_defaults(run=progress)
    commands.add_parser("refusals").set_defaults(run=refusals)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    sys.exit(main())
