#!/usr/bin/env python3
"""A scriptable stdio MCP server for Berth's stdio tests (standard library only).

Speaks newline-delimited JSON-RPC on stdin/stdout and misbehaves on request:

  --noise               print non-JSON lines, a blank line, a spaces-and-CR line and non-JSON-RPC
                        JSON before the initialize response, and "[INFO] fetched 3 items" between
                        later responses (field case BR-10)
  --exit-after-calls N  exit with --exit-code after answering N tools/call (BR-07)
  --fail-start          print "no database URL provided" (and a fake token) on stderr and exit
                        with --exit-code within 100 ms (BR-13 b, BR-34)
  --never-init          read stdin, never answer (BR-13 a)
  --init-on-eof         answer initialize only after stdin closes (BR-13 c)
  --close-stdout-after-init
                        close fd 1 after the initialize response, then sleep (BR-08)
  --flood-stderr        write 256 KiB of stderr (1,250 lines, 4 pipe buffers) before answering each tools/call,
                        from the thread that answers (so an undrained stderr blocks the answer)
  --ignore-sigterm      ignore SIGTERM and stdin EOF (must be SIGKILLed)
  --count-file PATH     append one line per process start ("start <pid>") and per initialize
  --batch-replies       send every response as a one-member JSON-RPC batch array, followed in
                        the same array by a log notification (BR-23)
  --roots-during-list   on the first tools/list, send the request roots/list (id "roots-1")
                        before answering; the answer to it is recorded in --count-file as
                        "roots answered"
  --ambiguous-in-batch  with --batch-replies, the array starts with a member that names "id"
                        twice (id 999 first, the response's id last) and answers "ambiguous"
  --exit-on-discover    exit with code 1 on the era probe (server/discover), as a legacy server that
                        ends on a request it does not know (issue 39, item 11)
  --raw-dir DIR         the tool raw answers with the exact text of DIR/result as its result
                        (never parsed), and every line read from stdin is appended to
                        DIR/received as it arrived (issue 12, item 6)

Tools: echo {tag} -> text tag; sleep {ms, tag} -> text tag after ms (concurrent); crash ->
exits mid-call without answering; huge {bytes} -> one reply line of about that many bytes;
whoami -> the pid; null-id -> an error with "id": null (BR-01), as is the notification
notifications/unreadable; huge-log {bytes} -> a log notification of about
that many bytes, then the text "logged"; ask -> sends sampling/createMessage to the client and answers the call with
the client's result as JSON text.
"""

import argparse
import json
import os
import signal
import sys
import threading
import time

parser = argparse.ArgumentParser()
parser.add_argument("--noise", action="store_true")
parser.add_argument("--exit-after-calls", type=int, default=0)
parser.add_argument("--exit-code", type=int, default=0)
parser.add_argument("--fail-start", action="store_true")
parser.add_argument("--never-init", action="store_true")
parser.add_argument("--init-on-eof", action="store_true")
parser.add_argument("--close-stdout-after-init", action="store_true")
parser.add_argument("--flood-stderr", action="store_true")
parser.add_argument("--ignore-sigterm", action="store_true")
parser.add_argument("--count-file")
parser.add_argument("--batch-replies", action="store_true")
parser.add_argument("--ambiguous-in-batch", action="store_true")
parser.add_argument("--roots-during-list", action="store_true")
parser.add_argument("--raw-dir")
parser.add_argument("--exit-on-discover", action="store_true")
args = parser.parse_args()

out = sys.stdout.buffer
lock = threading.Lock()
calls = 0


def count(line):
    if args.count_file:
        with open(args.count_file, "a") as f:
            f.write(line + "\n")


def write_raw(data: bytes):
    with lock:
        out.write(data)
        out.flush()


def send(message):
    if args.batch_replies and "id" in message and "method" not in message:
        note = {"jsonrpc": "2.0", "method": "notifications/message",
                "params": {"level": "info", "data": "batched"}}
        members = [json.dumps(message), json.dumps(note)]
        if args.ambiguous_in_batch:
            # json.dumps cannot repeat a name: the member is written as text.
            members.insert(0, '{"jsonrpc":"2.0","id":999,"id":%s,"result":{"content":'
                              '[{"type":"text","text":"ambiguous"}]}}' % json.dumps(message["id"]))
        write_raw(("[" + ",".join(members) + "]").encode() + b"\n")
        return
    write_raw(json.dumps(message).encode() + b"\n")


count(f"start {os.getpid()} {time.time()}")
if args.ignore_sigterm:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if args.fail_start:
    time.sleep(0.05)
    sys.stderr.write("config: API_TOKEN=sk-abcdef0123456789abcdef0123\n")
    sys.stderr.write("no database URL provided\n")
    sys.stderr.flush()
    sys.exit(args.exit_code or 1)

TOOLS = [
    {"name": "echo", "description": "echo", "inputSchema": {"type": "object", "properties": {"tag": {"type": "string"}}}},
    {"name": "sleep", "description": "sleep", "inputSchema": {"type": "object", "properties": {"ms": {"type": "number"}, "tag": {"type": "string"}}}},
    {"name": "crash", "description": "exit mid-call", "inputSchema": {"type": "object"}},
    {"name": "huge", "description": "huge reply", "inputSchema": {"type": "object", "properties": {"bytes": {"type": "number"}}}},
    {"name": "whoami", "description": "pid", "inputSchema": {"type": "object"}},
    {"name": "null-id", "description": "an error with id null", "inputSchema": {"type": "object"}},
    {"name": "huge-log", "description": "a huge log line, then the answer", "inputSchema": {"type": "object", "properties": {"bytes": {"type": "number"}}}},
    {"name": "ask", "description": "sampling round trip", "inputSchema": {"type": "object"}},
]


def text(msg_id, value):
    return {"jsonrpc": "2.0", "id": msg_id, "result": {"content": [{"type": "text", "text": value}]}}


def answer_initialize(msg):
    count("initialize")
    if args.noise:
        write_raw(b"DocumentationScraperService initialized\n\n   \r\n")
        write_raw(b'{"level":"info","msg":"ready"}\n')
        write_raw(b"\xff\xfe not utf-8\n")
    version = msg.get("params", {}).get("protocolVersion", "2025-06-18")
    send({"jsonrpc": "2.0", "id": msg["id"], "result": {
        "protocolVersion": version,
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "berth-fault-child", "version": "0"},
    }})
    if args.close_stdout_after_init:
        global stdout_closed
        sys.stdout.flush()
        os.close(1)
        stdout_closed = True


def call_tool(msg):
    global calls
    if args.flood_stderr:
        sys.stderr.write("".join(f"flood line {n} " + "x" * 190 + "\n" for n in range(1250)))
        sys.stderr.flush()
    params = msg.get("params", {})
    name, arguments = params.get("name"), params.get("arguments") or {}
    if name == "crash":
        os._exit(args.exit_code or 3)
    if name == "raw" and args.raw_dir:
        with open(os.path.join(args.raw_dir, "result"), "rb") as f:
            result = f.read().strip()
        write_raw(b'{"jsonrpc":"2.0","id":' + json.dumps(msg["id"]).encode() + b',"result":' + result + b"}\n")
        return
    if name == "ask":
        asked[f"ask-{msg['id']}"] = msg["id"]
        send({"jsonrpc": "2.0", "id": f"ask-{msg['id']}", "method": "sampling/createMessage",
              "params": {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
                         "maxTokens": 5}})
        return
    if name == "sleep":
        def later():
            time.sleep(arguments.get("ms", 0) / 1000)
            send(text(msg["id"], arguments.get("tag", "")))
        threading.Thread(target=later, daemon=True).start()
        return
    if name == "huge-log":
        filler = "y" * int(arguments.get("bytes", 0))
        send({"jsonrpc": "2.0", "method": "notifications/message",
              "params": {"level": "info", "data": filler}})
        send(text(msg["id"], "logged"))
        return
    if name == "null-id":
        send({"jsonrpc": "2.0", "id": None,
              "error": {"code": -32603, "message": "could not read the request"}})
        return
    if name == "huge":
        filler = "y" * int(arguments.get("bytes", 0))
        send(text(msg["id"], filler))
    elif name == "whoami":
        send(text(msg["id"], str(os.getpid())))
    else:
        send(text(msg["id"], arguments.get("tag", "")))
    if args.noise:
        write_raw(b"[INFO] fetched 3 items\n")
    calls += 1
    if args.exit_after_calls and calls >= args.exit_after_calls:
        os._exit(args.exit_code)


asked = {}
roots_asked = False
pending_init = None
stdout_closed = False
for raw in sys.stdin.buffer:
    if args.never_init or stdout_closed:
        continue
    if args.raw_dir:
        with open(os.path.join(args.raw_dir, "received"), "ab") as f:
            f.write(raw)
    msg = json.loads(raw)
    method = msg.get("method")
    if method == "server/discover" and args.exit_on_discover:
        os._exit(1)
    if method == "initialize":
        if args.init_on_eof:
            pending_init = msg
            continue
        answer_initialize(msg)
    elif method == "tools/list":
        if args.roots_during_list and not roots_asked:
            roots_asked = True
            send({"jsonrpc": "2.0", "id": "roots-1", "method": "roots/list"})
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {"tools": TOOLS}})
    elif method is None and msg.get("id") == "roots-1":
        count("roots answered")
    elif method == "tools/call":
        call_tool(msg)
    elif method == "notifications/unreadable":
        # A message the server cannot read: an error it cannot tie to a request (id null).
        send({"jsonrpc": "2.0", "id": None,
              "error": {"code": -32700, "message": "could not read a notification"}})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {}})
    elif method is None and msg.get("id") in asked:
        send(text(asked.pop(msg["id"]), json.dumps(msg.get("result"))))
    elif "id" in msg and method:
        send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "no such method"}})

if pending_init is not None:
    answer_initialize(pending_init)
if args.ignore_sigterm or args.never_init or stdout_closed:
    while True:
        time.sleep(1)
