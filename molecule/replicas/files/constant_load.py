"""Constant load through the gateway, the test's own: STREAMS concurrent streaming chat requests,
each stream sending its next request as soon as the last one ended, until STOP_FILE exists.

    constant_load.py --url URL --streams 4 --max-tokens 64 --stop-file F --out F.json [--key-file K]
                     [--long-requests N --long-max-tokens M]

Writes F.json: requests sent, failures (status other than 200, a broken stream, no final usage),
the first errors, and the tokens received in each whole second (from the cumulative usage SGLang
puts in every chunk with stream_options.continuous_usage_stats), so the test reads the lowest
throughput of any second of a window. Standard library only: it runs inside the lab container.

With --long-requests, N long requests of M tokens go out first, one after the other, each once the
one before it streams: with nothing else in flight, a round-robin gateway gives each to another
replica, so a replica drained soon after still holds one. F.json's "long" says how each ended,
its tokens apart from the constant streams' seconds.
"""
import argparse
import collections
import http.client
import json
import os
import threading
import time
import urllib.parse


def served_model(url, headers):
    """The model id the gateway lists (smg routes by model)."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request("GET", "/v1/models", headers=headers)
        return json.loads(connection.getresponse().read())["data"][0]["id"]
    finally:
        connection.close()


def one_request(url, headers, model, index, max_tokens, tokens_at):
    """Send one streaming request; return None on success, else why it failed."""
    parts = urllib.parse.urlsplit(url)
    body = json.dumps({"model": model, "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True, "continuous_usage_stats": True},
                       "messages": [{"role": "user", "content": "constant load request %s" % index}]})
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    try:
        connection.request("POST", "/v1/chat/completions", body, headers)
        answer = connection.getresponse()
        if answer.status != 200:
            return "HTTP %d: %s" % (answer.status, answer.read()[:200].decode("utf-8", "replace"))
        seen, done = 0, False
        for line in answer:
            line = line.strip()
            if line == b"data: [DONE]":
                done = True
                break
            if not line.startswith(b"data: "):
                continue
            usage = json.loads(line[6:]).get("usage") or {}
            tokens = usage.get("completion_tokens") or 0
            if tokens > seen:
                tokens_at(tokens - seen)
                seen = tokens
        if not done or seen != max_tokens:
            return "stream ended after %d of %d tokens (done: %s)" % (seen, max_tokens, done)
        return None
    except (OSError, http.client.HTTPException, ValueError) as error:
        return "%s: %s" % (type(error).__name__, error)
    finally:
        connection.close()


def long_requests(url, headers, model, count, max_tokens):
    """Start COUNT long requests, each once the one before it streams; the threads and their
    results (index -> (start, end, failure))."""
    results, threads = {}, []
    for index in range(count):
        streaming = threading.Event()

        def one(index=index, streaming=streaming):
            start = time.time()
            failure = one_request(url, headers, model, "long %d" % index, max_tokens, lambda _count: streaming.set())
            streaming.set()
            results[index] = (start, time.time(), failure)

        thread = threading.Thread(target=one)
        thread.start()
        threads.append(thread)
        streaming.wait(60)
    return threads, results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--stop-file", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--key-file")
    parser.add_argument("--long-requests", type=int, default=0)
    parser.add_argument("--long-max-tokens", type=int, default=0)
    args = parser.parse_args()
    headers = {"Content-Type": "application/json"}
    if args.key_file:
        with open(args.key_file, encoding="utf-8") as handle:
            headers["Authorization"] = "Bearer " + handle.read().strip()
    model = served_model(args.url, headers)
    lock = threading.Lock()
    per_second = collections.Counter()
    counts = {"sent": 0, "failed": 0}
    errors = []

    def tokens_at(count):
        with lock:
            per_second[int(time.time())] += count

    def stream(number):
        index = number
        while not os.path.exists(args.stop_file):
            with lock:
                counts["sent"] += 1
            failure = one_request(args.url, headers, model, index, args.max_tokens, tokens_at)
            index += args.streams
            if failure:
                with lock:
                    counts["failed"] += 1
                    if len(errors) < 20:
                        errors.append("%.3f %s" % (time.time(), failure))

    started = time.time()
    long_threads, long_results = long_requests(args.url, headers, model, args.long_requests, args.long_max_tokens)
    threads = [threading.Thread(target=stream, args=(number,)) for number in range(args.streams)]
    for thread in threads:
        thread.start()
    for thread in threads + long_threads:
        thread.join()
    result = dict(counts, errors=errors, streams=args.streams, started=started, ended=time.time(),
                  tokens_per_second={str(second): count for second, count in sorted(per_second.items())},
                  long=[dict(zip(("start", "end", "failure"), long_results[index])) for index in sorted(long_results)])
    with open(args.out + ".partial", "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    os.replace(args.out + ".partial", args.out)


if __name__ == "__main__":
    main()
