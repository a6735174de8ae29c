"""Scoring research runs against gold evidence, as ../shared/eval/README.md defines it.

A dataset is two JSON Lines files: a corpus (`{"url", "title", "text"}` a line, loaded as local pages) and
questions (`{"id", "question", "answers", "supporting": [{"url", "title", "text"}]}`). Runs see only the
question text; `answers` and `supporting` are read here, after the run, to score it. Nothing here runs
Prefect: flows/evaluate.py runs the questions and calls these functions.
"""

from __future__ import annotations

import json
import re
import statistics
import string
import tomllib
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from citeflow.contracts import ClaimStatus, Report
from citeflow.errors import CiteflowError, InputError
from citeflow.text import content_stems
from storage.store import EvidenceStore

NOTHING_RUN = "nothing was run"
# The README's coverage rule: a quote covers a gold sentence when they share at least this share of the
# shorter one's word tokens.
COVER_SHARE = 0.5
# A nugget (a key fact of an open question) is covered fully by one report sentence holding this share of
# its content stems, partly by one holding PARTIAL_SHARE (SummHay's full / partial / none, judged lexically).
NUGGET_FULL_SHARE = 0.6
NUGGET_PARTIAL_SHARE = 0.35


class GoldSentence(BaseModel):
    model_config = ConfigDict(extra="ignore")

    url: str
    title: str = ""
    text: str = Field(description="One gold supporting sentence, a sentence of the page at `url`.")


class EvalQuestion(BaseModel):
    """One question of a dataset. Only `question` is ever given to a run."""

    model_config = ConfigDict(extra="ignore")

    id: str
    question: str
    answers: list[str]
    supporting: list[GoldSentence]
    level: str = ""
    type: str = ""
    nuggets: list[str] = Field(
        default_factory=list, description="Key facts an open question's report states."
    )
    nugget_support: list[list[str]] = Field(
        default_factory=list, description="For each nugget, the URLs of the pages that state it."
    )

    @property
    def gold_urls(self) -> set[str]:
        return {support.url for support in self.supporting}


def load_questions(path: Path, limit: int | None = None, offset: int = 0) -> list[EvalQuestion]:
    """Questions `offset` .. `offset + limit` of a questions file (blank lines skipped)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise InputError(str(path), f"could not be read ({error.strerror})", NOTHING_RUN) from error
    questions = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            questions.append(EvalQuestion.model_validate_json(line))
        except ValidationError as error:
            problem = error.errors()[0]
            where = ".".join(str(part) for part in problem["loc"]) or "the record"
            raise InputError(f"{path} line {number}", f"{where}: {problem['msg']}", NOTHING_RUN) from None
    if not questions:
        raise InputError(str(path), "holds no questions", NOTHING_RUN)
    return questions[offset : None if limit is None else offset + limit]


def corpus_without(corpus: Path, urls: set[str], destination: Path) -> Path:
    """A copy of a JSON Lines corpus minus the records at `urls`: a question's gold pages removed makes it
    unanswerable from the corpus, which is how "not found" is measured."""
    kept = []
    for line in corpus.read_text(encoding="utf-8").splitlines():
        if line.strip() and json.loads(line).get("url") not in urls:
            kept.append(line)
    destination.write_text("\n".join(kept) + "\n", encoding="utf-8")
    return destination


def word_tokens(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.casefold()))


def covers(quote: str, gold: str) -> bool:
    """The README's rule: quote and gold sentence share half of the shorter one's word tokens."""
    a, b = word_tokens(quote), word_tokens(gold)
    return bool(a and b) and len(a & b) >= COVER_SHARE * min(len(a), len(b))


def plain(text: str) -> str:
    """Case-folded, punctuation stripped, white space collapsed."""
    return " ".join(text.casefold().translate(str.maketrans("", "", string.punctuation)).split())


def contains_answer(report_text: str, answers: list[str]) -> bool:
    """Whether one of `answers` is in the text as whole words: "no" is not found inside "not"."""
    body = f" {plain(report_text)} "
    return any(plain(answer) and f" {plain(answer)} " in body for answer in answers)


class QuestionResult(BaseModel):
    """One question's run and its scores. Counts, not ratios, so that totals add up."""

    id: str
    question: str
    run_id: str = Field("", description="The research run, to look up in the store; '' when it crashed.")
    expected_answered: bool = Field(description="False when the question's gold pages were removed.")
    status: str = Field(description="The run's status, or 'error' when the run itself crashed.")
    answered: bool = False
    gold_sentences: int
    covered_strict: int = Field(0, description="Gold sentences covered by a verified quote from their page.")
    covered_lenient: int = Field(0, description="Gold sentences covered by any verified quote.")
    gold_pages: int
    gold_pages_cited: int = 0
    pages_cited: int = 0
    answer_found: bool = False
    integrity_problems: int = 0
    nuggets: int = Field(0, description="Key facts the question carries (0: not an open question).")
    nugget_coverage: float = Field(0.0, description="Sum over nuggets of 1 (full), 0.5 (partial) or 0.")
    nugget_citation_f1: float = Field(0.0, description="Sum over nuggets of the covering sentence's F1.")
    nugget_joint: float = Field(0.0, description="Sum over nuggets of coverage times citation F1.")
    judged: bool = Field(False, description="Whether a model judged its nuggets too (the *_model sums).")
    nugget_coverage_model: float = 0.0
    nugget_citation_f1_model: float = 0.0
    nugget_joint_model: float = 0.0
    judge_fallbacks: int = Field(
        0, description="Nuggets the model could not judge: the lexical score counts."
    )
    sentences: int = 0
    words: int = 0
    model_calls: int = 0
    tokens: int = 0
    seconds: float = 0.0
    error: str = ""


class NuggetScore(BaseModel):
    coverage: float = Field(description="1.0 full, 0.5 partial, 0.0 none.")
    citation_f1: float = Field(description="F1 of the covering sentence's cited pages against the nugget's.")

    @property
    def joint(self) -> float:
        return self.coverage * self.citation_f1


def _coverage(nugget: set[str], sentence: set[str]) -> float:
    share = len(nugget & sentence) / len(nugget) if nugget else 0.0
    if share >= NUGGET_FULL_SHARE:
        return 1.0
    return 0.5 if share >= NUGGET_PARTIAL_SHARE else 0.0


def _f1(cited: set[str], gold: set[str]) -> float:
    hits = len(cited & gold)
    if not hits:
        return 0.0
    precision, recall = hits / len(cited), hits / len(gold)
    return 2 * precision * recall / (precision + recall)


def score_nugget(nugget: str, support: list[str], sentences: list[tuple[str, set[str]]]) -> NuggetScore:
    """One nugget against a report's (text, cited URLs) sentences, as SummHay scores it: the sentence that
    covers it best (then cites its pages best) gives its coverage and its citation F1; F1 is 0 when no
    sentence covers it."""
    stems = set(content_stems(nugget))
    best = NuggetScore(coverage=0.0, citation_f1=0.0)
    for text, cited in sentences:
        coverage = _coverage(stems, set(content_stems(text)))
        if not coverage:
            continue
        found = NuggetScore(coverage=coverage, citation_f1=_f1(cited, set(support)))
        if (found.coverage, found.citation_f1) > (best.coverage, best.citation_f1):
            best = found
    return best


# A model's judgment of a nugget against a report's sentences (citeflow/llm/judge.py): the index of the
# sentence stating it and its coverage, or (None, 0.0); it raises when it cannot judge.
Judge = Callable[[str, list[str]], tuple[int | None, float]]


def judge_nugget(
    judge: Judge, nugget: str, support: list[str], sentences: list[tuple[str, set[str]]]
) -> tuple[NuggetScore, bool]:
    """The model's score of one nugget: the coverage it judges and the citation F1 of the sentence it
    names. When it cannot judge (an unusable reply twice, an endpoint that fails), the lexical score
    stands, and the second value says so."""
    if not sentences:
        return NuggetScore(coverage=0.0, citation_f1=0.0), False  # nothing to ask about
    try:
        index, coverage = judge(nugget, [text for text, _ in sentences])
    except (ValueError, CiteflowError):
        return score_nugget(nugget, support, sentences), True
    if index is None:
        return NuggetScore(coverage=0.0, citation_f1=0.0), False
    return NuggetScore(coverage=coverage, citation_f1=_f1(sentences[index][1], set(support))), False


def _sentences(report: Report) -> list[tuple[str, set[str]]]:
    urls = {source.id: source.url for source in report.sources}
    return [
        (sentence.text, {urls[cite] for cite in sentence.cites if cite in urls})
        for sentence in report.sentences
    ]


def _supports(question: EvalQuestion) -> list[list[str]]:
    return question.nugget_support + [[]] * (len(question.nuggets) - len(question.nugget_support))


def score_nuggets(question: EvalQuestion, report: Report) -> list[NuggetScore]:
    sentences = _sentences(report)
    return [
        score_nugget(nugget, support, sentences)
        for nugget, support in zip(question.nuggets, _supports(question), strict=True)
    ]


def judge_nuggets(question: EvalQuestion, report: Report, judge: Judge) -> tuple[list[NuggetScore], int]:
    """Every nugget as the model judges it, and how many fell back to the lexical judgment."""
    sentences = _sentences(report)
    judged = [
        judge_nugget(judge, nugget, support, sentences)
        for nugget, support in zip(question.nuggets, _supports(question), strict=True)
    ]
    return [found for found, _ in judged], sum(fell_back for _, fell_back in judged)


def score(
    question: EvalQuestion,
    report: Report,
    store: EvidenceStore,
    problems: list[str],
    seconds: float,
    expected_answered: bool = True,
    judge: Judge | None = None,
) -> QuestionResult:
    """Score one finished run; `problems` are its integrity audit's findings. With a `judge`, its nuggets
    are also judged by the model."""
    # Every quote the run's verifier kept, cited or not: the report lists only the claims of the sources
    # it cites, and evidence recall measures what research and verification found.
    verified = store.claims(report.run_id, ClaimStatus.verified)
    page_urls = {page_id: store.get_page(page_id).url for page_id in {claim.page_id for claim in verified}}
    strict = lenient = 0
    for gold in question.supporting:
        lenient += any(covers(claim.quote, gold.text) for claim in verified)
        strict += any(
            page_urls[claim.page_id] == gold.url and covers(claim.quote, gold.text) for claim in verified
        )
    cited = {source.url for source in report.sources}
    text = " ".join(sentence.text for sentence in report.sentences)
    nuggets = score_nuggets(question, report)
    judged, fell_back = judge_nuggets(question, report, judge) if judge and question.nuggets else ([], 0)
    return QuestionResult(
        id=question.id,
        question=question.question,
        run_id=report.run_id,
        expected_answered=expected_answered,
        status=report.status.value,
        answered=report.answered,
        gold_sentences=len(question.supporting),
        covered_strict=strict,
        covered_lenient=lenient,
        gold_pages=len(question.gold_urls),
        gold_pages_cited=len(cited & question.gold_urls),
        pages_cited=len(cited),
        answer_found=contains_answer(text, question.answers),
        integrity_problems=len(problems),
        nuggets=len(nuggets),
        nugget_coverage=sum(nugget.coverage for nugget in nuggets),
        nugget_citation_f1=round(sum(nugget.citation_f1 for nugget in nuggets), 4),
        nugget_joint=round(sum(nugget.joint for nugget in nuggets), 4),
        judged=bool(judged),
        nugget_coverage_model=sum(nugget.coverage for nugget in judged),
        nugget_citation_f1_model=round(sum(nugget.citation_f1 for nugget in judged), 4),
        nugget_joint_model=round(sum(nugget.joint for nugget in judged), 4),
        judge_fallbacks=fell_back,
        sentences=len(report.sentences),
        words=len(text.split()),
        model_calls=report.metrics.model_calls,
        tokens=report.metrics.tokens_in + report.metrics.tokens_out,
        seconds=round(seconds, 2),
    )


def failed(
    question: EvalQuestion, error: str, seconds: float, expected_answered: bool = True
) -> QuestionResult:
    """A question whose run crashed: it scores nothing and counts in every total."""
    return QuestionResult(
        id=question.id,
        question=question.question,
        expected_answered=expected_answered,
        status="error",
        gold_sentences=len(question.supporting),
        gold_pages=len(question.gold_urls),
        nuggets=len(question.nuggets),
        seconds=round(seconds, 2),
        error=error,
    )


class Summary(BaseModel):
    """The figures over all questions: ratios of summed counts (micro averages), and per-question means."""

    questions: int
    errors: int = Field(description="Runs that crashed; each still counts, scoring nothing.")
    evidence_recall_strict: float
    evidence_recall_lenient: float
    supporting_page_recall: float
    citation_precision: float
    answer_recall: float
    answered_agreement: float = Field(description="Share whose `answered` is what the question expects.")
    integrity_problems: int
    nugget_coverage: float = Field(description="Mean over all nuggets; 0 when no question carries any.")
    nugget_citation_f1: float
    nugget_joint: float = Field(description="Mean over nuggets of coverage times citation F1 (SummHay).")
    # The same three as a model judges them, when one is configured (None when none is).
    nugget_coverage_model: float | None = None
    nugget_citation_f1_model: float | None = None
    nugget_joint_model: float | None = None
    judge_fallbacks: int = 0
    sentences_mean: float
    words_mean: float
    model_calls_mean: float
    tokens_mean: float
    seconds_median: float
    seconds_mean: float


def _ratio(part: int, whole: int) -> float:
    return round(part / whole, 3) if whole else 0.0


def _mean_per(results: list[QuestionResult], field: str) -> float:
    """A nugget figure's mean over every nugget of every question (a crashed run's score 0)."""
    nuggets = sum(result.nuggets for result in results)
    return round(sum(getattr(result, field) for result in results) / nuggets, 3) if nuggets else 0.0


def summarise(results: list[QuestionResult]) -> Summary:
    if not results:
        raise ValueError("no results to summarise")
    count = len(results)

    def total(field: str) -> int:
        return sum(getattr(result, field) for result in results)

    return Summary(
        questions=count,
        errors=sum(result.status == "error" for result in results),
        evidence_recall_strict=_ratio(total("covered_strict"), total("gold_sentences")),
        evidence_recall_lenient=_ratio(total("covered_lenient"), total("gold_sentences")),
        supporting_page_recall=_ratio(total("gold_pages_cited"), total("gold_pages")),
        citation_precision=_ratio(total("gold_pages_cited"), total("pages_cited")),
        answer_recall=_ratio(total("answer_found"), count),
        answered_agreement=_ratio(sum(r.answered == r.expected_answered for r in results), count),
        integrity_problems=total("integrity_problems"),
        nugget_coverage=_mean_per(results, "nugget_coverage"),
        nugget_citation_f1=_mean_per(results, "nugget_citation_f1"),
        nugget_joint=_mean_per(results, "nugget_joint"),
        **(
            {
                "nugget_coverage_model": _mean_per(results, "nugget_coverage_model"),
                "nugget_citation_f1_model": _mean_per(results, "nugget_citation_f1_model"),
                "nugget_joint_model": _mean_per(results, "nugget_joint_model"),
            }
            if any(result.judged for result in results)
            else {}
        ),
        judge_fallbacks=total("judge_fallbacks"),
        sentences_mean=round(statistics.mean(r.sentences for r in results), 1),
        words_mean=round(statistics.mean(r.words for r in results), 1),
        model_calls_mean=round(statistics.mean(r.model_calls for r in results), 1),
        tokens_mean=round(statistics.mean(r.tokens for r in results), 1),
        seconds_median=round(statistics.median(r.seconds for r in results), 2),
        seconds_mean=round(statistics.mean(r.seconds for r in results), 2),
    )


def load_floors(path: Path, table: str = "floors") -> dict[str, float]:
    """Floors from a TOML file: `[floors]` (or another table) maps a Summary figure to the least it may be."""
    try:
        floors = tomllib.loads(path.read_text(encoding="utf-8")).get(table, {})
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise InputError(str(path), f"could not be read as TOML: {error}", NOTHING_RUN) from error
    unknown = sorted(set(floors) - set(Summary.model_fields))
    if unknown:
        raise InputError(str(path), f"names no figure of the evaluation: {', '.join(unknown)}", NOTHING_RUN)
    return {name: float(value) for name, value in floors.items()}


def below_floors(summary: Summary, floors: dict[str, float]) -> list[str]:
    """One line per figure under its floor; empty when every floor holds."""
    values = summary.model_dump()
    return [
        f"{name} is {values[name]}, below its floor of {floor}"
        if values[name] is not None
        else f"{name} has a floor of {floor} but was not measured (no model judge is configured)"
        for name, floor in floors.items()
        if values[name] is None or values[name] < floor
    ]
