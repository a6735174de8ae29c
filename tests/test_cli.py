"""The command line: a run with --json, ingestion, SQL, and every bad input as one clear line."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from citeflow.text import normalise
from cli.main import app
from storage.store import get_store, read_only_query

runner = CliRunner()


def page_count(db: Path) -> int:
    return read_only_query(db, "SELECT count(*) FROM pages")[1][0][0]


def test_run_json_cites_only_verified_quotes_found_in_stored_pages(
    prefect_api: None, docs_db: Path, tmp_path: Path
) -> None:
    result = runner.invoke(
        app,
        ["run", "What does the verifier keep?", "--db", str(docs_db), "--reports", str(tmp_path), "--json"],
    )

    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert set(payload) >= {"run_id", "report_path", "report", "sources", "claims", "sentences", "metrics"}
    assert Path(payload["report_path"]).read_text(encoding="utf-8") == payload["report"]
    claims_by_source: dict[str, list[dict]] = {}
    for claim in payload["claims"]:
        claims_by_source.setdefault(claim["source"], []).append(claim)
    urls = {source["id"]: source["url"] for source in payload["sources"]}
    store = get_store(docs_db)
    assert payload["sentences"]
    for sentence in payload["sentences"]:
        for cite in sentence["cites"]:
            assert cite in urls and cite in claims_by_source
            for claim in claims_by_source[cite]:
                page = store.latest_page(urls[cite])
                assert page is not None and normalise(claim["quote"]) in normalise(page.text)


def test_run_prints_the_report_path(prefect_api: None, docs_db: Path, tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["run", "Where is the search index stored?", "--db", str(docs_db), "--reports", str(tmp_path)]
    )

    assert result.exit_code == 0, result.output
    path = Path(result.stdout.strip())
    assert path.parent == tmp_path and path.read_text(encoding="utf-8").startswith(
        "# Where is the search index"
    )


@pytest.mark.parametrize(
    ("question", "message"),
    [("", "the question: the question is empty"), ("x" * 2001, "2001 characters; the limit is 2000")],
)
def test_a_bad_question_is_one_line_and_creates_nothing(question: str, message: str, tmp_path: Path) -> None:
    db = tmp_path / "never.duckdb"

    result = runner.invoke(app, ["run", question, "--db", str(db)])

    assert result.exit_code == 1
    assert message in result.stderr and "store is unchanged" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not db.exists()


def test_ingest_of_a_missing_path_loads_nothing(docs_db: Path, tmp_path: Path) -> None:
    before = page_count(docs_db)

    result = runner.invoke(app, ["ingest", str(tmp_path / "nope.md"), "--db", str(docs_db)])

    assert result.exit_code == 1
    assert "nope.md" in result.stderr
    assert page_count(docs_db) == before


def test_ingest_of_a_malformed_json_line_names_it_and_loads_nothing(docs_db: Path, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    good = json.dumps({"url": "https://example.org/a", "title": "A", "text": "Alpha is the first letter."})
    corpus.write_text(f"{good}\n{{not json\n", encoding="utf-8")
    before = page_count(docs_db)

    result = runner.invoke(app, ["ingest", str(corpus), "--db", str(docs_db)])

    assert result.exit_code == 1
    assert "line 2" in result.stderr and "corpus.jsonl" in result.stderr
    assert page_count(docs_db) == before


def test_a_file_that_is_not_a_duckdb_database_is_refused_and_left_untouched(tmp_path: Path) -> None:
    notes = tmp_path / "notes.duckdb"
    notes.write_bytes(b"my notes, not a database\n")

    result = runner.invoke(app, ["sql", "SELECT 1", "--db", str(notes)])
    ingest = runner.invoke(app, ["ingest", str(tmp_path), "--db", str(notes)])

    assert result.exit_code == 1 and ingest.exit_code == 1
    assert "not a DuckDB database" in result.stderr
    assert notes.read_bytes() == b"my notes, not a database\n"


def test_sql_reads_and_refuses_writes(docs_db: Path) -> None:
    before = page_count(docs_db)

    read = runner.invoke(app, ["sql", "SELECT count(*) AS pages FROM pages", "--db", str(docs_db), "--json"])
    write = runner.invoke(app, ["sql", "DELETE FROM pages", "--db", str(docs_db)])

    assert read.exit_code == 0 and json.loads(read.stdout) == {"pages": before}
    assert write.exit_code == 1 and "DELETE" in write.stderr.upper()
    assert page_count(docs_db) == before


def test_models_check_reports_each_role_and_fails_on_a_bad_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    from openai_server import ScriptedServer, json_reply

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    with ScriptedServer() as server:
        server.enqueue(json_reply({"ok": True}))
        good = runner.invoke(app, ["models", "check", "--base-url", server.url, "--model", "small"])
        wrong = runner.invoke(
            app,
            [
                "models",
                "check",
                "--base-url",
                server.url,
                "--model",
                "small",
                "--set",
                "critic.base_url=http://127.0.0.1:9/v1",
            ],
        )

    assert good.exit_code == 0, good.output
    assert f"planner: ok small at {server.url}" in good.stdout
    assert "query_writer: not configured" in good.stdout
    assert wrong.exit_code == 1
    assert "critic: failed small at http://127.0.0.1:9/v1" in wrong.stdout
    assert "sk-test-not-a-real-key" not in good.stdout + wrong.stdout


def test_a_malformed_set_flag_is_one_line_and_runs_nothing(tmp_path: Path) -> None:
    db = tmp_path / "never.duckdb"

    result = runner.invoke(app, ["run", "Who wrote Hamlet?", "--db", str(db), "--set", "planner.model"])

    assert result.exit_code == 1
    assert "--set planner.model: expected NAME=VALUE" in result.stderr
    assert not db.exists()


def test_a_local_run_on_an_empty_store_says_to_ingest_first(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", "Who wrote Hamlet?", "--db", str(tmp_path / "empty.duckdb")])

    assert result.exit_code == 1
    assert "holds no pages to search; load documents with `citeflow ingest PATH...` first" in result.stderr


def test_sql_stops_a_query_past_its_timeout_in_one_line(docs_db: Path) -> None:
    started = time.monotonic()
    result = runner.invoke(
        app,
        [
            "sql",
            "SELECT sum(a.range * b.range) FROM range(1000000) a, range(1000000) b",
            "--db",
            str(docs_db),
            "--timeout",
            "1",
        ],
    )
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "error: SQL: ran longer than 1 s and was stopped (give --timeout SECONDS to allow longer) "
        "(the store is unchanged)"
    )
    assert time.monotonic() - started < 30  # interrupted, not left to run for hours


def test_sql_stops_a_query_past_its_memory_limit_in_one_line(docs_db: Path) -> None:
    result = runner.invoke(
        app,
        ["sql", "SELECT list(range) FROM range(50000000)", "--db", str(docs_db), "--memory-limit", "20MB"],
    )
    assert result.exit_code == 1
    assert "needed more memory than its limit of 20MB and was stopped" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# Runs `citeflow sql` as its only child and prints the child's peak memory (KB) last: a process of its own,
# so no other child of the test run counts.
PEAK_OF_CHILD = """
import resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stderr.write(done.stderr)
print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def test_sql_memory_stays_under_its_limit_though_one_vector_of_strings_is_larger(docs_db: Path) -> None:
    # 600 strings of 1 MB: DuckDB builds them in one vector, outside the memory_limit of its buffer pool.
    citeflow = str(Path(sys.executable).parent / "citeflow")
    query = "SELECT repeat('x', 1000000) FROM range(600)"
    command = [citeflow, "sql", query, "--db", str(docs_db), "--memory-limit", "200MB"]

    done = subprocess.run([sys.executable, "-c", PEAK_OF_CHILD, *command], capture_output=True, text=True)

    code, peak_kb = (int(value) for value in done.stdout.split())
    assert code == 1 and "Traceback" not in done.stderr
    assert "needed more memory than its limit of 200MB and was stopped" in done.stderr
    assert peak_kb < 450_000  # the process before the query plus 200 MB, not the 600 MB it asked for


@pytest.mark.parametrize(
    ("flags", "named"),
    [(["--memory-limit", "lots"], "--memory-limit lots"), (["--timeout", "0"], "--timeout 0")],
)
def test_a_bad_sql_limit_is_one_line(docs_db: Path, flags: list[str], named: str) -> None:
    result = runner.invoke(app, ["sql", "SELECT 1", "--db", str(docs_db), *flags])
    assert result.exit_code == 1
    assert (
        result.stderr.startswith(f"error: {named}: expected") and len(result.stderr.strip().splitlines()) == 1
    )


def test_sql_prints_what_pages_hold_without_colour_or_cursor_moves(docs_db: Path) -> None:
    # As a store written before text was cleaned on the way in may hold it.
    with get_store(docs_db).cursor() as cur:
        cur.execute(
            "UPDATE pages SET title = ? WHERE id = (SELECT min(id) FROM pages)", ["[red]Red\x1b[2J\x9b1A"]
        )

    result = runner.invoke(
        app, ["sql", "SELECT title FROM pages WHERE title LIKE '[red]%'", "--db", str(docs_db)]
    )

    assert result.exit_code == 0
    assert "[red]Red[2J1A" in result.stdout
    assert "\x1b" not in result.stdout and "\x9b" not in result.stdout


def test_ingest_reports_records_cut_to_the_page_text_cap(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"url": "https://example.org/big", "text": "Lava. " * 50_000}) + "\n")
    db = tmp_path / "store.duckdb"

    result = runner.invoke(app, ["ingest", str(corpus), "--db", str(db)])

    assert result.exit_code == 0, result.stderr
    assert "1 records cut to 200,000 characters (the page-text cap" in result.stderr
    assert read_only_query(db, "SELECT length(text) FROM pages")[1] == [(200_000,)]


def test_an_ingest_of_an_empty_folder_creates_no_store(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    db = tmp_path / "never.duckdb"

    result = runner.invoke(app, ["ingest", str(empty), "--db", str(db)])

    assert result.exit_code == 0
    assert result.stdout.startswith("0 records from 0 files")
    assert not db.exists()


def test_an_error_naming_a_hostile_file_name_cannot_colour_the_terminal(tmp_path: Path) -> None:
    corpus = tmp_path / "\x1b[31mred.jsonl"
    corpus.write_text("{not json\n")

    result = runner.invoke(app, ["ingest", str(corpus), "--db", str(tmp_path / "store.duckdb")])

    assert result.exit_code == 1
    assert "[31mred.jsonl line 1: is not valid JSON" in result.stderr and "\x1b" not in result.stderr


def test_ingest_out_of_memory_is_one_line(tmp_path: Path) -> None:
    corpus = tmp_path / "big.jsonl"
    with corpus.open("w") as out:  # one line larger than the memory left to the ingest
        out.write(json.dumps({"url": "https://example.org/", "text": "word " * 20_000_000}) + "\n")
    # The limit is set after citeflow is imported, so only the ingest itself runs out of memory. It runs
    # out while reading the line, before DuckDB starts: a thread DuckDB starts at the limit can make glibc
    # abort the process ("cannot allocate memory for thread-local data"), which no program can catch.
    script = (
        "import resource, sys\n"
        "from cli.main import app\n"
        "import storage.ingest, storage.store\n"
        "size = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmSize')) * 1024\n"
        "resource.setrlimit(resource.RLIMIT_AS, (size + 60 * 2**20, resource.RLIM_INFINITY))\n"
        "sys.argv = ['citeflow', 'ingest', sys.argv[1], '--db', sys.argv[2]]\n"
        "app()\n"
    )
    db = tmp_path / "store.duckdb"
    result = subprocess.run(
        [sys.executable, "-c", script, str(corpus), str(db)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "error: ingest: ran out of memory while loading (nothing was loaded; the store is unchanged)"
    )
    assert not db.exists()


def test_sql_prints_at_most_max_rows_and_says_it_cut(docs_db: Path) -> None:
    default = runner.invoke(app, ["sql", "SELECT * FROM range(20000)", "--db", str(docs_db), "--json"])
    five = runner.invoke(app, ["sql", "SELECT * FROM range(20000)", "--db", str(docs_db), "--max-rows", "5"])

    assert default.exit_code == 0 and len(default.stdout.splitlines()) == 10_000
    assert "cut: printed the first 10,000 rows (give --max-rows N for more)" in default.stderr
    assert five.exit_code == 0 and "5 rows; cut: printed the first 5 rows" in five.stderr


def test_sql_stops_reading_rows_past_its_byte_cap(docs_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CITEFLOW_STORE__SQL_MAX_BYTES", "1000000")

    result = runner.invoke(
        app, ["sql", "SELECT repeat('x', 100000) AS x FROM range(1000)", "--db", str(docs_db), "--json"]
    )

    assert result.exit_code == 0 and len(result.stdout.splitlines()) == 10
    assert "the next would pass 1,000,000 characters of values" in result.stderr


def test_sql_json_with_no_rows_prints_an_empty_list(docs_db: Path) -> None:
    result = runner.invoke(app, ["sql", "SELECT * FROM pages WHERE false", "--db", str(docs_db), "--json"])

    assert result.exit_code == 0 and json.loads(result.stdout) == []


def test_the_eval_table_fits_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from rich.console import Console

    import cli.evaluate

    console = Console(width=80, file=io.StringIO(), color_system=None)
    monkeypatch.setattr(cli.evaluate, "out", console)
    row = {"id": "5a8b57f25542995d1e6f1371", "status": "complete", "answered": "yes", "evidence": "2/3",
           "gold pages": "1/2", "cited": 3, "answer": "yes", "integrity": 0, "words": 148, "calls": 12,
           "tokens": 10234, "seconds": 41.2}  # fmt: skip

    cli.evaluate.print_results([row, {**row, "id": "other"}], unanswerable=False)

    printed = console.file.getvalue()  # type: ignore[attr-defined]
    assert max(len(line) for line in printed.splitlines()) <= 80
    for name, value in row.items():
        assert (f"{name} {value}" if name != "id" else str(value)) in printed


def test_read_only_commands_never_create_a_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "missing" / "dir" / "x.duckdb"
    (tmp_path / "deployments").mkdir()
    monkeypatch.chdir(tmp_path)

    runs = runner.invoke(app, ["runs", "--db", str(missing)])
    sql = runner.invoke(app, ["sql", "SELECT 1", "--db", str(missing)])
    diff = runner.invoke(app, ["topics", "diff", "acme", "--db", str(missing)])
    listed = runner.invoke(app, ["topics", "list", "--db", str(missing)])

    assert runs.exit_code == 1 and f"{missing}: does not exist" in " ".join(runs.stderr.split())
    assert sql.exit_code == 1 and diff.exit_code == 1 and listed.exit_code == 0
    assert not (tmp_path / "missing").exists()


def test_the_project_folder_of_stores_and_servers_is_ignored_by_git() -> None:
    import subprocess

    from conftest import REPO

    ignored = subprocess.run(["git", "check-ignore", "-q", ".citeflow/prefect/prefect.db"], cwd=REPO)
    assert ignored.returncode == 0


def test_citeflow_run_leaves_slow_imports_to_their_first_use() -> None:
    from conftest import REPO

    # openai (1.2 s), trafilatura and pypdf (0.25 s) are imported where they are first used: a run's
    # first task waits for what `citeflow run` imports, and an offline run on the store uses none of them.
    command = (
        "import sys, cli.main, flows.research; "
        "print(sorted({name.split('.')[0] for name in sys.modules} & {'openai', 'trafilatura', 'pypdf'}))"
    )
    found = subprocess.run(
        [sys.executable, "-c", command],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert found.stdout.strip() == "[]"
