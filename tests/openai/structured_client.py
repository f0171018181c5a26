"""Drives what real OpenAI code sends beyond a prompt, with the official OpenAI Python client, as a user writes it.

Prints one JSON object on stdout; tests/it/structured_output.rs runs it against `gpuinfer dev` on llama.cpp (which
enforces a JSON schema while it decodes) and checks that object. Any unexpected answer raises, so the process exits
non-zero.

  structured_client.py --base-url URL [--api-key KEY] [--timeout S]

1. A Batch file for /v1/chat/completions mixing structured output (json_schema strict, json_object), seed, stop,
   penalties, logprobs, content parts with the developer role, and a function tool; every line must come back 200
   and each structured line valid against its schema.
2. A Batch file for /v1/responses whose line asks for a JSON schema.
3. responses.parse(text_format=Person), waited for and in the background.
4. A response continued with previous_response_id, and one with its output text's log probabilities.
"""

import argparse
import io
import json
import sys
import time

import openai
import pydantic

from response_polling import until_ended


class Person(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    name: str
    age: int


PERSON_SCHEMA = {"name": "person", "strict": True, "schema": Person.model_json_schema()}
# One worked example first: the suite's small base model then answers in the same shape and stops.
ASK = [
    {"role": "user", "content": "Bob is 40."},
    {"role": "assistant", "content": '{"name": "Bob", "age": 40}'},
    {"role": "user", "content": "Ann is 31."},
]


def chat_line(custom_id, **body):
    body = {"model": "small", "max_tokens": 96, "temperature": 0,
            "messages": ASK, **body}
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}


def run_batch(c, lines, endpoint, timeout):
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    input_file = c.files.create(file=("structured.jsonl", io.BytesIO(data)), purpose="batch")
    batch = c.batches.create(input_file_id=input_file.id, endpoint=endpoint, completion_window="24h")
    started = time.monotonic()
    while batch.status not in {"completed", "failed", "expired", "cancelled"}:
        if time.monotonic() - started > timeout:
            raise SystemExit(f"batch {batch.id} still {batch.status} after {timeout} s")
        time.sleep(0.5)
        batch = c.batches.retrieve(batch.id)
    assert batch.status == "completed", batch
    errors = c.files.content(batch.error_file_id).text if batch.error_file_id else ""
    assert not errors, errors
    return {row["custom_id"]: row for row in map(json.loads, c.files.content(batch.output_file_id).text.splitlines())}


def chat_batch(c, timeout):
    tool = {"type": "function", "function": {"name": "get_age", "description": "Look up a person's age",
                                             "parameters": {"type": "object", "properties": {"name": {"type": "string"}},
                                                            "required": ["name"]}}}
    lines = [
        chat_line("schema", response_format={"type": "json_schema", "json_schema": PERSON_SCHEMA}),
        chat_line("object", response_format={"type": "json_object"}),
        chat_line("seed-stop", seed=42, stop=["\n\n", "END"], user="user-1", metadata={"job": "extract"}, store=False),
        chat_line("penalties", presence_penalty=0.5, frequency_penalty=0.5, logit_bias={"100": -50}),
        chat_line("logprobs", logprobs=True, top_logprobs=2, max_tokens=8),
        chat_line("parts", messages=[
            {"role": "developer", "content": [{"type": "text", "text": "Answer in one short sentence."}]},
            {"role": "user", "content": [{"type": "text", "text": "What is the capital"}, {"type": "text", "text": "of France?"}]},
        ]),
        chat_line("tool", tools=[tool], tool_choice="auto", parallel_tool_calls=False),
    ]
    rows = run_batch(c, lines, "/v1/chat/completions", timeout)
    statuses = {custom_id: row["response"]["status_code"] for custom_id, row in rows.items()}
    bodies = {custom_id: row["response"]["body"] for custom_id, row in rows.items()}
    person = Person.model_validate_json(bodies["schema"]["choices"][0]["message"]["content"])
    as_object = json.loads(bodies["object"]["choices"][0]["message"]["content"])
    assert isinstance(as_object, dict), as_object
    logprobs = bodies["logprobs"]["choices"][0]["logprobs"]["content"]
    return {
        "statuses": statuses,
        "schema_answer": person.model_dump(),
        "logprob_tokens": len(logprobs),
        "top_logprobs": len(logprobs[0]["top_logprobs"]),
    }


def responses_batch(c, timeout):
    body = {"model": "small", "input": ASK, "max_output_tokens": 96, "temperature": 0,
            "text": {"format": {"type": "json_schema", **PERSON_SCHEMA}}}
    rows = run_batch(c, [{"custom_id": "r1", "method": "POST", "url": "/v1/responses", "body": body}],
                     "/v1/responses", timeout)
    response = rows["r1"]["response"]["body"]
    text = response["output"][0]["content"][0]["text"]
    return {"object": response["object"], "status": response["status"],
            "answer": Person.model_validate_json(text).model_dump()}


def parsed(c, timeout):
    waited = c.responses.parse(model="small", input=ASK, text_format=Person, max_output_tokens=96, temperature=0)
    assert waited.status == "completed", waited
    background = c.responses.parse(model="small", input=ASK, text_format=Person, max_output_tokens=96,
                                   temperature=0, background=True)
    created_status = background.status
    ended = until_ended(c, background, timeout)
    assert ended.status == "completed", ended
    return {"waited": waited.output_parsed.model_dump(), "background_created": created_status,
            "background": Person.model_validate_json(ended.output_text).model_dump()}


def logprobs(c):
    r = c.responses.create(model="small", input="Say hi.", max_output_tokens=4, top_logprobs=2,
                           include=["message.output_text.logprobs"])
    tokens = r.output[0].content[0].logprobs
    return {"tokens": len(tokens), "alternatives": len(tokens[0].top_logprobs)}


def continued(c):
    first = c.responses.create(model="small", input="My name is Ann.", max_output_tokens=16)
    second = c.responses.create(model="small", input="What is my name?", previous_response_id=first.id,
                                max_output_tokens=16)
    return {"status": second.status, "previous_response_id": second.previous_response_id, "first_id": first.id}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--api-key", default="unused")
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    c = openai.OpenAI(base_url=args.base_url + "/v1", api_key=args.api_key, max_retries=0, timeout=180)
    print(json.dumps({
        "chat_batch": chat_batch(c, args.timeout),
        "responses_batch": responses_batch(c, args.timeout),
        "parsed": parsed(c, args.timeout),
        "continued": continued(c),
        "logprobs": logprobs(c),
    }))


if __name__ == "__main__":
    sys.exit(main())
