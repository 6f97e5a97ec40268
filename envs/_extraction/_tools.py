"""The agent's reading tools over one extracted report: read a page, fetch a table, search the text.

Every tool answers with text and never raises on a bad argument: a page that does not exist, a
table index past the end, an empty query are told back to the agent as what to do instead (STYLE 5).
The document's text is untrusted content: it is only ever returned as an observation (clipped to
`page_chars`), never interpreted; search is a literal, case-insensitive substring match (no regular
expression from the model, so no pathological patterns).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Optional

#: Longest search phrase accepted, and most matching lines listed.
MAX_QUERY = 100
MAX_HITS = 15

TOOL_SPECS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "read_page",
        "description": "Return the text of one page of the report (pages are numbered from 1) and how many tables "
                       "it holds.",
        "parameters": {"type": "object", "properties": {"page": {"type": "integer", "minimum": 1}},
                       "required": ["page"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "get_table",
        "description": "Return the cells of one table on a page, one row per line, cells separated by ' | '. "
                       "The scale (thousands, millions) is in the table's top-left cell or in the line above it.",
        "parameters": {"type": "object", "properties": {"page": {"type": "integer", "minimum": 1},
                                                        "index": {"type": "integer", "minimum": 1, "default": 1}},
                       "required": ["page"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "search",
        "description": f"List the lines of the report that contain a phrase (case-insensitive, at most {MAX_HITS}), "
                       "with their page numbers.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string", "maxLength": MAX_QUERY}},
                       "required": ["query"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "submit_answer",
        "description": "Submit the answer: one JSON object with every field the task lists (numbers or null). "
                       "The reply says which fields are missing or wrong; you may correct and submit again.",
        "parameters": {"type": "object", "properties": {"answer": {"type": "object"}}, "required": ["answer"]}}},
]


@dataclass(frozen=True)
class Document:
    """The extracted pages of one report (text and tables, as pdfplumber read them)."""

    pages: tuple[str, ...]
    tables: tuple[tuple[tuple[tuple[str, ...], ...], ...], ...]

    @classmethod
    def from_index(cls, index: dict[str, Any]) -> "Document":
        pages = index["pages"]
        return cls(pages=tuple(p["text"] for p in pages),
                   tables=tuple(tuple(tuple(tuple(row) for row in t) for t in p["tables"]) for p in pages))

    @property
    def n_pages(self) -> int:
        return len(self.pages)

    def _bad_page(self, page: Any) -> Optional[str]:
        if not isinstance(page, int) or isinstance(page, bool):
            return f"page must be an integer from 1 to {self.n_pages}, got {json.dumps(page)}"
        if not 1 <= page <= self.n_pages:
            return f"there is no page {page}: the report has pages 1 to {self.n_pages}"
        return None

    def read_page(self, page: Any, page_chars: int = 6000) -> str:
        bad = self._bad_page(page)
        if bad:
            return bad
        text = self.pages[page - 1]
        if len(text) > page_chars:
            text = text[:page_chars] + f"\n[... {len(text) - page_chars} more characters on this page not shown]"
        k = len(self.tables[page - 1])
        tables = (f"[{k} table{'s' if k > 1 else ''} on this page: get_table(page={page}, index=1"
                  + (f"..{k}" if k > 1 else "") + ")]") if k else "[no tables on this page]"
        return f"[page {page} of {self.n_pages}]\n{text}\n{tables}"

    def get_table(self, page: Any, index: Any = 1) -> str:
        bad = self._bad_page(page)
        if bad:
            return bad
        tables = self.tables[page - 1]
        if not tables:
            return f"page {page} has no tables; read_page({page}) shows its text"
        if not isinstance(index, int) or isinstance(index, bool) or not 1 <= index <= len(tables):
            return f"page {page} has {len(tables)} table(s); index must be from 1 to {len(tables)}, got {json.dumps(index)}"
        rows = tables[index - 1]
        width = max((len(r) for r in rows), default=0)
        body = "\n".join(" | ".join(c.replace("\n", " ") for c in r) for r in rows)
        return f"[table {index} of {len(tables)} on page {page}: {len(rows)} rows x {width} columns]\n{body}"

    def search(self, query: Any) -> str:
        if not isinstance(query, str) or not query.strip():
            return "query must be a non-empty phrase, e.g. search(query=\"net sales\")"
        q = " ".join(query.split()).casefold()
        if len(q) > MAX_QUERY:
            return f"query is {len(q)} characters; the limit is {MAX_QUERY}: search for a shorter phrase"
        hits = [(i + 1, line.strip()) for i, text in enumerate(self.pages) for line in text.splitlines()
                if q in " ".join(line.split()).casefold()]
        if not hits:
            return f"no line contains {query.strip()!r}; try a shorter phrase or another word (e.g. 'sales' for 'revenue')"
        shown = "\n".join(f"p{p}: {line}" for p, line in hits[:MAX_HITS])
        more = f"\n[... {len(hits) - MAX_HITS} more matching lines]" if len(hits) > MAX_HITS else ""
        return f"{len(hits)} line(s) contain {query.strip()!r}:\n{shown}{more}"


# -- the plain-text form of the same actions ----------------------------------------------------------

_COMMAND = re.compile(r"^[ \t]*`*[ \t]*(read_page|page|get_table|table|search|submit_answer|submit)\b[ \t]*\(?[ \t]*(.*)",
                      re.IGNORECASE | re.MULTILINE)
_INTS = re.compile(r"-?\d+")
_FENCED_JSON = re.compile(r"```(?:json)?\s*\n(\{.*\})\s*```", re.DOTALL)

TEXT_FORMAT_HINT = (
    "No action found. Call a tool (read_page, get_table, search, submit_answer), or write one command per "
    "message: `read_page 3`, `get_table 6 1`, `search net sales`, or `submit {...}` with the JSON answer.")


def parse_text_action(text: str) -> Optional[tuple[str, dict[str, Any]]]:
    """(tool name, arguments) for a plain-text action, or None when it holds none.

    `read_page 3`, `read_page(3)`, `get_table 6 2`, `search net sales`, `submit {...}`, on the first line
    that starts with one (so a sentence of reasoning may come before it); a reply that is only a JSON
    object (bare or in a ```json block) is a submission too.
    """
    found = list(_COMMAND.finditer(text))
    fenced = _FENCED_JSON.search(text)
    # A submission wins over a stray line of reasoning that happens to start with "Table 2 ..." or "Page 3".
    m = next((x for x in found if x.group(1).lower().startswith("submit")), None)
    if m is None and fenced is not None:
        return "submit_answer", {"answer": fenced.group(1)}
    m = m or (found[0] if found else None)
    if m is None:
        body = text.strip()
        return ("submit_answer", {"answer": body}) if body.startswith("{") and body.endswith("}") else None
    name, rest = m.group(1).lower(), m.group(2).strip()
    if name in ("submit", "submit_answer"):
        return "submit_answer", {"answer": text[m.start(2) :].strip()}  # the JSON may span many lines
    if name == "search":
        query = rest.splitlines()[0].rstrip(")`").strip() if rest else ""
        query = re.sub(r"^(?:query\s*=\s*)?[\"']?(.*?)[\"']?$", r"\1", query, flags=re.DOTALL)
        return "search", {"query": query}
    nums = [int(x) for x in _INTS.findall(rest.splitlines()[0] if rest else "")]
    if name in ("read_page", "page"):
        return "read_page", {"page": nums[0] if nums else None}
    return "get_table", {"page": nums[0] if nums else None, "index": nums[1] if len(nums) > 1 else 1}
