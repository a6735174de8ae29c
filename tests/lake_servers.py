"""Real servers a DuckLake store needs, on loopback, for the tests: PostgreSQL (the catalog) and an
S3-compatible server (moto) for the data files. Each starts in a temporary folder on a free port and is
stopped when the test session ends."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_port(port: int, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {seconds} s")


def postgres_bin() -> Path | None:
    """Debian's PostgreSQL binaries (apt postgresql), or None where it is not installed."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _as_postgres(command: list[str]) -> list[str]:
    """initdb refuses to run as root: run the server as the `postgres` user then."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@dataclass
class Postgres:
    port: int
    user: str = "citeflow"

    def location(self, dbname: str) -> str:
        return f"ducklake:postgres:dbname={dbname} host=127.0.0.1 port={self.port} user={self.user}"

    def sqlalchemy_url(self, dbname: str) -> str:
        return f"postgresql+asyncpg://{self.user}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, dbname: str) -> None:
        assert (bin_dir := postgres_bin()) is not None
        subprocess.run(
            [str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, dbname],
            check=True,
            capture_output=True,
        )


@contextmanager
def postgres_server() -> Iterator[Postgres]:
    bin_dir = postgres_bin()
    assert bin_dir is not None
    folder = Path(tempfile.mkdtemp(prefix="citeflow-pg-"))
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
    data = folder / "data"
    server = Postgres(free_port())
    subprocess.run(
        _as_postgres([str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", server.user]),
        check=True,
        capture_output=True,
    )
    options = f"-p {server.port} -k {folder} -h 127.0.0.1 -c max_connections=200"
    subprocess.run(
        _as_postgres(
            [
                str(bin_dir / "pg_ctl"),
                "-D",
                str(data),
                "-o",
                options,
                "-l",
                str(folder / "log"),
                "-w",
                "start",
            ]
        ),
        check=True,
        capture_output=True,
    )
    try:
        yield server
    finally:
        subprocess.run(
            _as_postgres([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
            capture_output=True,
        )
        shutil.rmtree(folder, ignore_errors=True)


@dataclass
class S3:
    endpoint: str
    bucket: str

    def env(self) -> dict[str, str]:
        """The standard AWS variables a client (citeflow, boto3, prefect-aws) reads."""
        return {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint,
        }


@contextmanager
def s3_server(bucket: str = "citeflow") -> Iterator[S3]:
    port = free_port()
    process = subprocess.Popen(
        [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_port(port)
        server = S3(f"http://127.0.0.1:{port}", bucket)
        import boto3

        env = server.env()
        boto3.client(
            "s3",
            endpoint_url=server.endpoint,
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            region_name=env["AWS_REGION"],
        ).create_bucket(Bucket=bucket)
        yield server
    finally:
        process.terminate()
        process.wait(timeout=30)
