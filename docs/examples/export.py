"""Reads the CSV export of the books, GET /books with `Accept: text/csv`, with Python's standard
library (3.8+) and its `csv` module.

See docs/api.md, Export. The books arrive as the service streams them, and are read as they
arrive, never held whole:
- the body is UTF-8 text; `newline=""` leaves the line ends to the `csv` module, which reads CRLF
  between records and keeps a CR or LF inside a quoted field as part of the text;
- every title and author comes back exactly as stored: no field is altered (a title that starts
  with `=` is text here; only a spreadsheet would take it for a formula);
- an error is the envelope (ExportError with its status and message), never CSV;
- an export cut off after it began (the database went away) ends without HTTP's terminating
  chunk: `http.client.IncompleteRead` is raised, and the books read so far are not the whole.

Run as a script, it prints each book as a line of JSON, {"id":..,"title":..,"author":..,"year":..},
and ends with status 0 once the export is complete, 1 when it failed or was cut off:
  BOOKKEEPING_URL=http://localhost:8080 BOOKKEEPING_USERNAME=admin BOOKKEEPING_PASSWORD=change-me \\
    python3 docs/examples/export.py
BOOKKEEPING_QUERY adds the listing's parameters (`author=herbert&sort=-year`); BOOKKEEPING_TOKEN
starts with that token instead of logging in.
"""
import csv
import http.client
import io
import json
import os
import sys
import urllib.error
import urllib.request

HEADER = ["id", "title", "author", "year"]


class ExportError(Exception):
    """An answer other than the export: its status and its envelope's message."""

    def __init__(self, status, message):
        super().__init__(f"{status} {message}")
        self.status = status
        self.message = message


def login(base_url, username, password):
    body = json.dumps({"username": username, "password": password}).encode()
    request = urllib.request.Request(base_url + "/token", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.load(answer)["data"]["token"]


def export_books(base_url, token, query=""):
    """Yields each book of the CSV export, as it arrives, as a dict with `id` and `year` as integers."""
    url = base_url + "/books" + ("?" + query if query else "")
    request = urllib.request.Request(url, headers={"Authorization": token, "Accept": "text/csv"})
    try:
        answer = urllib.request.urlopen(request, timeout=60)
    except urllib.error.HTTPError as error:
        raise ExportError(error.code, json.load(error)["message"]) from None
    with answer:
        # strict: a malformed record raises csv.Error rather than being read some other way
        reader = csv.reader(io.TextIOWrapper(answer, encoding="utf-8", newline=""), strict=True)
        header = next(reader, None)
        if header != HEADER:
            raise ValueError(f"not a CSV export of books: header {header!r}")
        for id_, title, author, year in reader:
            yield {"id": int(id_), "title": title, "author": author, "year": int(year)}


if __name__ == "__main__":
    base_url = os.environ["BOOKKEEPING_URL"].rstrip("/")
    token = os.environ.get("BOOKKEEPING_TOKEN") or login(
        base_url, os.environ["BOOKKEEPING_USERNAME"], os.environ["BOOKKEEPING_PASSWORD"])
    count = 0
    try:
        for book in export_books(base_url, token, os.environ.get("BOOKKEEPING_QUERY", "")):
            print(json.dumps(book, separators=(",", ":")))
            count += 1
    except ExportError as error:
        print(f"export refused: {error}", file=sys.stderr)
        sys.exit(1)
    except http.client.IncompleteRead:
        print(f"export cut off after {count} books: not complete, ask again", file=sys.stderr)
        sys.exit(1)
    print(f"export complete: {count} books", file=sys.stderr)
