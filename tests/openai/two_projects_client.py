"""Checks, with the official OpenAI Python client as a user's code would call it, that each API key sees its own
project's objects on gpuinfer: client A's file, batch and response are invisible to client B (another project),
and seen by client A2 (another key of A's project).

Prints one JSON object on stdout; tests/it/projects.rs runs it and checks that object. Any unexpected answer
raises, so the process exits non-zero.

  two_projects_client.py --base-url URL --key-a KEY --key-a2 KEY --key-b KEY
"""

import argparse
import io
import json
import sys

import openai

LINE = {"custom_id": "a-0", "method": "POST", "url": "/v1/completions",
        "body": {"model": "small", "prompt": "Say hi.", "max_tokens": 4}}


def client(args, key):
    return openai.OpenAI(base_url=args.base_url + "/v1", api_key=key, max_retries=0, timeout=60)


def outcome(call):
    """The name of the error `call` raised, or "answered"."""
    try:
        call()
    except openai.APIStatusError as error:
        return type(error).__name__
    return "answered"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--key-a", required=True)
    parser.add_argument("--key-a2", required=True)
    parser.add_argument("--key-b", required=True)
    args = parser.parse_args()
    a, a2, b = client(args, args.key_a), client(args, args.key_a2), client(args, args.key_b)

    data = (json.dumps(LINE) + "\n").encode()
    file = a.files.create(file=("input.jsonl", io.BytesIO(data)), purpose="batch")
    batch = a.batches.create(input_file_id=file.id, endpoint="/v1/completions", completion_window="24h")
    response = a.responses.create(model="small", input="Say hi.", background=True)

    to_b = {
        "files.retrieve": lambda: b.files.retrieve(file.id),
        "files.content": lambda: b.files.content(file.id),
        "files.delete": lambda: b.files.delete(file.id),
        "batches.retrieve": lambda: b.batches.retrieve(batch.id),
        "batches.cancel": lambda: b.batches.cancel(batch.id),
        "batches.create": lambda: b.batches.create(
            input_file_id=file.id, endpoint="/v1/completions", completion_window="24h"),
        "responses.retrieve": lambda: b.responses.retrieve(response.id),
        "responses.cancel": lambda: b.responses.cancel(response.id),
        "responses.delete": lambda: b.responses.delete(response.id),
        "responses.input_items.list": lambda: b.responses.input_items.list(response.id),
    }
    print(json.dumps({
        "to_b": {name: outcome(call) for name, call in to_b.items()},
        "b_lists": {
            "files": [f.id for f in b.files.list().data],
            "batches": [x.id for x in b.batches.list().data],
        },
        "a2_sees": {
            "file": a2.files.retrieve(file.id).id == file.id,
            "content": a2.files.content(file.id).read() == data,
            "batch": a2.batches.retrieve(batch.id).id == batch.id,
            "response": a2.responses.retrieve(response.id).id == response.id,
            "listed_file": file.id in [f.id for f in a2.files.list().data],
            "listed_batch": batch.id in [x.id for x in a2.batches.list().data],
        },
    }))


if __name__ == "__main__":
    sys.exit(main())
