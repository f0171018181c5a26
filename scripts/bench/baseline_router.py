"""Baseline for the router benchmark (P4): the sample-style Python 3.11 + boto3 router, written here only
to be measured against `gpuinfer router`. Same job: validate the request, route it, SendMessage.

PORT, SMALL_QUEUE_URL, LARGE_QUEUE_URL and the AWS_* variables configure it.
"""

import json
import os
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3

SQS = boto3.client("sqs")
QUEUES = {"small": os.environ["SMALL_QUEUE_URL"], "large": os.environ["LARGE_QUEUE_URL"]}
FIELDS = {"requestId", "prompt", "messages", "maxTokens", "temperature", "topP", "route"}


def validate(body):
    if not isinstance(body, dict):
        return None, "body: must be a JSON object"
    unknown = set(body) - FIELDS
    if unknown:
        return None, f"{sorted(unknown)[0]}: unknown field"
    prompt = body.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        return None, "prompt: must be a non-empty string"
    max_tokens = body.get("maxTokens", 256)
    if not isinstance(max_tokens, int) or not 1 <= max_tokens <= 2048:
        return None, "maxTokens: must be an integer from 1 to 2048"
    temperature = body.get("temperature", 0.7)
    if not isinstance(temperature, (int, float)) or not 0 <= temperature <= 2:
        return None, "temperature: must be a number from 0.0 to 2.0"
    body.setdefault("requestId", str(uuid.uuid4()))
    body.update(maxTokens=max_tokens, temperature=temperature)
    return body, None


def route(body):
    if body.get("route") in QUEUES:
        return body["route"]
    if len(body["prompt"]) > 2000 or body["maxTokens"] > 1024:
        return "large"
    return "small"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("content-length", 0)))
        try:
            body, error = validate(json.loads(raw))
        except ValueError:
            body, error = None, "body: not valid JSON"
        if error:
            return self.answer(400, {"error": error})
        tier = route(body)
        SQS.send_message(QueueUrl=QUEUES[tier], MessageBody=json.dumps(body))
        return self.answer(202, {"requestId": body["requestId"], "tier": tier})


ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
