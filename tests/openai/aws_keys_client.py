"""Drives a deployed gpuinfer's /v1 API with the official OpenAI Python client and an API key, as a user's code would.

Prints one JSON object on stdout; tests/it/api_keys_on_lambda.rs runs it and checks that object. Any unexpected
answer raises, so the process exits non-zero.

  aws_keys_client.py --base-url URL respond --api-key KEY [--timeout S]
      creates a background response and polls it to completed
  aws_keys_client.py --base-url URL retrieve --api-key KEY --id RESPONSE_ID
      retrieves a response as it stands
  aws_keys_client.py --base-url URL upload --api-key KEY
      uploads a Batch API file (multipart: a body API Gateway passes base64-encoded) and reads it back
  aws_keys_client.py --base-url URL refused [--api-key KEY]
      creates a response, which must be refused with openai.AuthenticationError (without --api-key the request
      carries no Authorization header at all)
"""

import argparse
import json
import sys

import openai

from response_polling import until_ended



def client(base_url, api_key):
    return openai.OpenAI(base_url=base_url + "/v1", api_key=api_key, max_retries=0, timeout=60)


def respond(args):
    openai_client = client(args.base_url, args.api_key)
    response = openai_client.responses.create(
        model="small", input="What is Amazon ECS?", max_output_tokens=16, background=True
    )
    created_status = response.status
    response = until_ended(openai_client, response, args.timeout)
    return {
        "id": response.id,
        "created_status": created_status,
        "status": response.status,
        "output_text": response.output_text,
    }


def retrieve(args):
    response = client(args.base_url, args.api_key).responses.retrieve(args.id)
    return {"id": response.id, "status": response.status, "output_text": response.output_text}


def upload(args):
    openai_client = client(args.base_url, args.api_key)
    content = b'{"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"model": "small"}}\n'
    uploaded = openai_client.files.create(file=("requests.jsonl", content), purpose="batch")
    served = openai_client.files.content(uploaded.id).read()
    return {"id": uploaded.id, "bytes": uploaded.bytes, "same": served == content}


def refused(args):
    # Without a key: the client's own header is removed, so the request goes out with no Authorization at all.
    openai_client = client(args.base_url, args.api_key or "unused")
    headers = {} if args.api_key else {"Authorization": openai.omit}
    try:
        response = openai_client.responses.create(
            model="small", input="Let me in.", background=True, extra_headers=headers
        )
    except openai.AuthenticationError as error:
        return {"status": error.status_code, "code": error.code, "type": error.type, "message": error.message}
    raise SystemExit(f"the request was not refused: {response.id} is {response.status}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", required=True)
    commands = parser.add_subparsers(dest="command", required=True)
    respond_parser = commands.add_parser("respond")
    respond_parser.add_argument("--api-key", required=True)
    respond_parser.add_argument("--timeout", type=float, default=60)
    retrieve_parser = commands.add_parser("retrieve")
    retrieve_parser.add_argument("--api-key", required=True)
    retrieve_parser.add_argument("--id", required=True)
    upload_parser = commands.add_parser("upload")
    upload_parser.add_argument("--api-key", required=True)
    refused_parser = commands.add_parser("refused")
    refused_parser.add_argument("--api-key")
    args = parser.parse_args()
    run = {"respond": respond, "retrieve": retrieve, "upload": upload, "refused": refused}[args.command]
    print(json.dumps(run(args)))


if __name__ == "__main__":
    sys.exit(main())
