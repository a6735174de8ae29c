"""A full disk: the write fails with one clear line and everything stored before it is kept.

Runs on a small tmpfs mounted for the test (as root, like CI); elsewhere it is skipped and says why."""

from __future__ import annotations

import json
import random
import string
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from storage.store import close_stores, read_only_query

runner = CliRunner()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Mounts a tmpfs of the size asked for (e.g. "4m"); unmounted after the test."""
    mount = tmp_path / "disk"
    mount.mkdir()

    def mounted(size: str) -> Path:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip()}")
        return mount

    try:
        yield mounted
    finally:
        close_stores()
        if subprocess.run(["mountpoint", "-q", str(mount)]).returncode == 0:
            subprocess.run(["umount", str(mount)], check=True)


def first_record(tmp_path: Path) -> Path:
    first = tmp_path / "first.jsonl"
    first.write_text(
        json.dumps({"url": "https://a.example/", "title": "A", "text": "Alpha comes first. " * 20})
    )
    return first


def test_ingest_onto_a_full_disk_is_one_line_and_keeps_what_was_stored(
    small_disk: Callable[[str], Path], tmp_path: Path
) -> None:
    db = small_disk("4m") / "store.duckdb"  # room for the first ingest, checkpointed, and not the second
    first = first_record(tmp_path)
    rng = random.Random(7)
    noise = ["".join(rng.choices(string.ascii_letters + " ", k=100_000)) for _ in range(40)]  # 4 MB
    big = tmp_path / "big.jsonl"
    big.write_text(
        "\n".join(json.dumps({"url": f"https://b.example/{n}", "text": text}) for n, text in enumerate(noise))
    )

    assert runner.invoke(app, ["ingest", str(first), "--db", str(db)]).exit_code == 0
    full = runner.invoke(app, ["ingest", str(big), "--db", str(db)])

    assert full.exit_code == 1
    assert "could not be read or written: No space left on device" in full.stderr
    assert "rolled back; everything stored before it is intact" in full.stderr
    assert len(full.stderr.strip().splitlines()) == 1
    close_stores()
    assert read_only_query(db, "SELECT url FROM pages")[1] == [("https://a.example/",)]


def test_a_checkpoint_onto_a_full_disk_says_the_rows_are_in_the_wal_and_they_are(
    small_disk: Callable[[str], Path], tmp_path: Path
) -> None:
    db = small_disk("2m") / "store.duckdb"  # room for the write-ahead log, not for the checkpoint

    full = runner.invoke(app, ["ingest", str(first_record(tmp_path)), "--db", str(db)])

    assert full.exit_code == 1
    assert full.stderr.strip().endswith(
        "No space left on device (what was committed is kept in store.duckdb.wal; keep that file beside it)"
    )
    assert len(full.stderr.strip().splitlines()) == 1
    close_stores()
    assert read_only_query(db, "SELECT url FROM pages")[1] == [("https://a.example/",)]
