#!/usr/bin/env python3
"""Submit a run to a toolfleet through its HTTP API, stream its events,
reconnect mid-run with Last-Event-ID, and read the result (docs/api.md).

Standard library only. Each user's credentials come from a netrc file only
its owner reads (never from the command line, which other local users see):

    TOOLFLEET_API             the console's URL (default http://127.0.0.1:8090)
    TOOLFLEET_CLIENT_NETRC    the client's netrc (default ~/.config/toolfleet/client.netrc)
    TOOLFLEET_OPERATOR_NETRC  the operator's (default ~/.config/toolfleet/operator.netrc)

The client submits the run, twice with one Idempotency-Key (one run), asking
for the calculator's calls to be approved. The operator, who reads the run's
journal, streams its events until the run waits for the approval, drops the
connection, approves, and reconnects with Last-Event-ID; the events read
before and after are checked against a full stream: none missed, none twice.
The client reads the result. Exit status 0 when every check holds.
"""

import base64
import json
import netrc
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

API = os.environ.get("TOOLFLEET_API", "http://127.0.0.1:8090").rstrip("/")
CONFIG = os.path.expanduser("~/.config/toolfleet")


def basic_auth(netrc_path):
    """The Authorization header of the user netrc_path names for the API's host."""
    host = urllib.parse.urlsplit(API).hostname
    found = netrc.netrc(netrc_path).authenticators(host)
    if found is None:
        sys.exit(f"{netrc_path}: no credentials for {host}")
    user, _, password = found
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


CLIENT = basic_auth(os.environ.get("TOOLFLEET_CLIENT_NETRC", os.path.join(CONFIG, "client.netrc")))
OPERATOR = basic_auth(os.environ.get("TOOLFLEET_OPERATOR_NETRC", os.path.join(CONFIG, "operator.netrc")))


def call(auth, method, path, body=None, headers=None):
    """Send one request; return (status, decoded JSON answer)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(API + path, data=data, method=method)
    req.add_header("Authorization", auth)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as e:
        err = json.load(e).get("error", {})
        sys.exit(f"{method} {path}: {e.code} {err.get('code')}: {err.get('message')}")


def events(auth, run, last_event_id=None, until=None):
    """Yield a run's server-sent events as (id, kind, data) until the stream
    ends or until(kind, data) says stop; then the connection is closed."""
    req = urllib.request.Request(f"{API}/v1/runs/{run}/events")
    req.add_header("Authorization", auth)
    if last_event_id:
        req.add_header("Last-Event-ID", last_event_id)
    with urllib.request.urlopen(req, timeout=60) as resp:
        ev = {}
        for raw in resp:
            line = raw.decode().rstrip("\n")
            if line.startswith(":"):
                continue  # a heartbeat
            if line == "":
                if "kind" in ev:
                    yield ev.get("id"), ev["kind"], ev["data"]
                    if until and until(ev["kind"], ev["data"]):
                        return
                ev = {}
                continue
            field, _, value = line.partition(": ")
            if field == "id":
                ev["id"] = value
            elif field == "event":
                ev["kind"] = value
            elif field == "data":
                ev["data"] = json.loads(value)


def main():
    request = {"prompt": "What is 6 * 7?", "require_approval": ["calculator"]}
    key = {"Idempotency-Key": "py-" + base64.b32encode(os.urandom(10)).decode().lower()}
    status, first = call(CLIENT, "POST", "/v1/runs", request, key)
    again_status, again = call(CLIENT, "POST", "/v1/runs", request, key)
    assert (status, again_status) == (201, 200), (status, again_status)
    assert again["run_id"] == first["run_id"] and again["duplicate"], again
    run = first["run_id"]
    print(f"submitted run {run} (sent twice, one run)")

    head = list(events(OPERATOR, run, until=lambda kind, _: kind == "approval_requested"))
    last_id, _, waiting = head[-1]
    print(f"{len(head)} events, then the run waits for approval (last event {last_id})")

    call_key = waiting["calls"][0]["call_key"]
    while not any(a["run_id"] == run for a in call(OPERATOR, "GET", "/v1/approvals")[1]["approvals"]):
        time.sleep(0.2)  # the request is stored right after the journal says it waits
    _, decided = call(OPERATOR, "POST", f"/v1/approvals/{run}/{call_key}", {"decision": "approve", "reason": "checked"})
    print(f"approval: {decided['outcome']} by {decided['approver']}")

    tail = list(events(OPERATOR, run, last_event_id=last_id))
    full = list(events(OPERATOR, run))
    # the journal's events have an id; the live ones (progress, call_started) have none and are not replayed
    ids = lambda evs: [e[0] for e in evs if e[0]]
    assert ids(head + tail) == ids(full), "a resumed stream missed or repeated events"
    assert tail[-1][1] == "finished", tail[-1]
    print(f"reconnected after {last_id}: {len(tail)} more events, nothing missed, nothing twice")

    _, got = call(CLIENT, "GET", f"/v1/runs/{run}")
    result = got["result"]
    print(f"answer: {result['answer']} ({result['termination_reason']})")
    for c in result["calls"]:
        print(f"  {c['tool']}: {c['outcome']} on {c.get('worker', '-')} in {c['duration_ms']} ms")
    assert result["termination_reason"] == "natural" and full[-1][2]["answer"] == result["answer"]


if __name__ == "__main__":
    main()
