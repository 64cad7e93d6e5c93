"""The troubleshooting knowledge base: error text -> cause, the check to run, and the fix.

The entries live in knowledge.json beside this file; they restate the guides' troubleshooting tables
(source "guides") and a few messages documented by NVIDIA (source "vendor docs").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tokenrace.errors import InvalidInput


class KnowledgeEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    title: str = Field(min_length=1)
    patterns: list[str] = Field(min_length=1)
    cause: str = Field(min_length=1)
    check: str = Field(min_length=1)
    fix: str = Field(min_length=1)
    source: Literal["guides", "vendor docs"]
    checks: list[str] = Field(default_factory=list, description="doctor checks that look for this")

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern, re.IGNORECASE)
            except re.error as err:
                raise ValueError(f"bad pattern {pattern!r}: {err}") from err
        return patterns


class KnowledgeBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int
    entries: list[KnowledgeEntry]

    @field_validator("entries")
    @classmethod
    def _unique_ids(cls, entries: list[KnowledgeEntry]) -> list[KnowledgeEntry]:
        ids = [entry.id for entry in entries]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"duplicate knowledge ids: {duplicates}")
        return entries


@dataclass(frozen=True)
class Match:
    entry: KnowledgeEntry
    score: float
    matched: str
    exact: bool


@cache
def load_knowledge() -> KnowledgeBase:
    text = resources.files("tokenrace.doctor").joinpath("knowledge.json").read_text(encoding="utf-8")
    return KnowledgeBase.model_validate_json(text)


def entry(entry_id: str) -> KnowledgeEntry:
    for item in load_knowledge().entries:
        if item.id == entry_id:
            return item
    raise KeyError(entry_id)


def explain(text: str, limit: int = 3) -> list[Match]:
    """The entries that best explain an error message or code, best first.

    Regex hits rank first (longer matched text = more specific = higher). When nothing matches,
    entries sharing words with the text come back, marked `exact=False`.
    """
    query = text.strip()
    if not query:
        raise InvalidInput("explain", "needs an error message or code")
    matches = [m for item in load_knowledge().entries if (m := _regex_match(item, query))]
    if not matches:
        matches = [m for item in load_knowledge().entries if (m := _word_match(item, query))]
    return sorted(matches, key=lambda m: -m.score)[:limit]


def best(text: str, min_score: float = 15.0) -> KnowledgeEntry | None:
    """The single best regex match for tool output, if any is specific enough."""
    found = [m for m in explain(text, limit=1) if m.exact and m.score >= min_score] if text.strip() else []
    return found[0].entry if found else None


def _regex_match(item: KnowledgeEntry, text: str) -> Match | None:
    hits = [hit.group(0) for pattern in item.patterns if (hit := re.search(pattern, text, re.IGNORECASE))]
    if not hits:
        return None
    longest = max(hits, key=len)
    return Match(item, score=10.0 * len(hits) + len(longest), matched=longest, exact=True)


_STOP = {"the", "and", "for", "with", "not", "was", "this", "that", "from", "error", "failed"}


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) >= 3 and w not in _STOP}


def _word_match(item: KnowledgeEntry, text: str) -> Match | None:
    query = _words(text)
    shared = query & _words(" ".join([item.title, *item.patterns, item.cause]))
    if not shared or len(shared) < min(2, len(query)):
        return None
    in_title = query & _words(" ".join([item.title, *item.patterns]))
    score = (len(shared) + len(in_title)) / (2 * len(query))
    return Match(item, score=score, matched=" ".join(sorted(shared)), exact=False)
