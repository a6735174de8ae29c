"""Which files and paths may be a store: each bad one refused with its own line, and left as it was."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from citeflow.contracts import Origin, PageInput
from citeflow.errors import InputError, StoreError
from cli.main import app
from storage import migrations
from storage.store import EvidenceStore, close_stores, get_store, read_only_query

runner = CliRunner()


def corrupt_store(path: Path) -> None:
    EvidenceStore.open(path).put_page(
        PageInput(url="https://example.org/", title="A", text="A page.", origin=Origin.fetched)
    )
    raw = bytearray(path.read_bytes())
    for offset in range(4096, 3 * 4096):  # the database headers after the magic block
        raw[offset] ^= 0xFF
    path.write_bytes(bytes(raw))


def newer_store(path: Path) -> None:
    EvidenceStore.open(path)
    con = duckdb.connect(str(path))
    con.execute(
        "INSERT INTO schema_migrations VALUES (?, 'm999_from_the_future', now()::TIMESTAMP)",
        [migrations.LATEST_VERSION + 1],
    )
    con.close()


def someone_elses_database(path: Path) -> None:
    con = duckdb.connect(str(path))
    con.execute(
        "CREATE TABLE expenses (day DATE, amount DECIMAL(10, 2)); INSERT INTO expenses VALUES (today(), 9.5)"
    )
    con.close()


def another_tools_migrations(path: Path) -> None:
    con = duckdb.connect(str(path))
    con.execute(
        "CREATE TABLE schema_migrations (version VARCHAR); INSERT INTO schema_migrations VALUES ('20240101')"
    )
    con.close()


BAD_FILES: list[tuple[Callable[[Path], None], str]] = [
    (corrupt_store, "is damaged and cannot be read (Corrupt database file"),
    (newer_store, f"was written by a newer citeflow (schema version {migrations.LATEST_VERSION + 1}"),
    (someone_elses_database, "is a DuckDB database but not a citeflow store"),
    (another_tools_migrations, "is a DuckDB database but not a citeflow store"),
]


@pytest.mark.parametrize(("make", "message"), BAD_FILES, ids=[make.__name__ for make, _ in BAD_FILES])
def test_a_bad_file_is_refused_with_its_own_message_and_left_byte_identical(
    tmp_path: Path, make: Callable[[Path], None], message: str
) -> None:
    path = tmp_path / "store.duckdb"
    make(path)
    before = path.read_bytes()
    files = sorted(p.name for p in tmp_path.iterdir())

    for opening in (
        lambda: EvidenceStore.open(path),
        lambda: get_store(path),
        lambda: read_only_query(path, "SELECT 1"),
    ):
        with pytest.raises(StoreError, match=message.replace("(", r"\(")) as raised:
            opening()
        assert str(raised.value).endswith("(the file was left untouched)")
    close_stores()
    for command in (["sql", "SELECT 1"], ["ingest", str(Path(__file__))], ["run", "Who wrote Hamlet?"]):
        result = runner.invoke(app, [*command, "--db", str(path)])
        assert result.exit_code == 1
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1

    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == files  # no .wal, no .tmp beside it


def test_an_empty_duckdb_database_is_adopted_as_a_new_store(tmp_path: Path) -> None:
    path = tmp_path / "store.duckdb"
    duckdb.connect(str(path)).close()  # as a store whose first migration never committed leaves it
    store = EvidenceStore.open(path)
    assert store.page_count() == 0


@pytest.mark.parametrize(
    "db",
    [
        "md:research",
        "motherduck:research",
        "s3://bucket/store.duckdb",
        "http://127.0.0.1:9/store.duckdb",
        "https://example.org/store.duckdb",
        ":memory:",
        "file:///tmp/store.duckdb",
    ],
)
def test_a_duckdb_url_or_extension_is_refused_and_nothing_is_opened(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match="looks like a DuckDB URL or extension prefix"):
        EvidenceStore(Path(db))

    flag = runner.invoke(app, ["sql", "SELECT 1", "--db", db])
    monkeypatch.setenv("CITEFLOW_DB", db)
    env = runner.invoke(app, ["ingest", str(Path(__file__).parent / "test_store_files.py")])

    for result in (flag, env):
        assert result.exit_code == 1
        assert "looks like a DuckDB URL or extension prefix, not a file path" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_a_store_path_is_resolved_and_its_folders_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    note = tmp_path / "note.md"
    note.write_text("# Basalt\n\nBasalt is a volcanic rock.\n")

    nested = runner.invoke(app, ["ingest", str(note), "--db", "nested/deeper/store.duckdb"])
    colon = runner.invoke(app, ["ingest", str(note), "--db", str(tmp_path / "md:notes.duckdb")])

    assert nested.exit_code == 0 and colon.exit_code == 0, nested.stderr + colon.stderr
    assert (
        get_store(Path("nested/deeper/store.duckdb")).path == tmp_path / "nested" / "deeper" / "store.duckdb"
    )
    assert read_only_query(tmp_path / "nested" / "deeper" / "store.duckdb", "SELECT count(*) FROM pages")[
        1
    ] == [(1,)]
    assert (tmp_path / "md:notes.duckdb").is_file()
    close_stores()


def test_no_extension_is_installed_or_loaded_but_full_text_search(tmp_path: Path) -> None:
    store = EvidenceStore.open(tmp_path / "store.duckdb")
    settings = store.query(
        "SELECT current_setting('autoinstall_known_extensions') AS install, "
        "current_setting('autoload_known_extensions') AS load, "
        "current_setting('enable_external_access') AS files"
    )
    loaded = store.query("SELECT DISTINCT function_name FROM duckdb_functions() WHERE function_name = 'stem'")
    assert settings == (["install", "load", "files"], [(False, False, False)])
    assert loaded[1] == [("stem",)]  # fts, loaded from the wheel
    with pytest.raises(InputError, match="failed"):
        store.query("SELECT * FROM read_json_auto('https://example.org/x.json')")  # httpfs is never fetched


def test_a_store_file_is_written_in_row_groups_of_its_own_size_at_every_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # DuckDB keeps no row group size in the file: each open attaches it with ROW_GROUP_SIZE again. Small
    # row groups are what keep a large ingest's checkpoints small (storage/files.py).
    monkeypatch.setattr("storage.files.ROW_GROUP_SIZE", 2048)
    path = tmp_path / "store.duckdb"
    for batch in range(3):
        store = EvidenceStore.open(path)
        store.put_pages(
            [
                PageInput(
                    url=f"https://example.org/{batch}/{n}",
                    title="T",
                    text=f"Page {n}.",
                    origin=Origin.fetched,
                )
                for n in range(2000)
            ]
        )
    con = duckdb.connect(str(path), read_only=True)
    (groups,) = con.execute(
        "SELECT count(DISTINCT row_group_id) FROM pragma_storage_info('pages')"
    ).fetchone()
    con.close()
    assert groups == 3  # 6,000 pages in groups of 2,048; at DuckDB's default of 122,880 rows, one group
