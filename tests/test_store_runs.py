"""Real runs in other processes: `citeflow sql` answers while they write, and two runs at once both finish
with all their rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from citeflow.contracts import ClaimStatus
from storage.store import get_store, read_only_query

CITEFLOW = str(Path(sys.executable).parent / "citeflow")
QUESTIONS = [
    "How does citeflow check that a quote appears on a page?",
    "Where is the search index stored?",
]


def test_sql_answers_during_two_runs_at_once_and_both_keep_all_their_rows(
    prefect_api: None, docs_db: Path, tmp_path: Path
) -> None:
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())}  # the test server, not a new one
    runs = [
        subprocess.Popen(
            [
                CITEFLOW,
                "run",
                question,
                "--db",
                str(docs_db),
                "--reports",
                str(tmp_path / "reports"),
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for question in QUESTIONS
    ]
    answers: list[tuple[float, int]] = []  # (seconds citeflow sql took, runs it saw running)
    while any(run.poll() is None for run in runs):
        started = time.monotonic()
        sql = subprocess.run(
            [
                CITEFLOW,
                "sql",
                "SELECT count(*) AS running FROM runs WHERE status = 'running'",
                "--db",
                str(docs_db),
            ]
            + ["--json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert sql.returncode == 0, sql.stderr
        answers.append((time.monotonic() - started, json.loads(sql.stdout)["running"]))
    outputs = [run.communicate(timeout=60) for run in runs]

    for run, (_, err) in zip(runs, outputs, strict=True):
        assert run.returncode == 0, err
    during = [seconds for seconds, running in answers if running]
    assert during, answers  # citeflow sql answered while a run was writing, not only after
    assert max(during) < 30, answers
    store = get_store(docs_db)
    for out, _ in outputs:
        payload = json.loads(out)
        verified = store.claims(payload["run_id"], ClaimStatus.verified)
        cited = {source["id"] for source in payload["sources"]}
        # The report lists the verified claims of the sources it cites, every one of them.
        assert {claim["id"] for claim in payload["claims"]} == {
            c.id for c in verified if c.source_id in cited
        }
        assert (
            payload["sentences"]
            and Path(payload["report_path"]).read_text(encoding="utf-8") == payload["report"]
        )
    statuses = read_only_query(docs_db, "SELECT status, count(*) FROM runs GROUP BY ALL")[1]
    assert sum(count for status, count in statuses if status in ("complete", "partial")) == 2, statuses
