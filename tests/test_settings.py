"""The settings tree: defaults < citeflow.toml < environment < flags, one name for each setting everywhere,
unknown names refused with the closest valid one, and model roles resolved from [defaults] and their own
section."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from citeflow.config import Loaded, effective_values, load_settings
from citeflow.errors import InputError
from citeflow.llm.settings import Limits, ModelSettings, RoleConfig, RoleName
from cli.main import app

ENV = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "CITEFLOW_MODEL": "base-model", "OPENAI_API_KEY": "sk-x"}


@pytest.fixture(autouse=True)
def no_config_file_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """load_settings reads ./citeflow.toml when no file is named: run where there is none."""
    monkeypatch.chdir(tmp_path)


def load_model_settings(
    path: Path | None, env: dict[str, str], flags: dict[str, object] | None = None
) -> ModelSettings:
    return load_settings(flags, path, env).settings.model_settings()


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "citeflow.toml"
    path.write_text(text)
    return path


def test_environment_configures_the_four_core_roles() -> None:
    settings = load_model_settings(None, ENV)
    assert set(settings.roles) == {RoleName.planner, RoleName.verifier, RoleName.synthesiser, RoleName.critic}
    assert {c.base_url for c in settings.roles.values()} == {"http://127.0.0.1:9/v1"}
    assert {c.api_key_env for c in settings.roles.values()} == {"OPENAI_API_KEY"}
    # the key itself is never part of the settings
    assert "sk-x" not in settings.model_dump_json()


def test_no_endpoint_means_no_configured_role() -> None:
    assert load_model_settings(None, {"OPENAI_API_KEY": "sk-x"}).roles == {}


def test_file_overrides_env_and_flags_override_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[defaults]
temperature = 0.2
[planner]
model = "small"
max_output_tokens = 300
[verifier]
model = "strong"
base_url = "http://127.0.0.1:10/v1"
api_key_env = "STRONG_KEY"
[query_writer]
model = "small"
[models]
max_concurrent_per_endpoint = 2
cost_budget = 1.5
[prices.small]
input_per_million = 0.1
output_per_million = 0.4
[prices.strong]
input_per_million = 1.0
output_per_million = 4.0
[prices.base-model]
input_per_million = 0.0
output_per_million = 0.0
""",
    )
    settings = load_model_settings(path, ENV, {"planner.temperature": 0.0, "models.cost_budget": 2.0})
    planner, verifier = settings.roles[RoleName.planner], settings.roles[RoleName.verifier]
    assert (planner.model, planner.max_output_tokens, planner.temperature) == ("small", 300, 0.0)
    assert (verifier.model, verifier.base_url, verifier.api_key_env) == (
        "strong",
        "http://127.0.0.1:10/v1",
        "STRONG_KEY",
    )
    assert settings.roles[RoleName.critic].model == "base-model"
    assert settings.roles[RoleName.critic].temperature == 0.2
    assert settings.roles[RoleName.query_writer].model == "small"
    assert settings.limits.max_concurrent_per_endpoint == 2
    assert settings.limits.cost_budget == 2.0
    assert settings.prices["small"].output_per_million == 0.4


def test_query_writer_needs_its_own_section() -> None:
    assert RoleName.query_writer not in load_model_settings(None, ENV).roles


def test_role_named_without_endpoint_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, '[planner]\nmodel = "small"\n')
    with pytest.raises(InputError, match=r"^the planner role: has settings of its own but no base_url"):
        load_model_settings(path, {})


def test_an_unknown_key_in_the_file_names_it_the_file_and_the_closest_setting(tmp_path: Path) -> None:
    path = write(tmp_path, '[critic]\nmodle = "typo"\n')
    with pytest.raises(InputError) as raised:
        load_model_settings(path, ENV)
    assert str(raised.value) == (
        f"{path}: unknown setting critic.modle; did you mean critic.model? (nothing was run)"
    )


def test_missing_explicit_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        load_model_settings(tmp_path / "nope.toml", ENV)


def test_cost_budget_needs_a_price_for_every_model() -> None:
    with pytest.raises(InputError, match="no \\[prices\\] entry for unpriced"):
        ModelSettings(
            roles={RoleName.planner: RoleConfig(model="unpriced", base_url="http://127.0.0.1:9/v1")},
            limits=Limits(cost_budget=1.0),
        )


def test_cost_budget_without_prices_fails_when_settings_load(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "[models]\ncost_budget = 1.0\n[prices.base-model]\ninput_per_million = 1.0\n"
        'output_per_million = 1.0\n[verifier]\nmodel = "strong"\n',
    )
    with pytest.raises(InputError, match="\\[models\\] cost_budget: no \\[prices\\] entry for strong "):
        load_model_settings(path, ENV)


UNPRICED = ["--set", "models.cost_budget=0.5", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"]
UNPRICED_MESSAGE = "[models] cost_budget: no [prices] entry for m (no model was called)"


def test_run_with_an_unpriced_cost_budget_fails_before_any_run(tmp_path: Path) -> None:
    db = tmp_path / "never.duckdb"
    result = CliRunner().invoke(app, ["run", "Who founded Acme?", "--db", str(db), *UNPRICED])
    assert result.exit_code == 1
    assert UNPRICED_MESSAGE in result.stderr
    assert not db.exists()  # failed before the store was opened, so before any run


def test_models_check_reports_an_unpriced_cost_budget() -> None:
    result = CliRunner().invoke(app, ["models", "check", *UNPRICED])
    assert result.exit_code == 1
    assert UNPRICED_MESSAGE in result.stderr


def test_each_layer_overrides_the_one_before_and_says_so(tmp_path: Path) -> None:
    path = write(tmp_path, "[caps]\ntoken_budget = 1000\nclaims_per_page = 2\npages_per_search = 5\n")
    env = {
        "CITEFLOW_CAPS__TOKEN_BUDGET": "2000",
        "CITEFLOW_CAPS__CLAIMS_PER_PAGE": "4",
        "SEARXNG_URL": "http://s",
    }

    loaded = load_settings({"caps.token_budget": 3000}, path, env)

    caps = loaded.settings.caps
    assert (caps.token_budget, caps.claims_per_page, caps.pages_per_search, caps.revisions_max) == (
        3000,
        4,
        5,
        2,
    )
    assert loaded.sources["caps.token_budget"] == "flow parameter settings"
    assert loaded.sources["caps.claims_per_page"] == "environment (CITEFLOW_CAPS__CLAIMS_PER_PAGE)"
    assert loaded.sources["caps.pages_per_search"] == str(path)
    assert loaded.sources["web.searxng_url"] == "environment (SEARXNG_URL)"
    assert loaded.settings.web.searxng_url == "http://s"
    assert "caps.revisions_max" not in loaded.sources  # a default


def test_an_unknown_key_in_flags_or_environment_names_its_source() -> None:
    with pytest.raises(
        InputError, match="^command line: unknown setting caps.token_bugdet; did you mean caps.token_budget"
    ):
        load_settings({"caps.token_bugdet": 5}, None, {}, flags_source="command line")
    with pytest.raises(
        InputError, match=r"^environment \(CITEFLOW_WEB__READ_TIMEOUTS\): .*web.read_timeout\?"
    ):
        load_settings(None, None, {"CITEFLOW_WEB__READ_TIMEOUTS": "3"})


def test_the_stored_tree_has_no_key_and_its_hash_follows_its_values() -> None:
    env = {**ENV, "TAVILY_API_KEY": "tvly-secret-secret-secret-secret"}
    first = load_settings(None, None, env).settings
    second = load_settings({"caps.claims_per_page": 2}, None, env).settings

    assert first.web.tavily_api_key == "tvly-secret-secret-secret-secret"
    assert "secret" not in first.stored_json() and "sk-x" not in first.stored_json()
    assert first.digest() == load_settings(None, None, env).settings.digest()
    assert first.digest() != second.digest()


def test_config_show_prints_every_setting_with_its_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CITEFLOW_CAPS__TOKEN_BUDGET", "5000")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")

    result = CliRunner().invoke(app, ["config", "show", "--model", "m", "--set", "verifier.model=strong"])

    assert result.exit_code == 0, result.output
    rows = {line.split(" = ")[0].strip(): line.split(" = ", 1)[1] for line in result.stdout.splitlines()}
    assert rows["caps.token_budget"] == "5000  # environment (CITEFLOW_CAPS__TOKEN_BUDGET)"
    assert rows["verifier.model"] == '"strong"  # command line'
    assert rows["planner.model"] == '"m"  # command line [defaults]'
    assert rows["planner.base_url"] == '"http://127.0.0.1:9/v1"  # environment (OPENAI_BASE_URL) [defaults]'
    assert rows["caps.revisions_max"] == "2  # default"
    assert rows["query_writer"] == '"extractive engine"  # no base_url and model for this role'


def test_a_typo_in_set_is_refused_naming_the_closest_setting(tmp_path: Path) -> None:
    db = tmp_path / "never.duckdb"
    result = CliRunner().invoke(
        app, ["run", "Who wrote Hamlet?", "--db", str(db), "--set", "caps.revision_max=1"]
    )
    assert result.exit_code == 1
    assert (
        "command line: unknown setting caps.revision_max; did you mean caps.revisions_max?" in result.stderr
    )
    assert not db.exists()


def test_effective_values_cover_every_setting_once() -> None:
    loaded: Loaded = load_settings(None, None, {})
    names = [name for name, _, _ in effective_values(loaded)]
    assert len(names) == len(set(names))
    assert {"db", "search", "caps.token_budget", "web.freshness_hours", "models.cost_budget"} <= set(names)
