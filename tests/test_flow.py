"""The research flow run through Prefect for real, on the embedded defaults."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from citeflow.contracts import ClaimStatus, Report, RunStatus
from citeflow.text import normalise
from storage.store import get_store
from tasks.audit import audit

QUESTION = "How does citeflow check that a quote appears on a page?"


async def artifact_keys(flow_run_id: str) -> set[str]:
    """The keys of a flow run's artifacts (the test server is shared: other tests' runs made theirs)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async with get_client() as client:
        found = await client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
        return {artifact.key for artifact in found if artifact.key}


def test_flow_writes_a_report_whose_every_citation_is_a_verified_quote(
    prefect_api: None, docs_db: Path, tmp_path: Path
) -> None:
    from flows.research import research_flow

    report = research_flow(
        question=QUESTION, settings={"db": str(docs_db), "reports": str(tmp_path / "reports")}
    )

    assert isinstance(report, Report)
    assert report.status in (RunStatus.complete, RunStatus.partial)
    assert report.sentences, report.markdown
    store = get_store(docs_db)
    assert audit(store, report) == []
    pages = {claim.id: store.get_page(claim.page_id) for claim in report.claims}
    for claim in report.claims:
        assert normalise(claim.quote) in normalise(pages[claim.id].text)
    source_ids = {source.id for source in report.sources}
    for sentence in report.sentences:
        assert sentence.cites and set(sentence.cites) <= source_ids
        assert f"[{sentence.cites[0]}]" in report.markdown
    assert "## Sources" in report.markdown
    assert "extractively" in report.markdown
    assert Path(report.report_path or "").read_text(encoding="utf-8") == report.markdown
    stages = [stage.stage for stage in report.metrics.stages]
    assert stages == ["plan", "research", "verify", "follow-up", "write"]
    verified = report.metrics.stages[2].claims_verified + report.metrics.stages[3].claims_verified
    assert verified == len(store.claims(report.run_id, ClaimStatus.verified))
    keys = asyncio.run(artifact_keys(report.run_id))
    slug = "how-does-citeflow-check-that-a-quote-appears-on"
    assert {f"report-{slug}", f"sources-{slug}", f"metrics-{slug}"} <= keys


def test_a_store_with_no_pages_fails_the_run_and_says_why(prefect_api: None, tmp_path: Path) -> None:
    from prefect.states import State

    from flows.research import report_of, research_flow

    state = research_flow(
        question="What is the airspeed of an unladen swallow?",
        settings={"db": str(tmp_path / "empty.duckdb"), "reports": str(tmp_path / "reports")},
        return_state=True,
    )

    assert isinstance(state, State) and state.is_failed()
    report = report_of(state)
    assert isinstance(report, Report)
    assert report.status is RunStatus.failed
    assert report.sentences == [] and report.sources == []
    assert "No report could be written" in report.markdown
    assert any("No verified evidence was found" in caveat for caveat in report.caveats)


def test_an_empty_question_fails_before_a_run_starts(prefect_api: None, tmp_path: Path) -> None:
    from pydantic import ValidationError

    from flows.research import research_flow

    with pytest.raises(ValidationError, match="the question is empty"):
        research_flow(question="   ", settings={"db": str(tmp_path / "x.duckdb")})
    assert not (tmp_path / "x.duckdb").exists()


def test_a_report_file_that_cannot_be_written_loses_nothing(
    prefect_api: None, docs_db: Path, tmp_path: Path
) -> None:
    from flows.research import research_flow

    blocked = tmp_path / "reports"
    blocked.write_text("a file where the reports folder should be")

    report = research_flow(question=QUESTION, settings={"db": str(docs_db), "reports": str(blocked)})

    assert isinstance(report, Report) and report.report_path is None
    assert any("the report file could not be written" in caveat for caveat in report.caveats)
    stored = get_store(docs_db).query(f"SELECT report_markdown FROM runs WHERE run_id = '{report.run_id}'")
    assert stored[1] == [(report.markdown,)]
    assert report.sentences
