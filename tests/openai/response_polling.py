"""Polls a background response until it ends, as a user's code does: shared by the scripts that drive the Responses
API with the official OpenAI Python client."""

import time

TERMINAL = {"completed", "incomplete", "failed", "cancelled"}


def until_ended(client, response, timeout):
    """The response once its status is terminal, retrieved every half second; raises after `timeout` seconds."""
    started = time.monotonic()
    while response.status not in TERMINAL:
        if time.monotonic() - started > timeout:
            raise SystemExit(f"response {response.id} still {response.status} after {timeout} s")
        time.sleep(0.5)
        response = client.responses.retrieve(response.id)
    return response
