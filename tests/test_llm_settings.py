"""Per-role model settings: environment, then citeflow.toml, then flags."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from citeflow.cli import app
from citeflow.errors import InputError
from citeflow.llm.settings import Limits, ModelSettings, RoleConfig, RoleName, load_model_settings

ENV = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "CITEFLOW_MODEL": "base-model", "OPENAI_API_KEY": "sk-x"}


@pytest.fixture(autouse=True)
def no_config_file_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """load_model_settings(None, ...) reads ./citeflow.toml: run where there is none."""
    monkeypatch.chdir(tmp_path)


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
[search]
provider = "someone else's section, ignored here"
""",
    )
    settings = load_model_settings(
        path, ENV, {"planner": {"temperature": 0.0}, "models": {"cost_budget": 2.0}}
    )
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
    with pytest.raises(InputError, match=r"\[planner\] has no base_url"):
        load_model_settings(path, {})


def test_unknown_key_is_an_error_naming_file_and_section(tmp_path: Path) -> None:
    path = write(tmp_path, '[critic]\nmodle = "typo"\n')
    with pytest.raises(InputError, match=r"citeflow.toml \[critic\].*modle"):
        load_model_settings(path, ENV)


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
    with pytest.raises(InputError, match="^\\[models\\] cost_budget: no \\[prices\\] entry for strong "):
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
