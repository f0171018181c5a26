"""Checks the OpenAI-shaped webhook events gpuinfer sent, as a receiver's code would: with the official OpenAI
Python client's `webhooks.unwrap(body, headers)` and the deployment's whsec_ secret.

  webhook_events_client.py --secret whsec_... --deliveries FILE

FILE holds the POSTs a receiver got: a JSON list of {"headers": {...}, "body": "..."}. Prints one JSON object:
each delivery's event (id, type, data.id, webhook-id) as `unwrap` returned it, and whether `unwrap` refused the
same delivery with its body tampered with, with its timestamp five minutes old, and under another secret. Any
delivery `unwrap` refuses raises, so the process exits non-zero.
"""

import argparse
import base64
import json
import sys
import time

import openai


def refused(client, body, headers):
    try:
        client.webhooks.unwrap(body, headers)
    except openai.InvalidWebhookSignatureError:
        return True
    return False


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--deliveries", required=True)
    args = parser.parse_args()
    client = openai.OpenAI(api_key="unused", webhook_secret=args.secret)
    other = openai.OpenAI(api_key="unused", webhook_secret="whsec_" + base64.b64encode(b"another-secret-16b").decode())
    with open(args.deliveries, encoding="utf-8") as file:
        deliveries = json.load(file)
    events = []
    for delivery in deliveries:
        body, headers = delivery["body"], delivery["headers"]
        event = client.webhooks.unwrap(body, headers)
        old = dict(headers, **{"webhook-timestamp": str(int(time.time()) - 301)})
        events.append({
            "id": event.id,
            "type": event.type,
            "object_id": event.data.id,
            "created_at": event.created_at,
            "webhook_id": headers["webhook-id"],
            "tampered_refused": refused(client, body.replace('"data"', '"data" ', 1), headers),
            "old_refused": refused(client, body, old),
            "other_secret_refused": refused(other, body, headers),
        })
    print(json.dumps({"events": events}))


if __name__ == "__main__":
    sys.exit(main())
