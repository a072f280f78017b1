"""Follows the feed of changes, GET /books/changes, with Python's standard library (3.8+).

See docs/api.md, Live changes. It resumes where it stopped, with nothing missed and nothing twice:
- after a dropped connection or a restart of the service, it waits the `retry` the feed gave and
  reconnects with `Last-Event-ID`, the id of the last event it received;
- on `token-expired`, or a `401` (the token expired meanwhile), it logs in again and resumes;
- on `reset`, or a `400` (an id the service does not know), what it holds may be stale: it must
  reload the list (`on_reset`), then the feed goes on; after a `400`, once the feed opened
  without an id has answered, so that what changes during the reload comes through the feed.

Run as a script, it prints each event as a line of JSON, {"id":..,"event":..,"data":..}:
  BOOKKEEPING_URL=http://localhost:8080 BOOKKEEPING_USERNAME=admin BOOKKEEPING_PASSWORD=change-me \\
    python3 docs/examples/feed.py
BOOKKEEPING_LAST_EVENT_ID resumes after that event; BOOKKEEPING_TOKEN starts with that token.
"""
import json
import os
import sys
import time
import urllib.error
import urllib.request


def follow_changes(base_url, username, password, on_event, on_reset=lambda: None,
                   token=None, last_event_id=None, log=lambda line: None):
    """Calls on_event(event) for each change and on_reset() when the client must reload; never returns."""
    retry_seconds = 2.0

    def login():
        body = json.dumps({"username": username, "password": password}).encode()
        request = urllib.request.Request(base_url + "/token", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.load(answer)["data"]["token"]

    if token is None:
        token = login()
    # After a 400, the list is reloaded once the new feed has answered: what changes meanwhile comes through it
    reload = False
    while True:
        headers = {"Authorization": token, "Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        try:
            # A keep-alive comment comes every few seconds: silence this long is a dead connection
            with urllib.request.urlopen(urllib.request.Request(base_url + "/books/changes", headers=headers), timeout=30) as answer:
                if reload:
                    reload = False
                    on_reset()
                fields = {"data": []}
                # The event stream format: fields up to a blank line; lines starting with ':' are comments
                for raw in answer:
                    line = raw.decode("utf-8").rstrip("\r\n")
                    if line == "":
                        if "id" in fields:
                            last_event_id = fields["id"]
                        kind = fields.get("event", "message")
                        if kind == "reset":
                            on_reset()
                        elif kind == "token-expired":
                            token = login()
                        elif fields["data"]:
                            on_event({"id": fields.get("id"), "event": kind, "data": json.loads("\n".join(fields["data"]))})
                        fields = {"data": []}
                    elif not line.startswith(":"):
                        name, _, value = line.partition(":")
                        value = value[1:] if value.startswith(" ") else value
                        if name == "data":
                            fields["data"].append(value)
                        elif name == "retry" and value.isdigit():
                            retry_seconds = int(value) / 1000
                        elif name in ("id", "event"):
                            fields[name] = value
            log("the feed ended: resuming")
        except urllib.error.HTTPError as error:
            if error.code == 401:
                token = login()
                continue
            if error.code == 400:
                log("the service does not know the last event id: starting over")
                last_event_id = None
                reload = True
                continue
            log(f"the feed answered {error.code}: resuming")
        except OSError as error:
            log(f"the feed failed ({error}): resuming")
        time.sleep(retry_seconds)


if __name__ == "__main__":
    def printed(event):
        print(json.dumps(event, separators=(",", ":")), flush=True)

    try:
        follow_changes(
            os.environ["BOOKKEEPING_URL"], os.environ["BOOKKEEPING_USERNAME"], os.environ["BOOKKEEPING_PASSWORD"],
            on_event=printed, on_reset=lambda: printed({"event": "reset"}),
            token=os.environ.get("BOOKKEEPING_TOKEN"), last_event_id=os.environ.get("BOOKKEEPING_LAST_EVENT_ID"),
            log=lambda line: print(line, file=sys.stderr, flush=True))
    except KeyboardInterrupt:
        pass
