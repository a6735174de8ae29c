"""`citeflow audit`: a past report re-verified from the store, one line per sentence, exit 1 on any problem.

The run audited is written as the first schema version stored it (migration 1 only, rows inserted as
that version's code wrote them), then the store is opened by today's code, which migrates it: the audit
must work on runs made by earlier citeflow versions.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import duckdb
from typer.testing import CliRunner

from citeflow.contracts import PageInput
from citeflow.urls import canonical_url
from cli.main import app
from storage import migrations
from storage.pages import content_hash, page_id
from storage.store import close_stores, get_store

runner = CliRunner()
RUN = "0b7e0c1e-0000-4000-8000-000000000001"
FOUNDED = "Acme Corp was founded by Jane Doe in 1947 in Ohio."
ANVILS = "The company first made anvils for farms near Dayton."
HISTORY = f"{FOUNDED} {ANVILS} It moved its works to Arizona in 1962."
MAGNETS = "The magnets are made in Tucson."
PRODUCTS = f"Acme Corp sells anvils, rockets and giant magnets to customers worldwide. {MAGNETS}"
PAGES = {"https://example.org/acme-history": HISTORY, "https://example.org/acme-products": PRODUCTS}


def old_store(folder: Path) -> Path:
    """A store at schema version 1 holding one finished run of two cited sentences."""
    db = folder / "old.duckdb"
    con = duckdb.connect(str(db))
    con.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, "
        "applied_at TIMESTAMP NOT NULL)"
    )
    migrations.m001_initial(con)
    con.execute("INSERT INTO schema_migrations VALUES (1, 'm001_initial', now())")
    stored = datetime(2025, 1, 2, 3, 4, 5)
    con.execute(
        "INSERT INTO runs VALUES (?, 'Who founded Acme Corp?', 'complete', 'extractive', 'local', '{}', "
        "?, ?, 1.5, '', '', '{}')",
        [RUN, stored, stored],
    )
    ids = {}
    for url, text in PAGES.items():
        canonical, digest = canonical_url(url), content_hash(text)
        ids[url] = page_id(canonical, digest)
        con.execute(
            "INSERT INTO pages VALUES (?, ?, ?, 'Acme', ?, ?, 'ingested', NULL, ?)",
            [ids[url], url, canonical, text, digest, stored],
        )
    for n, (url, quote, source) in enumerate(
        [
            ("https://example.org/acme-history", FOUNDED, "S1"),
            ("https://example.org/acme-products", MAGNETS, "S2"),
        ],
        start=1,
    ):
        start = PAGES[url].index(quote)
        con.execute("INSERT INTO run_sources VALUES (?, 'q1', ?, 'local', ?, ?)", [RUN, ids[url], n, source])
        con.execute(
            "INSERT INTO claims VALUES (?, ?, 'q1', ?, ?, ?, ?, ?, ?, 'verified', '', ?)",
            [
                RUN,
                f"C{n}",
                ids[url],
                content_hash(PAGES[url]),
                quote,
                quote,
                start,
                start + len(quote),
                source,
            ],
        )
        con.execute(
            "INSERT INTO report_sentences VALUES (?, ?, 'q1', ?, ?, 'kept', '')",
            [RUN, n - 1, quote, [source]],
        )
    con.close()
    return db


def audit(db: Path, *flags: str) -> tuple[int, str]:
    close_stores()  # the command opens the store itself
    result = runner.invoke(app, ["audit", RUN, "--db", str(db), *flags])
    return result.exit_code, result.output


def test_a_report_of_an_earlier_schema_is_re_verified_sentence_by_sentence(tmp_path: Path) -> None:
    db = old_store(tmp_path)

    code, output = audit(db)

    assert code == 0, output
    lines = output.splitlines()
    assert lines == [f"  0  ok  {FOUNDED} [S1]", f"  1  ok  {MAGNETS} [S2]"]
    assert (
        get_store(db).query("SELECT max(version) FROM schema_migrations")[1][0][0]
        == migrations.LATEST_VERSION
    )


def test_a_quote_moved_from_its_offsets_fails_its_sentence_and_the_exit_code(tmp_path: Path) -> None:
    db = old_store(tmp_path)
    con = duckdb.connect(str(db))
    con.execute("UPDATE claims SET quote_start = quote_start + 3, quote_end = quote_end + 3 WHERE id = 'C1'")
    con.close()

    code, output = audit(db)

    assert code == 1
    first, second = output.splitlines()[:2]
    assert first.startswith("  0  FAILED: cites claim C1, which no longer holds  ")
    assert second.startswith("  1  ok  ")
    assert "claim C1 (S1): its quote is not at offsets" in output


def test_latest_lists_the_claims_the_newest_page_versions_no_longer_support(tmp_path: Path) -> None:
    db = old_store(tmp_path)
    store = get_store(db)
    moved = PRODUCTS.replace(MAGNETS, "The magnets are now made in Mexico.")
    store.put_page(
        PageInput(url="https://example.org/acme-products", title="Acme", text=moved, origin="fetched")
    )

    exact, exact_output = audit(db)
    code, output = audit(db, "--latest")

    assert exact == 0, exact_output  # the versions cited still say what the report says
    assert code == 1
    lines = output.splitlines()
    assert lines[0] == f"  0  ok  {FOUNDED} [S1]"
    assert lines[1].startswith("  1  FAILED: cites claim C2, which no longer holds")
    assert "claims the newest page versions no longer support:" in lines
    assert any(
        "claim C2 (S2): the newest version of https://example.org/acme-products" in line for line in lines
    )
    assert not any("claim C1" in line for line in lines)


def test_an_unknown_run_is_a_problem_not_a_traceback(tmp_path: Path) -> None:
    db = old_store(tmp_path)
    close_stores()
    result = runner.invoke(app, ["audit", "no-such-run", "--db", str(db)])
    assert result.exit_code == 1
    assert "run no-such-run has no report to audit in this store" in result.output
    assert "Traceback" not in result.output
