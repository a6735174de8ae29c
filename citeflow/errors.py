"""Every error citeflow raises on purpose, in one tree.

Each error names the input it is about, what was wrong with it, and what still holds (for example
"the store is unchanged"), so that the command line can print it as one clear line.

    CiteflowError
    ├── InputError        a question, path, flag or SQL statement a user gave
    ├── IngestError       a file or record that could not be loaded
    ├── StoreError        the evidence store file
    ├── ModelError        a model endpoint (carries role, endpoint and model, never a key)
    └── FetchError        a URL that could not or must not be fetched
"""

from __future__ import annotations


class CiteflowError(Exception):
    def __init__(self, subject: str, problem: str, holds: str = "") -> None:
        self.subject = subject
        self.problem = problem
        self.holds = holds
        super().__init__(str(self))

    def __str__(self) -> str:
        line = f"{self.subject}: {self.problem}"
        return f"{line} ({self.holds})" if self.holds else line


class InputError(CiteflowError):
    pass


class IngestError(CiteflowError):
    pass


class StoreError(CiteflowError):
    pass


class ModelError(CiteflowError):
    pass


class FetchError(CiteflowError):
    pass
