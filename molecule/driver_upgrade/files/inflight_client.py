"""Streams chat completions through the host's service URL, one after another, and records
each one: when it started and ended, how it ended, and how many chunks arrived.

    python3 inflight_client.py URL MODEL OUT.jsonl --seconds 600 --stop-file /run/inflight.stop

It stops by itself after --seconds, or once --stop-file exists. A request the server refused
before it started (connection refused, 503 while draining) is recorded as "refused"; one that
began and ended without the closing [DONE] is "cut".
"""
import argparse
import http.client
import json
import os
import time
import urllib.parse


def one_request(url, model, max_tokens):
    parts = urllib.parse.urlsplit(url)
    record = {"start": time.time(), "chunks": 0, "finish_reason": None}
    body = json.dumps({"model": model, "stream": True, "max_tokens": max_tokens,
                       "messages": [{"role": "user", "content": "Count slowly from one to a thousand."}]})
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    try:
        connection.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
    except OSError as error:
        record.update(outcome="refused", error=repr(error), end=time.time())
        return record
    if response.status != 200:
        record.update(outcome="refused", status=response.status, end=time.time())
        return record
    done = False
    try:
        for raw in response:
            line = raw.decode().strip()
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                record["chunks"] += 1
                choices = json.loads(line[6:]).get("choices") or [{}]
                record["finish_reason"] = choices[0].get("finish_reason") or record["finish_reason"]
    except (OSError, http.client.HTTPException, ValueError) as error:
        record["error"] = repr(error)
    record.update(outcome="complete" if done and record["finish_reason"] else "cut", end=time.time())
    return record


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("url")
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--stop-file", default="/run/inflight.stop")
    parser.add_argument("--max-tokens", type=int, default=1024)
    args = parser.parse_args()
    deadline = time.time() + args.seconds
    with open(args.out, "a") as out:
        while time.time() < deadline and not os.path.exists(args.stop_file):
            record = one_request(args.url, args.model, args.max_tokens)
            out.write(json.dumps(record) + "\n")
            out.flush()
            if record["outcome"] == "refused":
                time.sleep(0.5)


if __name__ == "__main__":
    main()
