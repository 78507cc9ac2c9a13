#!/usr/bin/env python3
"""qmap serve against real clients and against qmap run (make serve-test).

The shipped King James Llama (tests/data/kjv_llama) is converted and quantized to Q8_ROW; servers run on
free loopback ports. What must hold:
  - the official OpenAI client (npm `openai`, pinned in tests/serve/package.json) gets completions, chat
    completions and both streamed, and their greedy text equals `qmap run --temp 0` on the
    same prompt (chat: on the prompt the chatml template renders);
  - batch invariance, exact: a request's text and log-probabilities (every float's bits, as JSON prints
    them) are the same alone, with other requests in flight, and on a server that reads its prompt in
    chunks of 2 tokens through other slots;
  - greedy and seeded sampled text equal `qmap run`'s (its default act) alone and with other requests in
    flight: a Q8_ROW session is a batch of one (qmap.h), so the server's text is qmap run's to the bit.
  - bad input gets the right status and an OpenAI error object, and the server lives on;
  - a bounded load (300 requests, 16 clients, streaming and not, some leaving early): every request is
    answered or refused with a status, /metrics returns to 0 busy slots, RSS grows by at most 5 MB after
    the first 30 requests;
  - --api-key, a full queue (503 + Retry-After), a slow client cut after --timeout, SIGTERM finishing the
    request in flight and exiting 0; the README's curl and openai-client examples (its Server section, or
    tests/serve/readme_server.md until it has one) run as written;
  - a classifier's /v1/classify equals torch's logits, a translator's /v1/translate equals qmap run's.
--quick (the sanitizer build): the load test with 60 requests and no RSS bound (ASan's quarantine keeps freed
memory; LeakSanitizer, at the server's exit, checks that nothing leaked and makes the exit status nonzero).
"""
import argparse
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PROMPT = "In the beginning"
SYSTEM = "Answer in the words of the King James Bible."
FAILS = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILS.append(what)


class Server:
    def __init__(self, qmap, model, *extra, env=None):
        self.proc = subprocess.Popen([qmap, "serve", model, "--port", "0", "-t", "1", *extra], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError("qmap serve did not start: " + line + self.proc.stderr.read())
        self.port = int(m.group(1))
        self.banner = line
        # drain the logs so the server never blocks on a full pipe
        self.log = []
        self.drains = [threading.Thread(target=self._drain, args=(f,), daemon=True) for f in (self.proc.stderr, self.proc.stdout)]
        for t in self.drains:
            t.start()

    def _drain(self, f):
        for line in f:
            self.log.append(line)

    def request(self, method, path, body=None, headers=None, timeout=60):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        out = r.status, dict(r.getheaders()), r.read()
        c.close()
        return out

    def json(self, method, path, body=None, headers=None):
        st, h, b = self.request(method, path, body, headers)
        try:
            return st, h, json.loads(b)
        except ValueError:
            return st, h, b

    def rss_kb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = -1
        for t in self.drains:
            t.join(timeout=10)
        return code


def sse_events(server, path, body, stop_after=None):
    """Stream a request; returns (status, list of event payloads). stop_after: close the socket after that many."""
    c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    c.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    events = []
    if r.status != 200:
        r.read()
        c.close()
        return r.status, events
    while True:
        line = r.fp.readline()
        if not line:
            break
        line = line.decode()
        if line.startswith("data: "):
            events.append(line[6:].strip())
            if stop_after is not None and len(events) >= stop_after:
                break
            if events[-1] == "[DONE]":
                break
    c.close()
    return r.status, events


def qmap_run(a, model, prompt, n, temp=0.0, seed=None):
    """qmap run as a user runs it (default act): its text is the server's (the module's docstring says why)."""
    cmd = [a.qmap, "run", model, "-p", prompt, "-n", str(n), "--temp", str(temp), "--json", "-q", "-t", "1"]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def chatml(messages):
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + "<|im_start|>assistant\n"


def make_model(a):
    os.makedirs(a.workdir, exist_ok=True)
    f32, q8 = os.path.join(a.workdir, "kjv.qmap"), os.path.join(a.workdir, "kjv-q8.qmap")
    if not os.path.exists(q8):
        subprocess.run([a.qmap, "convert", os.path.join(ROOT, "tests/data/kjv_llama"), "-o", f32, "--quiet"], check=True)
        subprocess.run([a.qmap, "quantize", "--q8", f32, "-o", q8, "--quiet"], check=True)
    return q8


def test_openai_client(a, srv, model):
    client = os.path.join(a.npm, "openai_client.mjs")
    shutil.copy(os.path.join(HERE, "openai_client.mjs"), client)
    out = json.loads(subprocess.run(["node", client, f"http://127.0.0.1:{srv.port}/v1", PROMPT, "24"], check=True,
                                    capture_output=True, text=True, timeout=120).stdout)
    ref = qmap_run(a, model, PROMPT, 24)["text"]
    chat_ref = qmap_run(a, model, chatml([{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}]), 24)["text"]
    check(out["models"] == [os.path.basename(model)], "openai client: models.list names the container")
    check(out["completion"]["text"] == ref, "openai client: completion = qmap run greedy")
    check(out["completion"]["usage"]["completion_tokens"] == 24 and out["completion"]["finish_reason"] == "length",
          "openai client: completion usage and finish_reason")
    check(out["completion_stream"]["text"] == ref, "openai client: streamed completion = qmap run greedy")
    check(out["completion_stream"]["events"] >= 2, "openai client: the completion streams in several events")
    check(out["chat"]["text"] == chat_ref and out["chat"]["role"] == "assistant", "openai client: chat = qmap run on the chatml prompt")
    check(out["chat_stream"]["text"] == chat_ref and out["chat_stream"]["role"] == "assistant",
          "openai client: streamed chat = qmap run on the chatml prompt")
    check((out["chat_stream"]["usage"] or {}).get("completion_tokens") == 24, "openai client: stream_options.include_usage")
    check(out["n2"]["status"] == 400 and "'n'" in out["n2"]["message"], "openai client: n=2 is a 400 naming n")


def background_load(srv, stop, n_threads=5):
    """Requests in flight while another is checked: long streams and whole completions."""
    def worker(i):
        while not stop.is_set():
            body = {"prompt": ["And God said", "The LORD is my", "Blessed are"][i % 3], "max_tokens": 40 + 7 * i,
                    "temperature": 0.7, "seed": i}
            if i % 2:
                sse_events(srv, "/v1/completions", dict(body, stream=True))
            else:
                srv.request("POST", "/v1/completions", body)
    ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n_threads)]
    for t in ts:
        t.start()
    return ts


def completion_and_logprobs(srv, body):
    """The text and the log-probabilities (chosen and top 5, as the server prints them) of a completion."""
    st, _, r = srv.json("POST", "/v1/completions", dict(body, logprobs=5))
    if st != 200:
        return None
    c = r["choices"][0]
    return c["text"], c["logprobs"]["token_logprobs"], c["logprobs"]["top_logprobs"]


def test_equal_under_load(a, srv, model):
    ref = qmap_run(a, model, PROMPT, 32)["text"]
    sref = qmap_run(a, model, PROMPT, 32, temp=0.8, seed=1234)["text"]
    greedy = {"prompt": PROMPT, "max_tokens": 32, "temperature": 0}
    seeded = {"prompt": PROMPT, "max_tokens": 32, "temperature": 0.8, "seed": 1234}
    alone, s_alone = completion_and_logprobs(srv, greedy), completion_and_logprobs(srv, seeded)
    check(alone is not None and alone[0] == ref, "greedy alone = qmap run")
    check(s_alone is not None and s_alone[0] == sref, "seeded sampling alone = qmap run --seed")
    # the same prompt read 2 tokens per step, in slot 1 of 2 while slot 0 generates
    chunked = Server(a.qmap, model, "--parallel", "2", "-c", "256", "--chunk", "2", "-q")
    try:
        stop = threading.Event()
        ts = background_load(chunked, stop, n_threads=1)
        time.sleep(0.3)
        c_greedy, c_seeded = completion_and_logprobs(chunked, greedy), completion_and_logprobs(chunked, seeded)
        stop.set()
        for t in ts:
            t.join()
    finally:
        chunked.stop()
    check(c_greedy == alone, "batch invariance: greedy text and logprobs with the prompt in chunks of 2 = alone")
    check(c_seeded == s_alone, "batch invariance: seeded text and logprobs with the prompt in chunks of 2 = alone")
    stop = threading.Event()
    ts = background_load(srv, stop)
    time.sleep(0.3)
    same = s_same = stream_same = True
    for _ in range(3):
        same &= completion_and_logprobs(srv, greedy) == alone
        s_same &= completion_and_logprobs(srv, seeded) == s_alone
        st, ev = sse_events(srv, "/v1/completions", dict(greedy, stream=True))
        text = "".join(json.loads(e)["choices"][0]["text"] for e in ev if e != "[DONE]")
        stream_same &= st == 200 and text == ref and ev[-1] == "[DONE]"
    stop.set()
    for t in ts:
        t.join()
    check(same, "batch invariance: greedy text and logprobs with other requests in flight = alone")
    check(s_same, "batch invariance: seeded text and logprobs with other requests in flight = alone")
    check(stream_same, "streamed greedy with other requests in flight = qmap run")


def is_error(b, param=None):
    return isinstance(b, dict) and isinstance(b.get("error"), dict) and b["error"].get("message") and \
        b["error"].get("type") and (param is None or b["error"].get("param") == param)


def test_bad_input(a, srv, n_ctx):
    cases = [
        ("malformed JSON", "POST", "/v1/completions", b'{"prompt": "x", ', 400, None),
        ("not an object", "POST", "/v1/completions", b'["x"]', 400, None),
        ("prompt of the wrong type", "POST", "/v1/completions", {"prompt": 5}, 400, "prompt"),
        ("max_tokens a string", "POST", "/v1/completions", {"prompt": "x", "max_tokens": "10"}, 400, "max_tokens"),
        ("max_tokens 0", "POST", "/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
        ("max_tokens negative", "POST", "/v1/completions", {"prompt": "x", "max_tokens": -3}, 400, "max_tokens"),
        ("max_tokens absurd", "POST", "/v1/completions", {"prompt": "x", "max_tokens": 10 ** 12}, 400, "max_tokens"),
        ("temperature a string", "POST", "/v1/completions", {"prompt": "x", "temperature": "hot"}, 400, "temperature"),
        ("n = 3", "POST", "/v1/completions", {"prompt": "x", "n": 3}, 400, "n"),
        ("messages missing", "POST", "/v1/chat/completions", {"prompt": "x"}, 400, "messages"),
        ("bad role", "POST", "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages[0].role"),
        ("stop of the wrong type", "POST", "/v1/completions", {"prompt": "x", "stop": 7}, 400, "stop"),
        ("invalid UTF-8", "POST", "/v1/completions", b'{"prompt": "\xff\xfe abc"}', 400, None),
        ("token id outside the vocabulary", "POST", "/v1/completions", {"prompt": [1, 99999999]}, 400, "prompt"),
        ("unknown endpoint", "GET", "/v1/engines", None, 404, None),
        ("wrong method", "GET", "/v1/completions", None, 405, None),
        ("body over --max-body", "POST", "/v1/completions", b'{"prompt": "' + b"a" * (1 << 20) + b'"}', 413, None),
        ("prompt longer than the context", "POST", "/v1/completions", {"prompt": "In the beginning " * 400}, 400, "prompt"),
        ("tokenize without content", "POST", "/tokenize", {"text": "x"}, 400, "content"),
    ]
    for name, method, path, body, want, param in cases:
        st, _, b = srv.json(method, path, body)
        check(st == want and is_error(b, param), f"bad input: {name} -> {want} and an error object ({st})")
        if name == "prompt longer than the context":
            msg = b["error"]["message"] if is_error(b) else ""
            check(str(n_ctx) in msg and re.search(r"\d{3,} tokens", msg) is not None,
                  "bad input: the context error names both lengths")
    # a chunked body (no Content-Length) past --max-body: 413 at its end
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    c.request("POST", "/v1/completions", body=iter([b'{"prompt": "', b"a" * (3 << 19), b'"}']), encode_chunked=True,
              headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
    r = c.getresponse()
    b = json.loads(r.read())
    c.close()
    check(r.status == 413 and is_error(b), f"bad input: a chunked body over --max-body -> 413 ({r.status})")
    # a Content-Length far over --max-body: answered before any of the body is sent
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\n\r\n")
    head = s.recv(200)
    s.close()
    check(head.startswith(b"HTTP/1.1 413"), f"bad input: Content-Length 100 MB -> 413 before the body ({head[:20]})")
    st, _, b = srv.json("GET", "/health")
    check(st == 200 and b == {"status": "ok"}, "the server lives on after the bad input")


def test_logprobs(a, srv):
    """Greedy with logprobs: each chosen token is its own best alternative, with the same log-probability;
    text offsets rise; chat reports the same tokens."""
    st, _, b = srv.json("POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 8, "temperature": 0, "logprobs": 3})
    lp = b["choices"][0]["logprobs"] if st == 200 else None
    ok = lp is not None and len(lp["tokens"]) == 8 and all(len(t) == 3 for t in lp["top_logprobs"])
    ok = ok and all(max(t, key=t.get) == tok and abs(t[tok] - v) < 1e-6 and v <= 0
                    for tok, v, t in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]))
    ok = ok and lp["text_offset"] == sorted(lp["text_offset"]) and lp["text_offset"][0] == 0
    check(ok, "logprobs: greedy tokens are their own top alternative, offsets rise")
    st, _, c = srv.json("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 4,
                                                         "temperature": 0, "logprobs": True, "top_logprobs": 2})
    content = c["choices"][0]["logprobs"]["content"] if st == 200 else []
    check(len(content) == 4 and all(e["top_logprobs"][0]["token"] == e["token"] for e in content),
          "logprobs: chat lists each token with its alternatives")


def test_tokenize(a, srv, model):
    ref = qmap_run(a, model, PROMPT, 1)["prompt_ids"]
    st, _, b = srv.json("POST", "/tokenize", {"content": PROMPT})
    check(st == 200 and b["tokens"] == ref, "/tokenize = qmap run's prompt ids")
    st, _, b = srv.json("POST", "/detokenize", {"tokens": ref[1:]})
    check(st == 200 and b["content"] == PROMPT, "/detokenize gives the text back")


def metrics(srv):
    st, _, b = srv.request("GET", "/metrics")
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(qmap_\w+) ([0-9.e+-]+)$", b.decode(), re.M)}


def load_client(srv, rng, statuses, lock):
    kind = rng.choice(["whole", "whole", "stream", "chat_stream", "leave", "bad"])
    body = {"prompt": rng.choice(["And God said", "The LORD is my shepherd", "In the beginning"]),
            "max_tokens": rng.randint(4, 40), "temperature": rng.choice([0, 0.8]), "seed": rng.randint(0, 99)}
    try:
        if kind == "whole":
            st, _, _ = srv.request("POST", "/v1/completions", body)
        elif kind == "stream":
            st, ev = sse_events(srv, "/v1/completions", dict(body, stream=True))
            st = st if st != 200 or (ev and ev[-1] == "[DONE]") else -1
        elif kind == "chat_stream":
            msgs = [{"role": "user", "content": body.pop("prompt")}]
            st, ev = sse_events(srv, "/v1/chat/completions", dict(body, messages=msgs, stream=True))
            st = st if st != 200 or (ev and ev[-1] == "[DONE]") else -1
        elif kind == "leave":
            st, _ = sse_events(srv, "/v1/completions", dict(body, stream=True, max_tokens=200), stop_after=2)
            st = "left" if st == 200 else st
        else:
            st, _, _ = srv.request("POST", "/v1/completions", {"prompt": 1})
    except (OSError, http.client.HTTPException) as e:
        st = "lost: " + repr(e)
    with lock:
        statuses.append((kind, st))


def test_load(a, srv, n_requests):
    rng = random.Random(46)
    statuses, lock = [], threading.Lock()
    todo = list(range(n_requests))
    rss_after_30 = [None]

    def client(seed):
        r = random.Random(seed)
        while True:
            with lock:
                if not todo:
                    return
                todo.pop()
            load_client(srv, r, statuses, lock)
            with lock:
                if len(statuses) >= 30 and rss_after_30[0] is None:
                    rss_after_30[0] = srv.rss_kb()
    ts = [threading.Thread(target=client, args=(rng.random(),)) for _ in range(16)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    rss_end = srv.rss_kb()
    lost = [s for s in statuses if not (s[1] in (200, 400, 503, "left"))]
    check(len(statuses) == n_requests and not lost, f"load: {n_requests} requests from 16 clients all answered or refused "
          f"with a status (lost: {lost[:3]})")
    counts = {}
    for _, s in statuses:
        counts[s] = counts.get(s, 0) + 1
    print(f"     load statuses: {counts}")
    busy = None
    for _ in range(100):
        m = metrics(srv)
        busy = m.get("qmap_slots_busy"), m.get("qmap_queue_depth")
        if busy == (0.0, 0.0):
            break
        time.sleep(0.1)
    check(busy == (0.0, 0.0), f"load: /metrics back to 0 busy slots and an empty queue ({busy})")
    grow = (rss_end - rss_after_30[0]) / 1024
    print(f"     RSS after 30 requests {rss_after_30[0] / 1024:.1f} MB, after {n_requests}: {rss_end / 1024:.1f} MB")
    if not a.quick:   # under ASan freed memory waits in a quarantine; LeakSanitizer checks leaks there instead
        check(grow <= 5.0, f"load: RSS grew {grow:.2f} MB after the first 30 requests (at most 5)")


def test_auth_queue_timeout_sigterm(a, model):
    env = dict(os.environ, QMAP_API_KEY="s3cret-key")
    srv = Server(a.qmap, model, "--parallel", "1", "--max-queue", "0", "--timeout", "2", "-q", env=env)
    body = {"prompt": PROMPT, "max_tokens": 4}
    st, _, b = srv.json("POST", "/v1/completions", body)
    check(st == 401 and is_error(b), "api key: no Authorization is 401 with an error object")
    st, _, b = srv.json("POST", "/v1/completions", body, {"Authorization": "Bearer s3cret-kez"})
    check(st == 401 and is_error(b), "api key: a wrong key is 401")
    st, _, b = srv.json("GET", "/metrics", None, {"Authorization": "Bearer s3cret"})
    check(st == 401, "api key: a prefix of the key is 401")
    st, _, b = srv.json("POST", "/v1/completions", body, {"Authorization": "Bearer s3cret-key"})
    check(st == 200 and b["choices"][0]["finish_reason"] == "length", "api key: the right key (from QMAP_API_KEY) is 200")
    st, _, _ = srv.json("GET", "/health")
    check(st == 200, "api key: /health needs none")

    # a slow client: headers never finished; the server closes the connection after --timeout 2
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
    s.settimeout(30)
    try:
        closed = s.recv(100) == b""
    except (socket.timeout, ConnectionResetError) as e:
        closed = isinstance(e, ConnectionResetError)
    s.close()
    check(closed, "slow client: cut after --timeout")

    # the one slot busy and no queue: 503 with Retry-After; then SIGTERM while that stream runs
    auth = {"Authorization": "Bearer s3cret-key", "Content-Type": "application/json"}
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    c.request("POST", "/v1/completions", body=json.dumps({"prompt": PROMPT, "max_tokens": 300, "stream": True,
                                                          "temperature": 0}).encode(), headers=auth)
    r = c.getresponse()
    first = b""
    while not first.startswith(b"data: "):   # raw lines: chunk sizes come between
        first = r.fp.readline()
    st, h, b = srv.json("POST", "/v1/completions", body, auth)
    check(st == 503 and h.get("Retry-After") == "1" and is_error(b), "full queue: 503 with Retry-After and an error object")
    srv.proc.send_signal(signal.SIGTERM)
    rest = ""
    while "data: [DONE]" not in rest:
        line = r.fp.readline()   # raw: the chunk sizes are lines of their own, and not "data: " lines
        if not line:
            break
        rest += line.decode()
    c.close()
    check(first.startswith(b"data: ") and rest.rstrip().endswith("data: [DONE]") and '"finish_reason":"length"' in rest,
          "SIGTERM: the request in flight finishes" + ("" if rest.rstrip().endswith("[DONE]") else " (got: %r)" % rest[-300:]))
    code = srv.proc.wait(timeout=60)
    check(code == 0, f"SIGTERM: exit status 0 ({code})")


ZEPHYR_JINJA = ("{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + message['content'] + "
                "eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\\n' + message['content'] + eos_token }}\n"
                "{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\n"
                "{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}")


def test_chat_template(a):
    """A container converted with zephyr's tokenizer_config.json chat_template: the server recognises it and
    renders chats as zephyr does (greedy output = qmap run on that prompt)."""
    src = os.path.join(a.workdir, "kjv-zephyr")
    os.makedirs(src, exist_ok=True)
    for f in ("config.json", "pytorch_model.bin", "tokenizer.model"):
        if not os.path.exists(os.path.join(src, f)):
            os.symlink(os.path.join(ROOT, "tests/data/kjv_llama", f), os.path.join(src, f))
    with open(os.path.join(src, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": ZEPHYR_JINJA, "bos_token": "<s>", "eos_token": "</s>"}, f)
    model = os.path.join(a.workdir, "kjv-zephyr.qmap")
    subprocess.run([a.qmap, "convert", src, "-o", model, "--quiet"], check=True)
    srv = Server(a.qmap, model, "--parallel", "2", "-c", "256", "-q")
    try:
        check("chat template zephyr: recognised" in srv.banner, "chat template: zephyr recognised in the stored Jinja text")
        msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}]
        st, _, b = srv.json("POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": 16, "temperature": 0})
        rendered = "".join(f"<|{m['role']}|>\n{m['content']}</s>\n" for m in msgs) + "<|assistant|>\n"
        ref = qmap_run(a, model, rendered, 16)["text"]
        check(st == 200 and b["choices"][0]["message"]["content"] == ref, "chat template: zephyr chat = qmap run on its prompt")
    finally:
        srv.stop()
    plain = Server(a.qmap, os.path.join(a.workdir, "kjv-q8.qmap"), "--chat-template", "llama3", "-q")
    check("chat template llama3: --chat-template" in plain.banner, "chat template: --chat-template overrides")
    plain.stop()


def test_classifier(a):
    """The shipped digits classifier behind POST /v1/classify: every held-out row's scores within 1e-5 of
    torch's logits (tests/data/digits_mlp/test.npz) and the same class; bad rows refused; LM routes 404."""
    import numpy as np
    z = np.load(os.path.join(ROOT, "tests/data/digits_mlp/test.npz"))
    mlp = os.path.join(a.workdir, "digits_mlp.qmap")
    subprocess.run([a.qmap, "convert", os.path.join(ROOT, "tests/data/digits_mlp/model.pt"), "-o", mlp, "--quiet"], check=True)
    srv = Server(a.qmap, mlp, "-q")
    try:
        check("(a classifier)" in srv.banner, "classifier: the banner says it serves a classifier")
        st, _, b = srv.json("POST", "/v1/classify", {"inputs": z["x"].tolist()})
        got = np.array([e["scores"] for e in b["data"]]) if st == 200 else np.zeros((1, 1))
        ref = z["logits"].astype(np.float64)
        rel = float(np.abs(got - ref).max() / np.abs(ref).max()) if got.shape == ref.shape else 1.0
        check(st == 200 and rel < 1e-5, f"classifier: scores of all {len(ref)} rows within 1e-5 of torch's ({rel:.1e})")
        check(st == 200 and [e["class"] for e in b["data"]] == ref.argmax(1).tolist(), "classifier: torch's class for every row")
        st, _, b = srv.json("POST", "/v1/classify", {"inputs": [[0.5] * 63]})
        check(st == 400 and is_error(b, "inputs"), "classifier: a row of the wrong size is a 400 naming inputs")
        st, _, b = srv.json("POST", "/v1/completions", {"prompt": "x"})
        check(st == 404 and is_error(b), "classifier: /v1/completions is a 404 saying what is served")
    finally:
        code = srv.stop()
    check(code == 0, "classifier: SIGTERM, exit 0")
    lm = os.path.join(a.workdir, "kjv-q8.qmap")
    srv = Server(a.qmap, lm, "-q")
    st, _, b = srv.json("POST", "/v1/classify", {"inputs": [[1.0]]})
    srv.stop()
    check(st == 404 and is_error(b), "a language model's server answers /v1/classify with a 404")


def test_translator(a):
    """The number-words encoder-decoder behind POST /v1/translate: each sentence's text, ids and score equal
    qmap run's, greedy and with beam 4; a bad beam is a 400; LM routes 404."""
    src = os.path.join(ROOT, "tests/data/numbers/post-relu")
    s2s = os.path.join(a.workdir, "numbers.qmap")
    subprocess.run([a.qmap, "convert", os.path.join(src, "model.pt"), "--src-tokenizer", os.path.join(src, "src/tokenizer.json"),
                    "--tgt-tokenizer", os.path.join(src, "tgt/tokenizer.json"), "-o", s2s, "--quiet"], check=True)
    sentences = ["one thousand nine hundred eighty four", "three thousand forty two", "two hundred seven"]
    srv = Server(a.qmap, s2s, "-q")
    try:
        check("(an encoder-decoder)" in srv.banner, "translator: the banner says it serves an encoder-decoder")
        for beam in (1, 4):
            st, _, b = srv.json("POST", "/v1/translate", {"text": sentences, "beam": beam})
            same = st == 200 and len(b["data"]) == len(sentences)
            for s, got in zip(sentences, b.get("data", []) if st == 200 else []):
                r = subprocess.run([a.qmap, "run", s2s, "-p", s, "--beam", str(beam), "--json", "-q"], capture_output=True,
                                   text=True, check=True)
                ref = json.loads(r.stdout)["translations"][0][0]
                same &= got["text"] == ref["text"] and got["ids"] == ref["ids"] and abs(got["score"] - ref["score"]) < 1e-6
            check(same, f"translator: beam {beam} = qmap run --beam {beam} on {len(sentences)} sentences")
        st, _, b = srv.json("POST", "/v1/translate", {"text": ["one"], "beam": 9})
        check(st == 400 and is_error(b, "beam"), "translator: beam 9 is a 400 naming beam")
        st, _, b = srv.json("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})
        check(st == 404 and is_error(b), "translator: /v1/chat/completions is a 404 saying what is served")
    finally:
        code = srv.stop()
    check(code == 0, "translator: SIGTERM, exit 0")


def test_log_json(a, model):
    srv = Server(a.qmap, model, "--log-json")
    srv.json("GET", "/health")
    srv.json("POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 2})
    srv.stop()
    lines = [json.loads(l) for l in srv.log if l.startswith("{")]
    check(len(lines) == 2 and lines[1]["path"] == "/v1/completions" and lines[1]["status"] == 200,
          "--log-json: one JSON object per request")


def readme_example(kind, port):
    return subprocess.run([sys.executable, os.path.join(HERE, "readme_examples.py"), kind, str(port)], check=True,
                          capture_output=True, text=True).stdout


def test_readme_examples(a, srv):
    """The README's Server section (or its proposed copy, tests/serve/readme_server.md) run as written."""
    r = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", readme_example("curl", srv.port)], capture_output=True,
                       text=True, timeout=120)
    check(r.returncode == 0 and "data: [DONE]" in r.stdout and '"text_completion"' in r.stdout and
          '"chat.completion"' in r.stdout, "the README's curl examples run as written")
    if r.returncode:
        print(r.stdout[-2000:], r.stderr[-2000:])
    script = os.path.join(a.npm, "readme_example.mjs")
    with open(script, "w") as f:
        f.write(readme_example("js", srv.port))
    r = subprocess.run(["node", script], capture_output=True, text=True, timeout=120)
    check(r.returncode == 0 and len(r.stdout.strip().splitlines()) >= 2,
          "the README's openai-client example runs as written (a chat answer and a streamed completion)")
    if r.returncode:
        print(r.stdout[-2000:], r.stderr[-2000:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qmap", required=True)
    ap.add_argument("--npm", required=True, help="directory holding node_modules/openai")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    a.qmap = os.path.abspath(a.qmap)
    model = make_model(a)
    n_ctx = 256
    srv = Server(a.qmap, model, "--parallel", "4", "-c", str(n_ctx), "--max-queue", "16", "-q")
    try:
        test_openai_client(a, srv, model)
        test_equal_under_load(a, srv, model)
        test_bad_input(a, srv, n_ctx)
        test_tokenize(a, srv, model)
        test_logprobs(a, srv)
        test_readme_examples(a, srv)
        test_load(a, srv, 60 if a.quick else 300)
    finally:
        code = srv.stop()
    check(code == 0, f"SIGTERM on an idle server: exit status 0 ({code})")
    test_auth_queue_timeout_sigterm(a, model)
    test_chat_template(a)
    test_classifier(a)
    test_translator(a)
    test_log_json(a, model)
    print(f"serve-test: {len(FAILS)} failed" if FAILS else "serve-test: all passed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
