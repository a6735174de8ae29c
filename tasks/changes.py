"""What changed since a recurring topic's last successful run: the reason to schedule it.

Sources are compared by canonical URL (new, gone) and, for a URL both runs read, by the content hash of the
page version each read (changed). Claims are compared by their verified quote: a quote this run verified
that the last did not is new; one the last run verified that this run did not is no longer supported. Old
page versions stay in the store, so an old report's quotes can still be checked against what they cited.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from citeflow.contracts import Claim, ClaimStatus, Page, RunStatus
from citeflow.sanitize import for_markdown as md
from citeflow.text import normalise
from storage.store import EvidenceStore, RunSummary

LISTED_MAX = 10  # claims listed by name in the report; the table artifact lists them all


class SourceChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    change: Literal["new", "changed", "gone"]
    url: str
    title: str


class Changes(BaseModel):
    model_config = ConfigDict(extra="forbid")

    topic: str
    previous_run_id: str | None
    previous_started_at: datetime | None
    sources: list[SourceChange]
    new_claims: list[str]
    unsupported_claims: list[str]

    @property
    def found(self) -> bool:
        """Whether anything changed (the first run of a topic has nothing to compare with)."""
        return bool(self.sources or self.new_claims or self.unsupported_claims)


def _quote_key(claim: Claim) -> str:
    return normalise(claim.quote).casefold()


def compare_sources(previous: list[Page], current: list[Page]) -> list[SourceChange]:
    before = {page.canonical_url: page for page in previous}
    now = {page.canonical_url: page for page in current}
    changes = [
        SourceChange(change="new" if url not in before else "changed", url=page.url, title=page.title)
        for url, page in now.items()
        if url not in before or before[url].content_hash != page.content_hash
    ]
    changes += [
        SourceChange(change="gone", url=page.url, title=page.title)
        for url, page in before.items()
        if url not in now
    ]
    return changes


def compare_claims(previous: list[Claim], current: list[Claim]) -> tuple[list[str], list[str]]:
    """(texts of claims new in this run, texts of the last run's claims no longer supported)."""
    before = {_quote_key(claim): claim for claim in previous}
    now = {_quote_key(claim): claim for claim in current}
    return (
        [claim.text for key, claim in now.items() if key not in before],
        [claim.text for key, claim in before.items() if key not in now],
    )


def _successful(store: EvidenceStore, topic: str) -> list[RunSummary]:
    """The topic's runs that ended with a report (complete or partial), newest first."""
    return [
        run for run in store.recent_runs(topic=topic) if run.status in (RunStatus.complete, RunStatus.partial)
    ]


def compared(
    store: EvidenceStore, topic: str, previous: RunSummary | None, run_id: str, claims: list[Claim]
) -> Changes:
    """Run `run_id` (its verified `claims`, and the pages its sources are) against `previous`."""
    if previous is None:
        return Changes(
            topic=topic,
            previous_run_id=None,
            previous_started_at=None,
            sources=[],
            new_claims=[],
            unsupported_claims=[],
        )
    new_claims, unsupported = compare_claims(store.claims(previous.run_id, ClaimStatus.verified), claims)
    return Changes(
        topic=topic,
        previous_run_id=previous.run_id,
        previous_started_at=previous.started_at,
        sources=compare_sources(store.cited_pages(previous.run_id), store.cited_pages(run_id)),
        new_claims=new_claims,
        unsupported_claims=unsupported,
    )


def changes_since_last_run(store: EvidenceStore, topic: str, run_id: str, claims: list[Claim]) -> Changes:
    """This run against the topic's last run that ended with a report."""
    previous = next((run for run in _successful(store, topic) if run.run_id != run_id), None)
    return compared(store, topic, previous, run_id, claims)


def last_two_compared(store: EvidenceStore, topic: str) -> Changes | None:
    """The topic's last successful run against the one before it; None with fewer than two."""
    runs = _successful(store, topic)
    if len(runs) < 2:
        return None
    latest = runs[0].run_id
    return compared(store, topic, runs[1], latest, store.claims(latest, ClaimStatus.verified))


def _listed(texts: list[str]) -> list[str]:
    shown = [f'  - "{md(" ".join(text.split()))}"' for text in texts[:LISTED_MAX]]
    if len(texts) > LISTED_MAX:
        shown.append(f"  - and {len(texts) - LISTED_MAX} more (see the changes table)")
    return shown


def changes_markdown(changes: Changes) -> list[str]:
    """The report's section, as lines; its heading starts with "## What changed". Titles, addresses and
    claims come from pages: escaped, as everything in the report is."""
    if changes.previous_run_id is None or changes.previous_started_at is None:
        return [
            "## What changed: first run",
            "",
            "This is the topic's first run: there is nothing to compare with.",
            "",
        ]
    when = f"{changes.previous_started_at:%Y-%m-%d %H:%M} UTC, run {changes.previous_run_id[:8]}"
    lines = [f"## What changed since the last run ({when})", ""]
    if not changes.found:
        return [*lines, "Nothing: the same sources, unchanged, support the same claims.", ""]
    labels = {"new": "New source", "changed": "Changed source (its page differs)", "gone": "No longer cited"}
    lines += [f"- {labels[s.change]}: {md(s.title or s.url)} ({md(s.url)})" for s in changes.sources]
    if changes.new_claims:
        lines += [f"- {len(changes.new_claims)} new claim(s):", *_listed(changes.new_claims)]
    if changes.unsupported_claims:
        lines += [
            f"- {len(changes.unsupported_claims)} claim(s) of the last run no longer supported:",
            *_listed(changes.unsupported_claims),
        ]
    return [*lines, ""]


def changes_table(changes: Changes) -> list[dict[str, str]]:
    """The same comparison as rows, for the `changes-NAME` table artifact."""
    if changes.previous_run_id is None:
        return [{"change": "first run", "what": "nothing to compare with", "detail": ""}]
    rows = [{"change": f"{s.change} source", "what": s.url, "detail": s.title} for s in changes.sources]
    rows += [{"change": "new claim", "what": text, "detail": ""} for text in changes.new_claims]
    rows += [
        {"change": "claim no longer supported", "what": text, "detail": ""}
        for text in changes.unsupported_claims
    ]
    return rows or [{"change": "none", "what": f"same as run {changes.previous_run_id}", "detail": ""}]
