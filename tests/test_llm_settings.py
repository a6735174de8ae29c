"""Per-role model settings: environment, then citeflow.toml, then flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from citeflow.errors import InputError
from citeflow.llm.settings import RoleName, load_model_settings

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
