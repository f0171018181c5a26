"""Drives gpuinfer's Responses API (background mode) with the official OpenAI Python client, as a user's code would.

Prints one JSON object on stdout; tests/it/responses.rs runs it and checks that object. Any unexpected
answer raises, so the process exits non-zero.

  responses_client.py --base-url URL [--api-key KEY] [--timeout S]

Creates a background response and polls it to completed; creates more behind it and cancels the last while it
is still queued.
"""

import argparse
import json
import sys
import time

import openai

from response_polling import until_ended



def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--api-key", default="unused")
    parser.add_argument("--timeout", type=float, default=240)
    args = parser.parse_args()
    client = openai.OpenAI(base_url=args.base_url + "/v1", api_key=args.api_key, max_retries=0, timeout=120)

    response = client.responses.create(
        model="small",
        instructions="Answer in one short sentence.",
        input="What is the capital of France?",
        metadata={"purpose": "gpuinfer test"},
        background=True,
    )
    created_status = response.status
    # Two more behind it, the last canceled while the worker is still on the first.
    behind = [
        client.responses.create(model="small", input=f"Count to {n}.", max_output_tokens=24, background=True)
        for n in (3, 4)
    ]
    cancelled = client.responses.cancel(behind[-1].id)

    started = time.monotonic()
    response = until_ended(client, response, args.timeout)

    items = client.responses.input_items.list(response.id)
    print(json.dumps({
        "id": response.id,
        "created_status": created_status,
        "status": response.status,
        "output_text": response.output_text,
        "usage": response.usage.model_dump() if response.usage else None,
        "metadata": response.metadata,
        "input_items": [item.content[0].text for item in items.data],
        "cancelled_id": cancelled.id,
        "cancelled_status": cancelled.status,
        "cancelled_later": client.responses.retrieve(behind[-1].id).status,
        "seconds": round(time.monotonic() - started, 2),
    }))


if __name__ == "__main__":
    sys.exit(main())
