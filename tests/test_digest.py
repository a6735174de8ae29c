"""Open questions get a digest: the report kind read from the question, near-duplicate claims merged into
one finding citing every page, conflicts side by side, off-topic claims left out. Questions and pages
are written for these tests."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from openai_server import Reply, ScriptedServer

from citeflow.checks import mechanical_critique, prune_citations
from citeflow.config import Caps
from citeflow.contracts import Claim, ClaimStatus, Source, SubQuestion, SynthesisInput
from citeflow.extractive import extractive_engine
from citeflow.extractive.digest import DIFFER_SECTION, digest, expansion_terms, measures
from citeflow.extractive.kind import ReportKind, report_kind
from citeflow.llm.budget import MemoryCallLog
from citeflow.llm.client import EndpointPool
from citeflow.llm.digest import QUOTE_SHOWN_CHARS, finding_lines
from citeflow.llm.roles import ModelEngine, build_engine
from citeflow.llm.settings import Limits, ModelSettings, RoleConfig, RoleName
from tasks.writer import EngineSteps, write_report


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("Who designed the Harbour Bridge?", ReportKind.answer),
        ("In what year did the ferry service start?", ReportKind.answer),
        ("How many lighthouses does the coast have?", ReportKind.answer),
        ("Is the harbour deeper than the bay?", ReportKind.answer),
        ("Which is older, the museum or the library?", ReportKind.answer),
        ("How is the ferry company related to the port authority?", ReportKind.answer),
        ("The ferry, launched in which year, carried 200 people?", ReportKind.answer),
        ("What do the sources report about the harbour strike and its effects?", ReportKind.digest),
        ("How does the port screen its cargo?", ReportKind.digest),
        ("Why did the ferry company close?", ReportKind.digest),
        ("What were the consequences of the storm for the fishing fleet?", ReportKind.digest),
        ("Latest on the harbour dredging project", ReportKind.digest),
        ("Describe the history of the lighthouse.", ReportKind.digest),
        ("Year of launch of the ferry that replaced the Harbour Star?", ReportKind.answer),
        ("Causes of the harbour strike?", ReportKind.digest),
    ],
)
def test_the_report_kind_follows_the_grammar_of_the_question(question: str, kind: ReportKind) -> None:
    assert report_kind(question) is kind


QUESTION = "What do the sources report about the Harbour strike and its effects?"
SUBS = [SubQuestion(id="q1", position=0, text=QUESTION, query="Harbour strike effects")]
READ = datetime(2026, 1, 1, tzinfo=UTC)
QUOTES = [
    # Three pages say the strike closed the port, in their own words.
    ("S1", "The Harbour strike closed the port for nine days in March."),
    ("S2", "Dock workers said the strike closed the port for nine days."),  # its page names no Harbour
    ("S2", "The Harbour strike began on a Monday."),  # ... but this claim does
    ("S3", "For nine days the Harbour strike kept the port closed to ships."),
    # Two pages say fish prices rose.
    ("S4", "Fish prices in the Harbour markets rose sharply during the strike."),
    ("S2", "During the strike, fish prices rose sharply in local markets."),
    # Two pages give different counts of the strikers.
    ("S5", "About 3000 Harbour workers joined the strike on its first day."),
    ("S6", "About 1200 Harbour workers joined the strike on its first day."),
    # A page about something else: never evidence for this question.
    ("S7", "The Alpine railway opened a new tunnel under the pass."),
]


def request() -> SynthesisInput:
    claims = [
        Claim(
            id=f"C{n}",
            subquestion_id="q1",
            page_id=f"p{source[1:]}",
            page_hash="h",
            text=quote,
            quote=quote,
            status=ClaimStatus.verified,
            source_id=source,
        )
        for n, (source, quote) in enumerate(QUOTES, start=1)
    ]
    sources = [
        Source(id=f"S{n}", page_id=f"p{n}", url=f"https://example.org/{n}", title=title, stored_at=READ)
        for n, title in enumerate(["Port news"] * 6 + ["Mountain travel"], start=1)
    ]
    return SynthesisInput(question=QUESTION, subquestions=SUBS, claims=claims, sources=sources)


def test_near_duplicates_from_different_pages_become_one_finding_citing_every_page() -> None:
    found = digest(request(), findings_max=12, words_max=400)
    findings = found.opening + found.grouped
    texts = {finding.lead.claim.quote: finding.pages for finding in findings}
    closed = [pages for text, pages in texts.items() if "nine days" in text]
    assert closed == [["S1", "S2", "S3"]] or sorted(closed[0]) == ["S1", "S2", "S3"]
    prices = [pages for text, pages in texts.items() if "fish prices" in text.casefold()]
    assert len(prices) == 1 and sorted(prices[0]) == ["S2", "S4"]
    # The most corroborated finding opens the digest.
    assert "nine days" in found.opening[0].lead.claim.quote


def test_conflicting_figures_are_shown_side_by_side_and_off_topic_claims_never_ship() -> None:
    draft = extractive_engine().synthesiser.write(request())
    differ = [sentence for sentence in draft.sentences if sentence.section == DIFFER_SECTION]
    assert sorted(s.cites[0] for s in differ) == ["S5", "S6"]
    assert not any("railway" in sentence.text for sentence in draft.sentences)
    # Each finding is stated once, and every sentence passes the citation checks with its cites intact.
    assert len({sentence.text for sentence in draft.sentences}) == len(draft.sentences)
    pruned, dropped = prune_citations(draft, request().claims)
    assert dropped == 0 and mechanical_critique(pruned, request().claims).approved


def test_the_caps_bound_the_findings() -> None:
    found = digest(request(), findings_max=1, words_max=400)
    assert len(found.opening + found.grouped) == 1
    words = digest(request(), findings_max=12, words_max=15)
    assert len(words.opening + words.grouped) == 1  # the first finding always ships


def verified(quotes: list[tuple[str, str]], subquestion: str = "q1") -> list[Claim]:
    return [
        Claim(
            id=f"C{n}", subquestion_id=subquestion, page_id=f"p{source[1:]}", page_hash="h",
            text=quote, quote=quote, status=ClaimStatus.verified, source_id=source,
        )
        for n, (source, quote) in enumerate(quotes, start=1)
    ]  # fmt: skip


def evidence_of(question: str, claims: list[Claim], title: str) -> SynthesisInput:
    """The verified `claims` as one sub-question's evidence, each source S<n> a page titled `title`."""
    ids = sorted({claim.source_id for claim in claims}, key=lambda source: int(source[1:]))
    sources = [
        Source(id=i, page_id=f"p{i[1:]}", url=f"https://example.org/{i[1:]}", title=title, stored_at=READ)
        for i in ids
    ]
    return SynthesisInput(question=question, subquestions=SUBS, claims=claims, sources=sources)


def test_each_aspect_of_an_open_question_is_asked_again_with_the_words_its_claims_name() -> None:
    question = (
        'In the context of "The Harbour Strike of Port Ellis", what do the sources report about wages and '
        "the reopening?"
    )
    plan = extractive_engine().planner.plan(question, 5)
    assert [sub.text for sub in plan[1:]] == [
        "What do the sources report about wages?",
        "What do the sources report about the reopening?",
    ]
    assert plan[1].query.split()[:1] == ["wages"] and "harbour" in plan[1].query.split()
    # Three pages' claims about wages name overtime; the other claims do not. The follow-up round asks
    # about wages again with "overtime" (relevance feedback), and about the reopening with nothing new.
    claims = verified([
        ("S1", "Wages at the docks had not risen since overtime pay was cut in spring."),
        ("S2", "Dockers said lost overtime had cut their wages by a fifth."),
        ("S3", "The union wants overtime restored before wages are talked about."),
        ("S4", "The Harbour strike began on a Monday morning."),
        ("S5", "Ferries kept running during the Harbour strike."),
        ("S6", "The reopening of the port is planned for June."),
    ])  # fmt: skip
    evidence = SynthesisInput(question=question, subquestions=plan, claims=claims, sources=request().sources)
    follow = extractive_engine().planner.follow_up(evidence, 5)
    assert len(follow) == 1
    assert follow[0].text.startswith("What else do the sources report about wages: overtime")
    assert follow[0].query.split()[:2] == ["wages", "overtime"]
    # A claim naming a word the follow-up asked about is on the aspect, though it lacks the aspect's own.
    expanded = expansion_terms("wages", question, claims)
    assert expanded[0] == "overtime" and "harbour" not in expanded and "strike" not in expanded
    # What the follow-up found is grouped under the aspect it asked about again, never under its own text.
    more = verified([("S7", "Overtime pay at the Harbour docks was cut by a third in spring.")], "q4")
    followed = [*plan, follow[0].model_copy(update={"id": "q4", "position": len(plan)})]
    found = digest(evidence.model_copy(update={"subquestions": followed, "claims": more}), 12, 400)
    assert [finding.section for finding in found.opening + found.grouped] == [plan[1].id]


def test_a_number_in_a_name_is_no_conflict_but_the_same_measure_with_another_value_is() -> None:
    assert measures("It reached 1,025 hp.") == {("reach", "1025"), ("hp", "1025")}
    question = "What do the sources report about the Falcon 9 rocket and its engines?"
    claims = verified([
        ("S1", "The Falcon 9 rocket engines can throttle down when the payload is light, sources said."),
        ("S2", "Its engines can throttle down to 40% of full thrust when the payload is light."),
        ("S3", "The Falcon 9 rocket engines give 7600 kN of thrust at sea level."),
        ("S4", "The Falcon 9 rocket engines give 8200 kN of thrust at sea level."),
    ])  # fmt: skip
    found = digest(evidence_of(question, claims, "Falcon 9"), 12, 400)
    assert [sorted(item.source_id for item in pair) for pair in found.conflicts] == [["S3", "S4"]]


def test_a_finding_never_cites_a_page_whose_quotes_negate_it() -> None:
    # S2 states the finding in one claim, and another of its claims says "never closed" of the port: citing
    # S2 would sink the sentence in the checks.
    question = 'In the context of "The Harbour Strike", what do the sources report about the port closure?'
    claims = verified([
        ("S1", "The Harbour strike closed the port for nine days, officials said."),
        ("S2", "The Harbour strike closed the port for nine days, dock workers said."),
        ("S2", "The ferry terminal was never closed, unlike the port."),
        ("S3", "For nine days the Harbour strike closed the port to ships, officials said."),
    ])  # fmt: skip
    draft = extractive_engine().synthesiser.write(evidence_of(question, claims, "Port news"))
    [closed] = [sentence for sentence in draft.sentences if "nine days" in sentence.text]
    assert sorted(closed.cites) == ["S1", "S3"]  # S1 and S3 corroborate it; S2 is left out
    assert mechanical_critique(draft, claims).approved


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as running:
        yield running


def synthesiser_on(server: ScriptedServer, **options: object) -> ModelEngine:
    config = RoleConfig.model_validate({"model": "m", "base_url": server.url, "max_attempts": 1, **options})
    settings = ModelSettings(roles={RoleName.synthesiser: config}, limits=Limits(backoff_seconds=0.01))
    return build_engine(
        settings, MemoryCallLog(), "r1", caps=Caps(), fallback=extractive_engine(),
        pool=EndpointPool(settings.limits, {}),
    )  # fmt: skip


def test_the_model_writes_the_digest_one_finding_a_line_and_the_program_cites_its_pages(
    server: ScriptedServer,
) -> None:
    models = synthesiser_on(server)
    server.enqueue(
        Reply(
            content="Here is the digest:\nF1: The Harbour strike closed the port for nine days.\n"
            "F9: not a finding\nF2: Fish prices in the Harbour markets rose sharply during the strike."
        )
    )
    review = write_report(EngineSteps(models.engine), request(), 0, lambda: True)
    (prompt,) = server.requests
    shown = prompt.prompt
    assert "F1 (3 pages): " in shown and "railway" not in shown  # merged findings, not raw claims
    kept = review.kept
    assert kept[0].section == "" and sorted(kept[0].cites) == ["S1", "S2", "S3"]
    assert kept[0].text == "The Harbour strike closed the port for nine days."
    assert sorted(kept[1].cites) == ["S2", "S4"]
    # The extractive digest is the floor: what the model left out (the conflicting counts) is added.
    assert {s.cites[0] for s in kept if s.section == DIFFER_SECTION} == {"S5", "S6"}
    assert not review.removed


def test_a_digest_reply_with_no_usable_line_is_retried_once_then_the_extractive_digest_is_used(
    server: ScriptedServer,
) -> None:
    models = synthesiser_on(server)
    server.enqueue(Reply(content="I think the strike was bad."), Reply(content='{"sentences": []}'))
    review = write_report(EngineSteps(models.engine), request(), 0, lambda: True)
    assert len(server.requests) == 2
    assert "no line has the form 'F<number>: <sentence>'" in server.requests[1].prompt
    assert [s.text for s in review.kept] == [
        s.text for s in extractive_engine().synthesiser.write(request()).sentences
    ]
    assert "no usable line twice" in models.degradations.drain()[0].reason


def test_the_digest_prompt_fits_a_small_context_window(server: ScriptedServer) -> None:
    models = synthesiser_on(server, context_tokens=1024, max_output_tokens=256)
    # Thirty distinct findings, each a long quote: more than 1,024 tokens can show.
    many = request().model_copy(
        update={
            "claims": [
                claim.model_copy(
                    update={
                        "id": f"C{n}",
                        "quote": f"The Harbour strike committee {n} met on pier {n} "
                        + "and talked at length " * 6
                        + "until dawn.",
                        "text": f"The Harbour strike committee {n} met on pier {n}.",
                    }
                )
                for n, claim in enumerate([request().claims[0]] * 30, start=100)
            ]
        }
    )
    server.enqueue(Reply(content="F1: x"))
    write_report(EngineSteps(models.engine), many, 0, lambda: True)
    (prompt,) = server.requests
    shown = re.findall(r"^F\d+ \(", prompt.prompt, re.MULTILINE)
    assert 0 < len(shown) < 24 and len(prompt.prompt) < (1024 - 256) * 4


def test_a_quote_too_long_to_show_whole_is_not_offered_to_the_model_cut() -> None:
    found = digest(request(), findings_max=12, words_max=400)
    findings = found.opening + found.grouped
    lead = findings[1].lead
    long = lead.claim.quote.rstrip(".") + ", and talked at length" * 30 + "."
    assert len(long) > QUOTE_SHOWN_CHARS
    findings[1].lead = replace(lead, claim=lead.claim.model_copy(update={"quote": long}))
    shown = [line.split(" ")[0] for line in finding_lines(findings, max_chars=10_000)]
    # The others keep their numbers: the model's "F3:" still means the third finding.
    assert shown == [f"F{n}" for n in range(1, len(findings) + 1) if n != 2]


def test_a_claim_that_restates_the_question_is_framing_not_a_finding() -> None:
    framing = [
        ("S8", "Sources report on the Harbour strike and its effects on the port."),
        ("S9", "Reports on the Harbour strike describe its effects on the port."),
    ]
    base = request()
    extra = [
        base.claims[0].model_copy(update={"id": f"F{n}", "page_id": f"p{source[1:]}", "source_id": source,
                                 "text": quote, "quote": quote})
        for n, (source, quote) in enumerate(framing)
    ]  # fmt: skip
    sources = [
        Source(
            id=s, page_id=f"p{s[1:]}", url=f"https://example.org/{s[1:]}", title="Port news", stored_at=READ
        )
        for s, _ in framing
    ]
    widened = base.model_copy(update={"claims": base.claims + extra, "sources": base.sources + sources})
    found = digest(widened, findings_max=2, words_max=400)
    chosen = [finding.lead.claim.quote for finding in found.opening + found.grouped]
    assert not any(quote in chosen for _, quote in framing)
    assert any("nine days" in quote for quote in chosen)


def test_a_finding_from_pages_about_the_aspect_asked_outranks_background_that_every_page_repeats() -> None:
    question = "What do the sources report about the effects of the Harbour strike on fishermen?"
    background = (
        "The Harbour port, where the strike began, has been home to the coast's fishermen since 1850."
    )
    port_news = [
        ("The Harbour port opened a container terminal.", "Cruise ships call at the Harbour port in summer."),
        ("The Harbour port dredged its main channel.", "A new crane arrived at the Harbour port."),
        ("The Harbour port hired a new director.", "Ferries leave the Harbour port every hour."),
        ("The Harbour port repaired its oldest pier.", "Tourists visit the Harbour port lighthouse."),
        ("The Harbour port installed solar panels.", "Yachts moor at the Harbour port marina."),
    ]
    general = [(f"S{n}", quote) for n, news in enumerate(port_news, start=1) for quote in (background, *news)]
    on_the_aspect = [
        ("S6", "Harbour fishermen sold their catch at half price for a week because of the strike."),
        ("S6", "The strike cost Harbour fishermen a month of income."),
        ("S6", "Some fishermen took their catch to ports up the coast while the Harbour strike lasted."),
        ("S7", "Because of the strike, Harbour fishermen sold their catch at half price for a week."),
        ("S7", "Fishermen kept their boats moored in the Harbour during the strike."),
        ("S7", "Younger fishermen found work on the Harbour ferries until the strike ended."),
    ]
    evidence = evidence_of(question, verified(general + on_the_aspect), "Harbour news")
    # Five pages about the port in general repeat its history; two pages about the strike's effect on
    # fishermen state their finding. With room for one finding, what the pages are about decides.
    [finding] = digest(evidence, findings_max=1, words_max=400).opening
    assert "half price" in finding.lead.claim.quote and sorted(finding.pages) == ["S6", "S7"]
    # With room for more, the background is still a finding, citing its five pages.
    more = digest(evidence, findings_max=3, words_max=400)
    assert any(f.lead.claim.quote == background and len(f.pages) == 5 for f in more.opening + more.grouped)


def test_a_finding_is_stated_in_the_words_most_of_its_pages_use_and_cites_each_of_them() -> None:
    # Four pages say the strike closed the port; three of them say for nine days, in three wordings. The
    # finding is stated by the quote closest to all the others (their medoid), not by the claim that
    # ranked it, and cites every page whose claim states what that quote says.
    claims = verified([
        ("S1", "The Harbour strike closed the port, the harbour master said on Monday."),
        ("S2", "The Harbour strike closed the port for nine days."),
        ("S3", "For nine days the Harbour strike kept the port closed."),
        ("S4", "The port was closed for nine days by the Harbour strike."),
        ("S5", "Fish prices in the Harbour markets rose during the strike."),
    ])  # fmt: skip
    found = digest(evidence_of(QUESTION, claims, "Port news"), findings_max=12, words_max=400)
    closed = [
        finding for finding in found.opening + found.grouped if "closed the port" in finding.lead.claim.quote
    ]
    assert [finding.lead.claim.quote for finding in closed] == [claims[1].quote]
    assert sorted(closed[0].pages) == ["S1", "S2", "S3", "S4"]


def test_an_open_question_about_one_aspect_is_asked_again_in_a_second_round() -> None:
    # The question's own search is the aspect's: the plan holds no sub-question for it, and the follow-up
    # round still asks about it with the words its claims name.
    question = 'In the context of "The Harbour Strike of Port Ellis", what do the sources report about wages?'
    plan = extractive_engine().planner.plan(question, 5)
    assert [sub.text for sub in plan] == [question]
    claims = verified([
        ("S1", "Wages at the docks had not risen since overtime pay was cut in spring."),
        ("S2", "Dockers said lost overtime had cut their wages by a fifth."),
        ("S3", "The union wants overtime restored before wages are talked about."),
        ("S4", "The Harbour strike began on a Monday morning."),
    ])  # fmt: skip
    evidence = SynthesisInput(question=question, subquestions=plan, claims=claims, sources=request().sources)
    follow = extractive_engine().planner.follow_up(evidence, 5)
    assert [sub.text for sub in follow] == ["What else do the sources report about wages: overtime?"]
    # What it finds is grouped under the question, the plan's only sub-question.
    more = verified([("S5", "Overtime pay at the Harbour docks was cut by a third in spring.")], "q2")
    asked = [*plan, follow[0].model_copy(update={"id": "q2", "position": 1})]
    found = digest(evidence.model_copy(update={"subquestions": asked, "claims": more}), 12, 400)
    assert [finding.section for finding in found.opening + found.grouped] == ["q1"]


def test_a_finding_three_pages_state_outranks_sentences_that_frame_the_question() -> None:
    # Three pages open by framing the question, each in its own words; three state one fact in words of
    # their own. Corroboration and closeness to the question multiply: the framing, closest to the
    # question but stated by one page each, does not outrank the fact.
    question = "What do the sources report about the Harbour strike and its effects on fishing?"
    claims = verified([
        ("S1", "This article looks closely at the Harbour strike, its causes and its effects on fishing."),
        ("S2", "We look at the Harbour strike and its lasting effects on fishing in this special report."),
        ("S3", "This report explores the Harbour strike and the effects of the strike on local fishing."),
        ("S4", "Fish prices rose by a third during the Harbour stoppage."),
        ("S5", "During the Harbour stoppage, fish prices rose by a third."),
        ("S6", "Fish prices at the Harbour rose by a third in the stoppage."),
    ])  # fmt: skip
    found = digest(evidence_of(question, claims, "Port news"), findings_max=1, words_max=400)
    assert [finding.lead.claim.quote for finding in found.opening] == [claims[3].quote]
    assert sorted(found.opening[0].pages) == ["S4", "S5", "S6"]


def test_a_page_corroborates_a_finding_with_what_it_says_about_another_aspect() -> None:
    # The third page's claim does not name fishing, the aspect asked about, so it is no finding of its
    # own; but it states what the finding states, and the checks keep it among the finding's citations.
    question = 'In the context of "The Harbour Strike", what do the sources report about fishing?'
    claims = verified([
        ("S1", "Fish prices rose by a third during the Harbour strike."),
        ("S2", "During the Harbour strike, fish prices rose by a third."),
        ("S3", "Prices rose by a third during the Harbour strike, dock traders said."),
    ])  # fmt: skip
    evidence = evidence_of(question, claims, "Port news")
    found = digest(evidence, findings_max=12, words_max=400)
    assert [sorted(finding.pages) for finding in found.opening + found.grouped] == [["S1", "S2", "S3"]]
    draft = extractive_engine().synthesiser.write(evidence)
    pruned, dropped = prune_citations(draft, claims)
    assert dropped == 0 and mechanical_critique(pruned, claims).approved


def test_a_fact_in_a_passage_about_the_aspect_outranks_one_among_claims_about_something_else() -> None:
    # Two facts, each stated by two pages, each naming the aspect asked about only in passing. One sits
    # beside what its pages say of the fishing fleet; the other sits at the far end of its pages, beside
    # small talk. Every page holds the same three kinds of claim, so the pages weigh alike: where on its
    # page a fact stands decides, as a reader would judge it.
    question = 'In the context of "The Harbour Strike", what do the sources report about the fishing fleet?'
    fleet = "The Harbour strike kept the fishing fleet in port."
    beside = ["Fish soup is served in every cafe.", "The fish market building is painted blue.",
              "Fish weathervanes top the old houses.", "A fish mosaic decorates the town hall."]  # fmt: skip
    museum = "A fish restaurant opened by the old museum."
    traders = "Fish traders lost a month of sales."
    placed = [  # (page, quote, offset in the page)
        *((f"S{n}", fleet, 0) for n in (3, 4)),
        *((f"S{n}", beside[n - 1], 2900) for n in (3, 4)),
        *((f"S{n}", museum, 3000) for n in (3, 4)),
        *((f"S{n}", fleet, 0) for n in (1, 2)),
        *((f"S{n}", traders, 80) for n in (1, 2)),
        *((f"S{n}", beside[n - 1], 3000) for n in (1, 2)),
    ]
    claims = [
        claim.model_copy(update={"quote_start": start, "quote_end": start + len(quote)})
        for claim, (_, quote, start) in zip(
            verified([(page, quote) for page, quote, _ in placed]), placed, strict=True
        )
    ]
    [finding] = digest(evidence_of(question, claims, "Port news"), findings_max=1, words_max=400).opening
    assert finding.lead.claim.quote == traders and sorted(finding.pages) == ["S1", "S2"]


@pytest.mark.parametrize(
    "topic", ["the NFC strike's effects on tourism", "tourism after the strike at Northern Ferry Company"]
)
def test_the_subject_named_in_the_aspect_is_not_what_is_asked(topic: str) -> None:
    # The aspect names the subject, in full or by its initials: the pages name it in every other claim,
    # about anything. What the question asks of it is tourism, which two pages state without its name.
    subject = '"The Northern Ferry Company Strike"'
    question = f"In the context of {subject}, what do the sources report about {topic}?"
    background = "The NFC was founded in 1901 and runs twelve ferries between the mainland and five ports."
    tourism = "Hotels on the islands lost a third of their tourist bookings."
    claims = verified([*((f"S{n}", background) for n in (1, 2, 3)), *((f"S{n}", tourism) for n in (4, 5))])
    [finding] = digest(evidence_of(question, claims, "Ferry news"), findings_max=1, words_max=400).opening
    assert finding.lead.claim.quote == tourism and sorted(finding.pages) == ["S4", "S5"]


@pytest.mark.parametrize(("apart", "cited"), [(200, True), (4000, False)])
def test_a_page_corroborates_a_finding_in_one_passage_not_by_words_scattered_over_it(
    apart: int, cited: bool
) -> None:
    # Two pages state that the strike closed the fish market for nine days. A third page says the fish
    # market was closed in one sentence and "nine days" in another: side by side, they state the finding
    # together; pages apart, one about the market's roof, the other about a festival, they do not.
    question = 'In the context of "The Harbour Strike", what do the sources report about the fish market?'
    finding = "The Harbour strike closed the fish market for nine days."
    placed = [  # (page, quote, offset in the page)
        ("S1", finding, 0),
        ("S2", finding, 0),
        ("S3", "The fish market was closed, its roof leaking.", 0),
        ("S3", "The festival lasted nine days.", apart),
    ]
    claims = [
        claim.model_copy(update={"quote_start": start, "quote_end": start + len(quote)})
        for claim, (_, quote, start) in zip(
            verified([(page, quote) for page, quote, _ in placed]), placed, strict=True
        )
    ]
    found = digest(evidence_of(question, claims, "Port news"), findings_max=1, words_max=400)
    [lead] = found.opening
    assert lead.lead.claim.quote == finding and ("S3" in lead.pages) is cited


def test_a_headline_or_a_fragment_is_no_finding_however_many_pages_print_it() -> None:
    def chosen(printed: str) -> list[str]:
        base = request()
        claims = base.claims + verified([(f"S{n}", printed) for n in (1, 3, 4, 5)])
        claims = [claim.model_copy(update={"id": f"H{n}"}) for n, claim in enumerate(claims)]
        found = digest(base.model_copy(update={"claims": claims}), findings_max=12, words_max=400)
        return [finding.lead.claim.quote for finding in found.opening + found.grouped]

    headline = "Harbour strike: union leaders meet ministers on wages"
    assert headline not in chosen(headline)
    fragment = '..."), and in the Harbour strike union leaders met ministers on wages.'
    assert fragment not in chosen(fragment)
    # The same words as a sentence are a finding: four pages state it.
    sentence = "In the Harbour strike, union leaders met ministers on wages."
    assert sentence in chosen(sentence)
