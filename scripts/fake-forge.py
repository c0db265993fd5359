#!/usr/bin/env python3
"""A stand-in for a forge's pull-request API, for trying effects locally.

    python3 scripts/fake-forge.py PORT STATE_FILE

Serves on 127.0.0.1:PORT, as a forge would:

- POST /repos/<owner>/<repo>/pulls with {"title", "head", "base"} opens a
  pull request (201, {"number": n, "html_url": ...}). Like GitHub, it
  refuses a second open pull request for the same head (422). Unlike GitHub,
  it honours `Idempotency-Key`: a request whose key it has seen gets the
  first answer again (200) and opens nothing.
- PATCH /repos/<owner>/<repo>/pulls/by-head/<head> with {"state": "closed"}
  closes the open pull request of that head (200; 404 if none).

Every pull request it opens or closes is appended to STATE_FILE, one JSON
line each, so a script can count them. See docs/effects.md.
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
PULLS = {}  # number -> {"head", "state", ...}
ANSWERS = {}  # idempotency key -> (status, body)


def log(state_file, event):
    with open(state_file, "a") as f:
        f.write(json.dumps(event) + "\n")


class Forge(BaseHTTPRequestHandler):
    state_file = None

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            return None

    def handle_one(self, method):
        key = self.headers.get("Idempotency-Key")
        body = self.body()
        parts = self.path.strip("/").split("/")
        with LOCK:
            if key and key in ANSWERS:
                status, answer = ANSWERS[key]
                return self.answer(200 if status < 300 else status, answer)
            if body is None:
                return self.answer(400, {"message": "the body is not JSON"})
            if method == "POST" and len(parts) == 4 and parts[0] == "repos" and parts[3] == "pulls":
                head = body.get("head")
                if any(p["head"] == head and p["state"] == "open" for p in PULLS.values()):
                    status, answer = 422, {"message": "A pull request already exists for " + str(head)}
                else:
                    number = len(PULLS) + 1
                    PULLS[number] = {"head": head, "state": "open", "title": body.get("title")}
                    log(self.state_file, {"opened": number, "head": head, "key": key})
                    status, answer = 201, {
                        "number": number,
                        "html_url": "http://%s/%s/%s/pull/%d" % (self.headers.get("Host"), parts[1], parts[2], number),
                    }
            elif method == "PATCH" and len(parts) == 6 and parts[3] == "pulls" and parts[4] == "by-head":
                head = parts[5]
                open_pulls = [n for n, p in PULLS.items() if p["head"] == head and p["state"] == "open"]
                if not open_pulls:
                    status, answer = 404, {"message": "no open pull request for " + head}
                else:
                    PULLS[open_pulls[0]]["state"] = body.get("state", "closed")
                    log(self.state_file, {"closed": open_pulls[0], "head": head, "key": key})
                    status, answer = 200, {"number": open_pulls[0], "state": "closed"}
            else:
                status, answer = 404, {"message": "not found: %s %s" % (method, self.path)}
            if key:
                ANSWERS[key] = (status, answer)
        self.answer(status, answer)

    def do_POST(self):
        self.handle_one("POST")

    def do_PATCH(self):
        self.handle_one("PATCH")

    def log_message(self, *args):
        pass


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: fake-forge.py PORT STATE_FILE")
    Forge.state_file = sys.argv[2]
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Forge)
    server.serve_forever()


if __name__ == "__main__":
    main()
