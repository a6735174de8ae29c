"""The settings tree: defaults < citeflow.toml < environment < flags, one name for each setting everywhere,
unknown names refused with the closest valid one, and model roles resolved from [defaults] and their own
section."""

from __future__ import annotations

from pathlib import Path

import pytest
from openai_server import Reply, ScriptedServer
from typer.testing import CliRunner

from citeflow.config import Loaded, effective_values, load_settings
from citeflow.errors import InputError
from citeflow.llm.settings import ModelSettings, RoleName
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


README = Path(__file__).resolve().parent.parent / "README.md"


def readme_toml() -> str:
    """The citeflow.toml example of the README, exactly as printed there."""
    text = README.read_text(encoding="utf-8")
    start = text.index("```toml\n", text.index("citeflow.toml")) + len("```toml\n")
    return text[start : text.index("```", start)]


def test_the_readme_example_loads_verbatim_with_its_unpriced_planner(tmp_path: Path) -> None:
    settings = load_model_settings(write(tmp_path, readme_toml()), {})
    assert settings.roles[RoleName.planner].model == "qwen3-4b"
    assert settings.roles[RoleName.verifier].model == "qwen3-32b"
    assert settings.limits.cost_budget == 0.5
    # No price for qwen3-4b: it runs under the token budget, with one caveat (test_llm_budget.py).
    assert settings.unpriced_models() == ["qwen3-4b"]


def test_an_endpoint_without_a_model_uses_its_only_model() -> None:
    with ScriptedServer(models=["qwen2.5-1.5b-instruct"]) as server:
        settings = load_model_settings(None, {"OPENAI_BASE_URL": server.url})
    assert {c.model for c in settings.roles.values()} == {"qwen2.5-1.5b-instruct"}
    assert set(settings.roles) == {RoleName.planner, RoleName.verifier, RoleName.synthesiser, RoleName.critic}
    assert server.listings == 1  # asked once for all roles


@pytest.mark.parametrize(
    ("offered", "problem"),
    [
        (
            ["llama3", "qwen3:8b"],
            "lists 2 models (llama3, qwen3:8b); set CITEFLOW_MODEL (or model in citeflow.toml) to one",
        ),
        ([], "lists no model; set CITEFLOW_MODEL (or model in citeflow.toml) to the model to use"),
    ],
)
def test_an_endpoint_without_one_model_fails_naming_citeflow_model(offered: list[str], problem: str) -> None:
    with ScriptedServer(models=offered) as server, pytest.raises(InputError) as caught:
        load_model_settings(None, {"OPENAI_BASE_URL": server.url})
    assert str(caught.value) == f"OPENAI_BASE_URL {server.url}: {problem} (no model was called)"
    assert "\n" not in str(caught.value)


def test_an_endpoint_that_cannot_list_its_models_fails_naming_citeflow_model() -> None:
    with ScriptedServer() as server:
        url = server.url
    with pytest.raises(InputError, match="no answer when listing its models; set CITEFLOW_MODEL"):
        load_model_settings(None, {"OPENAI_BASE_URL": url})


def test_citeflow_model_skips_the_listing() -> None:
    with ScriptedServer(models=["a", "b"]) as server:
        settings = load_model_settings(None, {"OPENAI_BASE_URL": server.url, "CITEFLOW_MODEL": "b"})
    assert {c.model for c in settings.roles.values()} == {"b"} and server.listings == 0


def test_models_check_names_each_role_and_its_model(monkeypatch: pytest.MonkeyPatch) -> None:
    with ScriptedServer(models=["only-model"]) as server:
        server.default = Reply(content='{"ok": true}')
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        result = CliRunner().invoke(app, ["models", "check"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    for role in ("planner", "verifier", "synthesiser", "critic"):
        (line,) = [line for line in lines if line.startswith(f"{role}: ")]
        assert line.startswith(f"{role}: ok only-model at {server.url} in ")
        assert "json_schema, max_tokens." in line
    assert [line for line in lines if line.startswith("query_writer: ")] == [
        "query_writer: not configured. no base URL and model: the extractive engine plays this role"
    ]
    assert len(server.requests) == 1  # one call for the four roles sharing endpoint and model


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
