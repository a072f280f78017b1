"""A client of the bookkeeping API with nothing but Python's standard library (3.8+).

See docs/clients.md. Every method returns the `data` of the envelope, or raises ApiError.
- The token goes in `Authorization` bare, as POST /token returned it (never `Bearer ...`).
- `401 Invalid token` (the token expired): log in again, once, and repeat the call.
- `429` or `503` with `Retry-After`: wait that long and repeat, at most `max_attempts` tries in
  all; a wait over `max_wait_seconds` is not waited, the answer is raised instead.
- A create carries an `Idempotency-Key`, the same on every repeat: it is stored once.
- `walk_books(**query)` follows each page's `Link` to the next; `update_book` and `delete_book`
  take the `ETag` of `get_book_with_etag` as `if_match` (a book changed since: ApiError 412).

Run as a script, it logs in and does one round of create, list, walk page by page, read, update
and delete:
  BOOKKEEPING_URL=http://localhost:8080 BOOKKEEPING_USERNAME=admin BOOKKEEPING_PASSWORD=change-me \\
    python3 docs/examples/client.py
"""
import collections
import email.utils
import json
import math
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

# A success: the envelope's `data` and the response's headers
Answer = collections.namedtuple("Answer", ["data", "headers"])


class ApiError(Exception):
    """An answer other than a success: its status, its envelope's message, its X-Request-Id."""

    def __init__(self, status, message, request_id):
        super().__init__(f"{status} {message} (request {request_id})")
        self.status = status
        self.message = message
        self.request_id = request_id


class BookkeepingClient:
    def __init__(self, base_url, username, password, token=None,
                 max_attempts=3, max_wait_seconds=60, log=lambda line: None):
        self.base_url = base_url.rstrip("/")
        self.username = username
        self.password = password
        self.token = token
        self.max_attempts = max_attempts
        self.max_wait_seconds = max_wait_seconds
        self.log = log

    def login(self):
        answer = self._send("POST", "/token", {"username": self.username, "password": self.password})
        self.token = answer.data["token"]
        return self.token

    def create_book(self, book, idempotency_key=None):
        """`idempotency_key`: pass your own to repeat a create yourself (after a network error)."""
        key = idempotency_key or str(uuid.uuid4())
        # A Structured Field string: the key in double quotes
        return self._authorized("POST", "/book", book, {"Idempotency-Key": f'"{key}"'}).data

    def list_books(self):
        return self._authorized("GET", "/books").data

    def walk_books(self, **query):
        """GET /books page by page: yields each page's books, then follows the page's `Link` to the
        next until a page has none (the last may be empty). `query`: `limit`, `sort`, `title`,
        `author`, `year_from`, `year_to` (docs/api.md); without `limit`, one page of them all."""
        path = "/books?" + urllib.parse.urlencode(query)
        while path is not None:
            answer = self._authorized("GET", path)
            yield answer.data
            path = next_page(answer.headers.get("Link"))

    def search_books(self, q, **query):
        """The books that `q` finds (docs/api.md, Search), best first, page by page as `walk_books`
        yields them; `query`: `limit` and the other parameters of a listing."""
        return self.walk_books(q=q, **query)

    def get_book(self, book_id):
        return self._authorized("GET", f"/book/{book_id}").data

    def get_book_with_etag(self, book_id):
        """The book and its `ETag`: the version to name in `if_match` when changing or deleting it."""
        answer = self._authorized("GET", f"/book/{book_id}")
        return answer.data, answer.headers.get("ETag")

    def update_book(self, book_id, changes, if_match=None):
        """`if_match`: an `ETag` of the book; if the book has changed since, ApiError 412
        `Precondition failed` is raised and nothing changes."""
        return self._authorized("PUT", f"/book/{book_id}", changes, if_match_header(if_match)).data

    def delete_book(self, book_id, if_match=None):
        return self._authorized("DELETE", f"/book/{book_id}", None, if_match_header(if_match)).data

    def _authorized(self, method, path, body=None, headers=None):
        headers = dict(headers or {})
        if self.token is None:
            self.login()
        try:
            return self._send(method, path, body, {**headers, "Authorization": self.token})
        except ApiError as err:
            if err.status != 401 or err.message != "Invalid token":
                raise
            self.log(f"{method} {path}: 401 Invalid token, logging in again")
            self.login()
            return self._send(method, path, body, {**headers, "Authorization": self.token})

    def _send(self, method, path, body=None, headers=None):
        headers = dict(headers or {})
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        for attempt in range(1, self.max_attempts + 1):
            request = urllib.request.Request(self.base_url + path, data=data, headers=headers, method=method)
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    return Answer(json.load(response)["data"], response.headers)
            except urllib.error.HTTPError as answer:
                # Not every answer is ours: a proxy in front may answer with a page of its own
                try:
                    message = json.load(answer)["message"]
                except (ValueError, KeyError, TypeError):
                    message = f"HTTP {answer.code}"
                wait = retry_after_seconds(answer.headers.get("Retry-After"))
                if (answer.code in (429, 503) and wait is not None
                        and wait <= self.max_wait_seconds and attempt < self.max_attempts):
                    self.log(f"{method} {path}: {answer.code} {message}, waiting {wait} s "
                             f"(attempt {attempt} of {self.max_attempts})")
                    time.sleep(wait)
                    continue
                raise ApiError(answer.code, message, answer.headers.get("X-Request-Id")) from None


def if_match_header(if_match):
    """Without a tag, no precondition: the write is done whatever the book's version."""
    return {} if if_match is None else {"If-Match": if_match}


def next_page(link):
    """The path of the next page in a listing's `Link` (`</books?...>; rel="next"`), or None on the last."""
    match = re.search(r'<([^>]*)>\s*;\s*rel="next"', link or "")
    return match.group(1) if match else None


def retry_after_seconds(value):
    """`Retry-After` in seconds (it may also be an HTTP date), or None without one."""
    if value is None:
        return None
    if value.isdigit():
        return int(value)
    try:
        return max(0, math.ceil(email.utils.parsedate_to_datetime(value).timestamp() - time.time()))
    except (TypeError, ValueError):
        return None


def main(env):
    client = BookkeepingClient(
        env.get("BOOKKEEPING_URL", "http://localhost:8080"),
        env.get("BOOKKEEPING_USERNAME"),
        env.get("BOOKKEEPING_PASSWORD"),
        # A token kept from earlier, if any; an expired one is replaced at the first call
        token=env.get("BOOKKEEPING_TOKEN") or None,
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )
    created = client.create_book({"title": "Dune", "author": "Frank Herbert", "year": 1965})
    print("created", json.dumps(created), flush=True)
    print("listed", json.dumps(client.list_books()), flush=True)
    # Herbert's books, one a page: a few pages to show even on a service with many books
    print("walked", json.dumps(list(client.walk_books(limit=1, sort="title", author="herbert"))), flush=True)
    # A search, best first, despite its typo: its first page of two
    print("searched", json.dumps(next(client.search_books("herbret", limit=2))), flush=True)
    book, etag = client.get_book_with_etag(created["id"])
    print("read", json.dumps(book), flush=True)
    # Based on the book as read: had it changed since, the update would be refused (412)
    print("updated", json.dumps(client.update_book(created["id"], {"year": 1966}, if_match=etag)), flush=True)
    print("deleted", json.dumps(client.delete_book(created["id"])), flush=True)


if __name__ == "__main__":
    try:
        main(os.environ)
    except ApiError as err:
        print(err, file=sys.stderr)
        sys.exit(1)
