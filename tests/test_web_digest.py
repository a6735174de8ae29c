"""An open question over news pages from the web, end to end: the digest the README promises.

A user asked what the sources report about a space probe's finding and got, over real news pages, one
sentence citing one page and then 18 caveat lines naming the same two skipped URLs once per sub-question.
This runs the real flow (extractive engine, no model) with SearXNG pointed at a search server on loopback
that lists five news pages from five "outlets" (each a server of its own on another 127.x address; two run
the same agency copy, as papers do), a sports story that shares a few words with the question but names
neither the probe nor the moon, a deleted article (404) and a live blog that never finishes loading.
Every name, outlet and figure is invented.

The report must be a digest: several distinct findings, the wire sentences two papers print merged into
one finding citing both, nothing from the sports page, every citation on a page the run fetched (the
store audit), and each broken URL named in one caveat line with the number of sub-questions it affected.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest
from web_servers import LoopbackServer, Reply, Request, Route, html_page, outbound, searxng_routes

from citeflow.contracts import Report, RunStatus
from citeflow.extractive.digest import DIFFER_SECTION
from citeflow.text import normalise
from storage.store import get_store
from tasks.audit import audit

QUESTION = (
    "What do the sources report about the Halden probe's detection of water vapour on the moon Tessaly?"
)

# The agency's copy: the wire runs it and the Coastal Ledger prints it word for word.
WIRE_LEAD = (
    "The Halden probe has detected water vapour rising from the icy moon Tessaly, the Orvane Space Agency "
    "said on Tuesday."
)
WIRE_PLUME = (
    "The plume of water vapour reached about 180 kilometres above the surface of Tessaly, according to "
    "the agency."
)


@dataclass(frozen=True)
class Article:
    outlet: str
    host: str  # each outlet is a host of its own on loopback
    path: str
    title: str
    published: str
    paragraphs: list[str]


ON_TOPIC = [
    Article(
        "Meridian Wire",
        "127.0.0.11",
        "/2031/03/18/halden-tessaly-water-vapour.html",
        "Halden probe finds water vapour plume on Tessaly",
        "2031-03-18",
        [
            WIRE_LEAD,
            WIRE_PLUME,
            "Halden's Kestrel ultraviolet spectrograph recorded the vapour as it passed in front of a "
            "background star on 14 March 2031.",
            "Scientists estimate that the plume releases roughly 2,400 kilograms of water every second.",
            "The vapour appears to escape from long fractures near the south pole of Tessaly.",
            "Tessaly, the fourth moon of the gas giant Varro, is thought to hide a salty ocean beneath "
            "its ice shell.",
            "Mission scientist Ilse Marrow said the team would look for the plume again during the next "
            "close flyby in June.",
        ],
    ),
    Article(
        "Coastal Ledger",
        "127.0.0.12",
        "/science/space-probe-spots-water-plume-on-tessaly",
        "Space probe spots water plume on Varro's moon Tessaly",
        "2031-03-18",
        [
            WIRE_LEAD,
            WIRE_PLUME,
            "The probe's Kestrel ultraviolet spectrograph caught the vapour on 14 March 2031 as it "
            "crossed in front of a distant star.",
            "Researchers say Tessaly is one of the most promising places in the outer solar system to "
            "look for life.",
            "Students at Brantwick University helped plan the observing sequence, the agency said.",
        ],
    ),
    Article(
        "Skyward Science Daily",
        "127.0.0.13",
        "/news/tessaly-is-venting-water",
        "Tessaly is venting water: what Halden saw",
        "2031-03-19",
        [
            "Water vapour is erupting from Tessaly, and the Halden probe caught it in the act.",
            "The vapour column towered some 180 km above the moon's frozen crust, far higher than any "
            "geyser on Earth.",
            "The detection came from Kestrel, an ultraviolet spectrograph aboard Halden, which watched "
            "starlight dim as it shone through the plume.",
            "At about 2,400 kg of water per second, the outflow would fill an Olympic swimming pool in "
            "under twenty minutes.",
            "The plume rises from fractures near the south pole of Tessaly, like the cracks seen on "
            "other icy moons.",
            "Ocean worlds such as Tessaly are prime targets in the search for life beyond Earth.",
        ],
    ),
    Article(
        "Northgate Herald",
        "127.0.0.14",
        "/world/orvane-agency-water-vapour-detected-on-tessaly",
        "Orvane agency: water vapour detected on moon Tessaly",
        "2031-03-18",
        [
            "The Orvane Space Agency announced on Tuesday that its Halden probe had detected water "
            "vapour on Tessaly, a moon of Varro.",
            "According to the agency, the plume of water vapour reached about 180 kilometres above the "
            "surface of Tessaly.",
            "The measurement was made on 14 March 2031 with the Kestrel ultraviolet spectrograph.",
            "The agency estimates that the plume releases roughly 2,400 kilograms of water every second.",
            "Halden was launched in 2024 and entered orbit around Varro in 2029.",
        ],
    ),
    Article(
        "Orbit Report",
        "127.0.0.15",
        "/briefs/halden-detects-water-vapour-plume-at-tessaly",
        "Halden detects water vapour plume at Tessaly",
        "2031-03-20",
        [
            "A plume of water vapour about 180 kilometres high has been detected above the south pole of "
            "Tessaly by the Halden probe.",
            "The finding, made with the Kestrel ultraviolet spectrograph on 14 March 2031, was announced "
            "by the Orvane Space Agency on Tuesday.",
        ],
    ),
]
# Shares "water" and "detection" with the question, as a search engine's stray hit does; names neither
# the probe nor the moon.
OFF_TOPIC = Article(
    "Harbour Gazette",
    "127.0.0.16",
    "/sport/rovers-edge-united-in-rain-soaked-derby",
    "Rovers edge United in rain-soaked derby",
    "2031-03-16",
    [
        "Harbour City Rovers beat Kellsby United 2-1 on Saturday in a derby played through heavy rain.",
        "Standing water on the pitch delayed the second half by 25 minutes.",
        "The league's goal-line detection system ruled out an early Kellsby equaliser.",
        "Rovers striker Tomas Quill scored both goals, the second a header in the 88th minute.",
        "The result lifts Rovers to third place in the Westmark League.",
        "Kellsby manager Dana Ferro said the water on the surface made passing football impossible.",
    ],
)
OFF_TOPIC_WORDS = {"rovers", "kellsby", "quill", "ferro", "westmark", "derby", "pitch", "striker", "football"}
ON_TOPIC_WORDS = {"halden", "tessaly", "probe", "moon", "vapour"}  # what the sports page never says
GONE = "/world/halden-tessaly-plume-explainer"  # on the Northgate Herald's host: the article was removed
LIVE_BLOG = "/live/halden-tessaly-live"  # on Skyward's host: it never finishes loading
TOTAL_TIMEOUT = 2.0  # seconds a fetch may take before it is abandoned


def _page(article: Article) -> Route:
    body = html_page(article.title, article.published, article.paragraphs)
    body = body.replace(b"Example Science Notes", article.outlet.encode())
    return lambda _: Reply(body=body)


def _live_blog(_: Request) -> Reply:
    def forever() -> Iterator[bytes]:
        yield b"<html><head><title>Live: Halden at Tessaly</title></head><body><p>Updates follow"
        while True:  # the server thread ends when the client gives up
            yield b" ..."
            time.sleep(0.1)

    return Reply(body=forever())


@dataclass(frozen=True)
class Web:
    outlets: dict[str, LoopbackServer]  # outlet -> its server
    search: LoopbackServer

    def url(self, article: Article) -> str:
        return self.outlets[article.outlet].url(article.path)

    @property
    def gone(self) -> str:
        return self.outlets["Northgate Herald"].url(GONE)

    @property
    def live_blog(self) -> str:
        return self.outlets["Skyward Science Daily"].url(LIVE_BLOG)


@pytest.fixture(autouse=True)
def stays_on_loopback() -> Iterator[None]:
    with outbound() as attempts:
        yield
    assert attempts == [], f"a test tried to leave loopback: {attempts}"


@pytest.fixture
def web(monkeypatch: pytest.MonkeyPatch) -> Iterator[Web]:
    """The outlets, and a SearXNG server listing their pages, the sports story second (search engines
    rank stray hits high), the deleted article and the live blog; set in the environment as a user sets
    them, with SearXNG the only provider."""
    with ExitStack() as stack:
        outlets = {}
        for article in [*ON_TOPIC, OFF_TOPIC]:
            server = stack.enter_context(LoopbackServer({article.path: _page(article)}, article.host))
            outlets[article.outlet] = server
        outlets["Skyward Science Daily"].route(LIVE_BLOG, _live_blog)  # GONE is unrouted: 404
        url = {
            article.outlet: outlets[article.outlet].url(article.path) for article in [*ON_TOPIC, OFF_TOPIC]
        }
        listed = [
            url["Meridian Wire"],
            url["Harbour Gazette"],
            url["Skyward Science Daily"],
            outlets["Northgate Herald"].url(GONE),
            url["Coastal Ledger"],
            outlets["Skyward Science Daily"].url(LIVE_BLOG),
            url["Northgate Herald"],
            url["Orbit Report"],
        ]
        hits = [{"url": u, "title": u.rsplit("/", 1)[-1], "content": "news"} for u in listed]
        search = stack.enter_context(LoopbackServer(searxng_routes(hits)))
        monkeypatch.setenv("SEARXNG_URL", search.url(""))
        monkeypatch.setenv("CITEFLOW_ALLOW_HOSTS", ",".join(f"{s.host}:{s.port}" for s in outlets.values()))
        monkeypatch.setenv("CITEFLOW_PROVIDER_ORDER", "searxng")
        yield Web(outlets, search)


def run_flow(db: Path, reports: Path) -> Report:
    from flows.research import research_flow

    report = research_flow(
        question=QUESTION,
        settings={
            "search": "searxng",
            "db": str(db),
            "reports": str(reports),
            "web.per_domain_delay": 0,
            "web.total_timeout": TOTAL_TIMEOUT,
        },
    )
    assert isinstance(report, Report), report
    return report


def test_open_question_over_news_pages_gets_a_digest_of_corroborated_findings(
    prefect_api: None, web: Web, tmp_path: Path
) -> None:
    # The sports story names nothing the question asks about, only the stray words a search matched.
    stray_text = normalise(" ".join([OFF_TOPIC.title, *OFF_TOPIC.paragraphs])).casefold()
    assert not any(word in stray_text for word in ON_TOPIC_WORDS)
    assert "water" in stray_text and "detection" in stray_text
    db = tmp_path / "digest.duckdb"
    report = run_flow(db, tmp_path / "reports")
    store = get_store(db)
    shown = f"\n--- the report ---\n{report.markdown}"

    # An open question gets a digest, stored with the run.
    assert report.kind == "digest", shown
    _, kinds = store.query(f"SELECT report_kind FROM runs WHERE run_id = '{report.run_id}'")
    assert kinds == [("digest",)], shown
    assert report.status in (RunStatus.complete, RunStatus.partial), shown

    # Distinct findings, one of them the agency copy two papers printed, citing both.
    on_topic = {web.url(article) for article in ON_TOPIC}
    urls = {source.id: source.url for source in report.sources}
    findings = [sentence for sentence in report.sentences if sentence.section != DIFFER_SECTION]
    assert len(findings) >= 3, f"{len(findings)} finding(s)" + shown
    assert len({normalise(finding.text) for finding in findings}) == len(findings), shown
    widest = max(len(set(finding.cites)) for finding in findings)
    assert widest >= 2, f"no finding cites more than {widest} page(s)" + shown
    wire, ledger = web.url(ON_TOPIC[0]), web.url(ON_TOPIC[1])
    assert any({wire, ledger} <= {urls[cite] for cite in finding.cites} for finding in findings), shown

    # Nothing of the sports story, though its sentences were verified claims (the digest, not the
    # verifier, keeps them out), and every citation on an on-topic page this run fetched.
    off_topic = web.url(OFF_TOPIC)
    _, stray = store.query(
        f"SELECT count(*) FROM claims c JOIN pages p ON p.id = c.page_id "
        f"WHERE c.run_id = '{report.run_id}' AND c.status = 'verified' AND p.url = '{off_topic}'"
    )
    assert stray[0][0] > 0, "the sports page gave no verified claim: the off-topic check proves nothing"
    assert off_topic not in urls.values(), shown
    for sentence in report.sentences:
        words = set(normalise(sentence.text).casefold().replace("-", " ").split())
        assert not words & OFF_TOPIC_WORDS, f"off-topic words in {sentence.text!r}" + shown
        assert sentence.cites and all(urls[cite] in on_topic for cite in sentence.cites), shown
    assert not any(word in normalise(report.markdown).casefold() for word in OFF_TOPIC_WORDS), shown
    # A headline is what a page is about, not a finding: titles show only among the sources.
    body = report.markdown.split("## Sources")[0]
    assert not any(article.title in body for article in ON_TOPIC), shown
    for source in report.sources:
        page = store.latest_page(source.url)
        assert page is not None and page.origin == "fetched", source
    assert audit(store, report) == [], shown

    # Each broken URL is one caveat line, naming how many sub-questions met it; no line twice.
    assert len(report.caveats) == len(set(report.caveats)), shown
    subquestions = store.subquestions(report.run_id)
    _, listed_by = store.query(
        f"SELECT count(DISTINCT subquestion_id) FROM search_results "
        f"WHERE run_id = '{report.run_id}' AND url = '{web.gone}'"
    )
    affected = listed_by[0][0]
    assert affected == len(subquestions) >= 1, shown
    for broken, problem in ((web.gone, "HTTP 404"), (web.live_blog, "not finished after")):
        lines = [caveat for caveat in report.caveats if broken in caveat]
        assert len(lines) == 1, f"{broken} is named in {len(lines)} caveat lines" + shown
        assert problem in lines[0], lines[0]
        if affected > 1:
            assert f"({affected} sub-questions)" in lines[0], lines[0]
        else:
            assert f" for {subquestions[0].id}:" in lines[0], lines[0]
        assert report.markdown.count(broken) == 1, shown
    # Each URL was asked for once a run, not once a sub-question; SearXNG once a sub-question.
    assert web.outlets["Northgate Herald"].paths().count(GONE) == 1
    assert web.outlets["Skyward Science Daily"].paths().count(LIVE_BLOG) == 1
    assert all(web.outlets[a.outlet].paths().count(a.path) == 1 for a in [*ON_TOPIC, OFF_TOPIC])
    assert web.search.paths() == ["/search"] * len(subquestions)
