"""The simulated web and model the benchmarks run against: loopback servers answering after a fixed delay.

    .venv/bin/python benchmarks/simulation.py [--model-delay 1.0] [--fetch-delay 0.3] [--hosts 50]

runs every server in this process, prints one JSON line (their addresses) and serves until its standard input
closes; `running_simulation()` starts it so from a benchmark. It runs in a process of its own so that its
threads neither share the measured process's interpreter lock nor count in its memory.

  model     an OpenAI-compatible endpoint on 127.0.0.1 that plays every role after `model_delay` seconds:
            the planner returns as many sub-questions as the prompt allows at most (one per study site),
            the verifier quotes, word for word, the sentences of the page text it was sent that share most
            words with the sub-question (as many as it may propose), the synthesiser writes one sentence per
            verified claim citing its source (for an open question's digest, one line per finding it is
            shown, in its quote's words), and the critic approves. Usage is reported as a real server
            would, about four characters a token of what was sent and returned (tests/role_server.py).
  search    a SearXNG-format JSON endpoint on 127.0.0.1, answering after `fetch_delay`: the ten pages about
            the study site the query names.
  web       TOPICS x PAGES_PER_TOPIC article pages, spread over `hosts` loopback addresses (127.0.0.2, ...),
            each with a robots.txt, answering after `fetch_delay`. Page (t, p) is on host (t*10 + p) mod
            hosts, so a site's ten pages are on ten hosts, as search results are on the real web. Pages are
            3,000 to 24,000 characters of article text (mean 11,400), in the usual page furniture.
  control   GET /control/revise?topic=T&page=P on the search server edits one sentence of that page.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from openai_server import EVIDENCE_LINE, UNTRUSTED_BLOCK, Received, Reply, ScriptedServer, json_reply, role_of  # noqa: E402
from role_server import every_finding  # noqa: E402
from web_servers import LoopbackServer, Request, html_page  # noqa: E402
from web_servers import Reply as WebReply  # noqa: E402

from citeflow.llm.client import REMOTE_CONCURRENCY  # noqa: E402
from citeflow.text import content_words, split_sentences  # noqa: E402

TOPICS = 20
PAGES_PER_TOPIC = 10
QUESTION = "What does the Meridian field survey record about each of its study sites?"
# Characters of article text per page, by page number: pages differ in length as real articles do.
PAGE_CHARS = [3_000, 6_000, 9_000, 15_000, 24_000, 3_000, 6_000, 9_000, 15_000, 24_000]

_rng = random.Random(13)
_SYLLABLES = [
    "var",
    "nel",
    "tor",
    "bris",
    "ka",
    "lun",
    "mer",
    "dow",
    "sel",
    "ash",
    "quin",
    "rho",
    "tam",
    "vel",
]
SITES = [
    "".join(_rng.sample(_SYLLABLES, 2)).capitalize() + " " + kind
    for kind in ["Basin", "Ridge", "Fen", "Moor", "Delta"] * 4
]
PLACES = ["Ashford", "Brennan Point", "Calder Vale", "Dunmore", "Eastwick", "Fairholm", "Glenrock", "Harwell"]
THINGS = ["sampling wells", "weather stations", "seed plots", "survey markers", "soil cores", "river gauges"]
TEMPLATES = [
    "The {site} was first surveyed in {year} from a camp near {place}, where {n} {things} were set out.",
    "Records from {year} show that the {site} held {n} {things}, most within {k} kilometres of {place}.",
    "Field teams returned to the {site} every {k} years after {year}, and each time counted {n} {things}.",
    "In {year} a flood cut the road from {place} to the {site}, and {n} of its {things} had to be rebuilt.",
    "The survey notes that rain at the {site} averaged {n} millimetres a year between {year} and {year2}.",
    "Volunteers from {place} mapped {n} hectares of the {site} in {year}, working from {k} base stations.",
    "By {year2} the {site} was the survey's reference site for {things}, with {n} readings a season.",
    "A report published in {year} compared the {site} with {place} and found {k} times as many {things}.",
]


def site_index(text: str) -> int | None:
    """Which study site `text` names, if any."""
    lowered = text.casefold()
    return next((t for t, site in enumerate(SITES) if site.casefold() in lowered), None)


@cache
def page_paragraphs(topic: int, page: int, version: int) -> tuple[str, ...]:
    """The article text of page (topic, page): sentences about its site, PAGE_CHARS[page] long in all.
    A later `version` differs in its first sentence only."""
    rng = random.Random(topic * 1000 + page)
    site, paragraphs, size = SITES[topic], [], 0
    while size < PAGE_CHARS[page]:
        sentences = []
        for _ in range(5):
            year = rng.randint(1921, 2015)
            sentences.append(
                rng.choice(TEMPLATES).format(
                    site=site,
                    year=year,
                    year2=year + rng.randint(2, 9),
                    place=rng.choice(PLACES),
                    n=rng.randint(3, 900),
                    k=rng.randint(2, 12),
                    things=rng.choice(THINGS),
                )  # fmt: skip
            )
        paragraphs.append(" ".join(sentences))
        size += len(paragraphs[-1]) + 1
    if version:
        paragraphs[0] = (
            f"Revision {version}: the {site} survey was reopened in {2020 + version}. {paragraphs[0]}"
        )
    return tuple(paragraphs)


def page_title(topic: int, page: int) -> str:
    # Titled with the survey the question names: a digest cites only pages that name its subject.
    return f"Meridian field survey: {SITES[topic]} field notes, part {page + 1}"


def page_path(topic: int, page: int) -> str:
    return f"/sites/{topic}/notes-{page}.html"


# -- the model ---------------------------------------------------------------------------------------


def _blocks(received: Received, label: str) -> list[str]:
    return [m.group(3) for m in UNTRUSTED_BLOCK.finditer(received.prompt) if m.group(2) == label]


def _user_line(received: Received, prefix: str) -> str:
    user = received.body["messages"][-1]["content"]
    return next(line.removeprefix(prefix) for line in user.splitlines() if line.startswith(prefix))


def plan(received: Received) -> dict[str, Any]:
    most = int(re.search(r"between \d+ and (\d+) sub-questions", received.prompt).group(1))  # type: ignore[union-attr]
    return {
        "subquestions": [
            {"text": f"What does the survey record about the {site}?", "query": f"{site} survey records"}
            for site in SITES[:most]
        ]
    }


def verify(received: Received) -> dict[str, Any]:
    limit = int(re.search(r"propose up to (\d+) claims", received.prompt).group(1))  # type: ignore[union-attr]
    wanted = set(content_words(_user_line(received, "Sub-question: ")))
    (text,) = _blocks(received, "page text")
    sentences = [span.text for span in split_sentences(text) if len(span.text) >= 40]
    best = sorted(sentences, key=lambda s: -len(wanted & set(content_words(s))))[:limit]
    return {"claims": [{"text": sentence, "quote": sentence} for sentence in best]}


def synthesise(received: Received) -> dict[str, Any]:
    (block,) = _blocks(received, "verified claims and their quotes")
    claims = EVIDENCE_LINE.findall(block)
    return {"sentences": [{"text": text, "cites": [sid], "section": qid} for sid, qid, text in claims]}


def follow_up(received: Received) -> dict[str, Any]:
    """The study sites name no further entity to research: no follow-up sub-question."""
    return {"subquestions": []}


def critique(received: Received) -> dict[str, Any]:
    return {"approved": True, "notes": "every sentence is supported by its quotes", "problems": []}


ROLES = {
    "planner": plan,
    "follow-up": follow_up,
    "verifier": verify,
    "synthesiser": synthesise,
    "critic": critique,
}


class SimulatedModel(ScriptedServer):
    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    def answer(self, received: Received) -> Reply:
        role = role_of(received)
        if role == "digest":  # an open question's digest is written in lines, not JSON
            reply = every_finding(received, 0)
        elif role in ROLES:
            reply = json_reply(ROLES[role](received))
        else:
            return Reply(status=400, error=f"the simulated model plays no {role} role")
        usage = (len(received.prompt) // 4 + 1, len(reply.content) // 4 + 1)
        return replace(reply, usage=usage, delay=self.delay)


# -- the web -----------------------------------------------------------------------------------------


class SimulatedWeb:
    def __init__(self, hosts: int, delay: float) -> None:
        self.hosts = hosts
        self.delay = delay
        self.versions: dict[tuple[int, int], int] = {}
        self.servers = [LoopbackServer(host=f"127.0.0.{n + 2}") for n in range(hosts)]
        for server in self.servers:
            server.route("/robots.txt", self._robots)
        for topic in range(TOPICS):
            for page in range(PAGES_PER_TOPIC):
                self.host(topic, page).route(page_path(topic, page), self._page(topic, page))
        self.search = LoopbackServer({"/search": self._search, "/control/revise": self._revise})

    def host(self, topic: int, page: int) -> LoopbackServer:
        return self.servers[(topic * PAGES_PER_TOPIC + page) % self.hosts]

    def _robots(self, _: Request) -> WebReply:
        time.sleep(self.delay)
        return WebReply(headers={"Content-Type": "text/plain"}, body=b"User-agent: *\nAllow: /\n")

    def _page(self, topic: int, page: int) -> Any:
        def route(_: Request) -> WebReply:
            time.sleep(self.delay)
            paragraphs = page_paragraphs(topic, page, self.versions.get((topic, page), 0))
            return WebReply(body=html_page(page_title(topic, page), "2024-05-02", list(paragraphs)))

        return route

    def _search(self, request: Request) -> WebReply:
        time.sleep(self.delay)
        # A query naming no site (the question itself, which the plan always researches) finds the
        # survey's first site, as a general query finds the most prominent pages.
        topic = site_index(request.query.get("q", [""])[0]) or 0
        hits = [] if topic is None else [
            {"url": self.host(topic, page).url(page_path(topic, page)), "title": page_title(topic, page),
             "content": page_paragraphs(topic, page, 0)[0][:200], "engine": "simulated", "score": 1.0}
            for page in range(PAGES_PER_TOPIC)
        ]  # fmt: skip
        body = json.dumps({"query": request.query.get("q", [""])[0], "results": hits}).encode()
        return WebReply(headers={"Content-Type": "application/json"}, body=body)

    def _revise(self, request: Request) -> WebReply:
        key = (int(request.query["topic"][0]), int(request.query["page"][0]))
        self.versions[key] = self.versions.get(key, 0) + 1
        return WebReply(
            headers={"Content-Type": "application/json"}, body=json.dumps(self.versions[key]).encode()
        )


def serve(model_delay: float, fetch_delay: float, hosts: int) -> None:
    with ExitStack() as stack:
        model = stack.enter_context(SimulatedModel(model_delay))
        web = SimulatedWeb(hosts, fetch_delay)
        for server in [*web.servers, web.search]:
            stack.enter_context(server)
        address = {
            "model_url": model.url,
            "searxng_url": web.search.url(""),
            "hosts": [f"{s.host}:{s.port}" for s in web.servers],
        }
        print(json.dumps(address), flush=True)
        sys.stdin.read()  # until the benchmark closes our standard input (or dies)


# -- the benchmark's side ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Simulation:
    model_url: str
    searxng_url: str
    hosts: list[str]

    def settings(self) -> dict[str, Any]:
        """Dotted settings that point a run at this simulation: every role on the model, SearXNG search
        over the simulated web and nothing else. The simulated model stands for a hosted endpoint, which
        takes 16 calls at once by default; on loopback the default is 1 (llama.cpp, Ollama), so it is
        said here. Everything else keeps its default."""
        return {
            "search": "searxng",
            "web.searxng_url": self.searxng_url,
            "web.provider_order": "searxng",
            "web.allow_hosts": ",".join(self.hosts),
            "defaults.base_url": self.model_url,
            "defaults.model": "simulated",
            "models.max_concurrent_per_endpoint": REMOTE_CONCURRENCY,
        }

    def environment(self) -> dict[str, str]:
        """The same, as the environment of a `citeflow run` process (with `--search searxng`)."""
        return {
            "SEARXNG_URL": self.searxng_url,
            "CITEFLOW_PROVIDER_ORDER": "searxng",
            "CITEFLOW_ALLOW_HOSTS": ",".join(self.hosts),
            "OPENAI_BASE_URL": self.model_url,
            "CITEFLOW_MODEL": "simulated",
            "CITEFLOW_MODELS__MAX_CONCURRENT_PER_ENDPOINT": str(REMOTE_CONCURRENCY),
        }

    def revise(self, topic: int, page: int) -> None:
        """Edit page (topic, page): its first sentence changes, as a page updated on the web."""
        httpx.get(
            f"{self.searxng_url}/control/revise", params={"topic": topic, "page": page}
        ).raise_for_status()


@contextmanager
def running_simulation(model_delay: float, fetch_delay: float, hosts: int) -> Iterator[Simulation]:
    command = [sys.executable, __file__, "--model-delay", str(model_delay), "--fetch-delay", str(fetch_delay),
               "--hosts", str(hosts)]  # fmt: skip
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            raise RuntimeError("the simulation process ended before it served")
        yield Simulation(**json.loads(line))
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model-delay", type=float, default=1.0, help="Seconds before each model reply.")
    parser.add_argument("--fetch-delay", type=float, default=0.3, help="Seconds before each web reply.")
    parser.add_argument("--hosts", type=int, default=50, help="Loopback hosts the pages are spread over.")
    args = parser.parse_args()
    serve(args.model_delay, args.fetch_delay, args.hosts)


if __name__ == "__main__":
    main()
