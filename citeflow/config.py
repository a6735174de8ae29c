"""The one settings tree of a run, and where each of its values came from.

Layers, each overriding the one before: defaults < citeflow.toml < environment < flags. The tree mirrors
citeflow.toml section for section, so a value has one name everywhere: `caps.token_budget` is the key
`token_budget` of `[caps]` in the file, CITEFLOW_CAPS__TOKEN_BUDGET in the environment and
`--set caps.token_budget=...` on the command line. A few variables keep the names their tools gave them
(CONVENTIONAL_ENV: OPENAI_BASE_URL, CITEFLOW_MODEL, SEARXNG_URL, ...).

Model roles: `[defaults]` holds what every role shares, `[planner]`, `[verifier]`, `[synthesiser]`,
`[critic]` and `[query_writer]` what one role changes. A role is configured when it ends up with a base
URL; with no model it uses the one model the endpoint lists at /v1/models (or loading fails, naming
CITEFLOW_MODEL and the models offered). An unconfigured role is played by the extractive engine. API
keys are read from the variable named by `api_key_env` when a client is built, and never stored in
settings.

Caps live here, in code, and every stage enforces them; no prompt is trusted to.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict

from citeflow.errors import InputError
from citeflow.llm.settings import Limits, ModelSettings, Price, RoleConfig, RoleName
from citeflow.urls import has_user_info, redact_user_info
from citeflow.web.settings import WebSettings

CONFIG_FILE = Path("citeflow.toml")
ENV_PREFIX = "CITEFLOW_"
# Variables named by the tools users already configure them for, and the setting each one sets.
CONVENTIONAL_ENV = {
    "OPENAI_BASE_URL": ("defaults", "base_url"),
    "CITEFLOW_MODEL": ("defaults", "model"),
    "SEARXNG_URL": ("web", "searxng_url"),
    "CITEFLOW_ALLOW_HOSTS": ("web", "allow_hosts"),
    "CITEFLOW_PROVIDER_ORDER": ("web", "provider_order"),
}
ROLE_SECTIONS = frozenset(["defaults", *RoleName])
DEFAULT = "default"
ENVIRONMENT = "environment"
FLAGS = "flow parameter settings"


# DuckDB's own spelling of a memory size, checked here so a typo is one clear line, not a DuckDB error;
# its groups are the number and the unit (storage/user_sql.size_in_bytes reads them).
MEMORY_SIZE = r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)\s*$"


class StoreSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    wait_seconds: float = Field(
        60.0,
        ge=0,
        description="How long a citeflow process waits for the store file while another process holds it, "
        "before it gives up with an error. 0 gives up at once.",
    )
    sql_timeout_seconds: float = Field(
        60.0, gt=0, description="`citeflow sql` stops a query that runs longer than this (--timeout)."
    )
    sql_memory_limit: str = Field(
        "1GB",
        pattern=MEMORY_SIZE,
        description="DuckDB memory_limit of the read-only connection `citeflow sql` opens (--memory-limit); "
        "a query that needs more is stopped.",
    )
    sql_max_rows: int = Field(
        10_000, ge=1, description="`citeflow sql` prints at most this many rows, saying so when it cuts."
    )
    sql_max_bytes: int = Field(
        64_000_000,
        ge=1,
        description="`citeflow sql` stops reading rows once their values reach this many characters, "
        "so a huge result never has to fit in memory.",
    )
    data_path: str | None = Field(
        None,
        description="Where a DuckLake store (db = ducklake:...) keeps its table data: a local folder or "
        "s3://bucket/prefix/ (credentials from the AWS_* variables, never from settings). Needed when the "
        "lake is created; a lake that exists already knows it.",
    )


class Caps(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    subquestions_min: int = Field(3, ge=1, description="The planner aims for at least this many.")
    subquestions_max: int = Field(5, ge=1, le=20, description="Sub-questions beyond this are dropped.")
    followups_max: int = Field(
        5, ge=0, le=5, description="Follow-up sub-questions of the second research round; 0 turns it off."
    )
    pages_per_search: int = Field(4, ge=1, le=20, description="Search results read per sub-question.")
    pages_verified_max: int = Field(
        16, ge=1, description="Distinct pages whose claims a research round verifies (each of the two)."
    )
    claims_per_page: int = Field(3, ge=1, le=20, description="Claims proposed from one page.")
    report_findings_max: int = Field(
        12, ge=1, le=50, description="Findings a digest (the report of an open question) states, at most."
    )
    report_words_max: int = Field(
        400, ge=50, description="Words of a digest's findings, at most (the first finding always ships)."
    )
    revisions_max: int = Field(2, ge=0, le=2, description="Synthesiser revisions after a critique.")
    token_budget: int = Field(200_000, ge=0, description="Model tokens (prompt + completion) per run.")
    quote_min_chars: int = Field(20, ge=1, description="Shorter quotes are rejected: they prove nothing.")
    claim_support_min: float = Field(
        0.6,
        ge=0.0,
        le=1.0,
        description="Share of a claim's content words (stemmed) its quote must hold, names and numbers "
        "aside (those must all be there); a claim whose text is its quote holds them all.",
    )
    page_text_max_chars: int = Field(
        200_000, ge=1000, description="Page text beyond this is cut before storing."
    )


# Each role's section: any field of RoleConfig, each optional, since a role section only changes what it
# names. Built from RoleConfig so the two cannot drift; the values are validated as a RoleConfig once a
# role's sections are merged.
RoleSection: type[BaseModel] = create_model(  # type: ignore[call-overload]
    "RoleSection",
    __config__=ConfigDict(extra="forbid", frozen=True),
    **{
        name: (Optional[field.annotation], Field(None, description=field.description))  # noqa: UP045
        for name, field in RoleConfig.model_fields.items()
    },
)


class Settings(BaseSettings):
    """Everything a run may be told, in one tree; stored with the run as JSON with its hash."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid", frozen=True
    )

    db: Path = Field(Path("citeflow.duckdb"), description="The evidence store (DuckDB file).")
    reports: Path = Field(Path("reports"), description="Folder where finished reports are written.")
    search: str = Field(
        "local",
        description="Search providers, first tried first, comma-separated: 'local' searches the evidence "
        "store; others: searxng, duckduckgo, wikipedia, tavily.",
    )
    caps: Caps = Field(default_factory=lambda: Caps())
    store: StoreSettings = Field(default_factory=lambda: StoreSettings())
    web: WebSettings = Field(default_factory=lambda: WebSettings())
    defaults: RoleSection = Field(  # type: ignore[valid-type]
        default_factory=lambda: RoleSection(), description="Model settings every role shares."
    )
    planner: RoleSection = Field(default_factory=lambda: RoleSection())  # type: ignore[valid-type]
    verifier: RoleSection = Field(default_factory=lambda: RoleSection())  # type: ignore[valid-type]
    synthesiser: RoleSection = Field(default_factory=lambda: RoleSection())  # type: ignore[valid-type]
    critic: RoleSection = Field(default_factory=lambda: RoleSection())  # type: ignore[valid-type]
    query_writer: RoleSection = Field(  # type: ignore[valid-type]
        default_factory=lambda: RoleSection(),
        description="Optional: a model that rewrites the planner's search queries (one more call a run).",
    )
    models: Limits = Field(default_factory=lambda: Limits(), description="Limits shared by every role.")
    prices: dict[str, Price] = Field(default_factory=dict, description="Per model name, for a cost budget.")

    def model_settings(self) -> ModelSettings:
        """The roles resolved: [defaults] under each role's own section, configured roles only."""
        base = _given(self.defaults)
        roles: dict[RoleName, RoleConfig] = {}
        for name in RoleName:
            own = _given(getattr(self, name.value))
            if name is RoleName.query_writer and not own:
                continue  # it adds a call per run that the planner can do without: only when asked for
            merged = base | own
            if "base_url" not in merged or "model" not in merged:
                if own:  # the user set this role up explicitly, so a missing half is a mistake
                    missing = "base_url" if "base_url" not in merged else "model"
                    raise InputError(
                        f"the {name.value} role",
                        f"has settings of its own but no {missing} (set it in [{name.value}] or [defaults])",
                        "nothing was run",
                    )
                continue
            roles[name] = _validated(RoleConfig, merged, f"[{name.value}]")
        return ModelSettings(roles=roles, limits=self.models, prices=self.prices)

    def stored_json(self) -> str:
        """The tree as stored with a run: every value, sorted, no secret (keys are never settings, and the
        user info of a URL, where a password or key may hide, is redacted)."""
        return redact_user_info(self.model_dump_json())

    def digest(self) -> str:
        """A short hash of stored_json: two runs with the same digest ran with the same settings."""
        return hashlib.sha256(self.stored_json().encode()).hexdigest()[:16]


def _given(section: BaseModel) -> dict[str, Any]:
    return section.model_dump(exclude_none=True)


def _validated(model: type[BaseModel], data: Mapping[str, Any], where: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise InputError(where, problems, "nothing was run") from None


# How `Loaded.sources` names a model found by asking its endpoint for the one model it serves.
SERVED_MODEL = "the one model"


class Loaded(BaseModel):
    """The settings of a run, and for each value set by a layer, which one: `caps.token_budget` ->
    'citeflow.toml', 'environment (CITEFLOW_CAPS__TOKEN_BUDGET)', 'flags'. Unlisted values are defaults."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    settings: Settings
    sources: dict[str, str]

    def served_models(self) -> dict[str, str]:
        """Each model these settings got by asking its endpoint, as a dotted flag ("defaults.model" ->
        the model): given to the flow with the command's own flags, the run does not ask again."""
        return {
            name: getattr(self.settings, name.removesuffix(".model")).model
            for name, source in self.sources.items()
            if source.startswith(SERVED_MODEL)
        }


def load_settings(
    flags: Mapping[str, Any] | None = None,
    config: Path | None = None,
    env: Mapping[str, str] | None = None,
    flags_source: str = FLAGS,
) -> Loaded:
    """Defaults < citeflow.toml (`config`, else ./citeflow.toml when it exists) < environment < `flags`.

    `flags` maps dotted names to values ({"caps.token_budget": 5000, "defaults.model": "qwen3:8b"});
    `flags_source` names them in messages (the command line, or the flow's `settings` parameter).
    An unknown name in the file or the flags is refused, naming it, its source and the closest valid name.
    """
    env = os.environ if env is None else env
    layers: list[tuple[str, dict[tuple[str, ...], Any]]] = [
        (
            str(config or CONFIG_FILE),
            _flatten(_read_toml(config or CONFIG_FILE, required=config is not None)),
        ),
        *_environment(env),
        (flags_source, {tuple(name.split(".")): value for name, value in (flags or {}).items()}),
        ("command line", {tuple(name.split(".")): value for name, value in _PRIVATE_FLAGS.items()}),
    ]
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for source, values in layers:
        for path, value in values.items():
            _check_known(path, source)
            _put(merged, path, value)
            sources[".".join(path)] = source
    settings = _validated(Settings, merged, "settings")
    settings = _with_served_models(settings, env, sources)
    settings.model_settings()  # a role set up by halves fails here, before any run
    tavily_key = env.get(settings.web.tavily_key_env) or None
    settings = settings.model_copy(
        update={"web": settings.web.model_copy(update={"tavily_api_key": tavily_key})}
    )
    return Loaded(settings=settings, sources=sources)


def _with_served_models(settings: Settings, env: Mapping[str, str], sources: dict[str, str]) -> Settings:
    """Each section with an endpoint but no model gets the endpoint's one model from /v1/models, so the
    stored settings name the model the run used. [defaults] first: a role with no model of its own takes
    the model [defaults] ends up with."""
    update: dict[str, BaseModel] = {}
    served: dict[str, str] = {}  # base URL -> its one model, asked once per endpoint
    base: dict[str, Any] = {}
    for name in ("defaults", *(role.value for role in RoleName)):
        section = getattr(settings, name)
        merged = base | _given(section)
        if name == "defaults":
            base = merged
        elif not _given(section):
            continue  # nothing of its own: [defaults] holds its endpoint and model
        if "base_url" not in merged or "model" in merged:
            continue
        # Imported here: the openai client costs 0.3 s of start-up, and only this lookup needs it.
        from citeflow.llm.discovery import only_model, public_url

        url = str(merged["base_url"])
        if url not in served:
            key_env = str(merged.get("api_key_env", RoleConfig.model_fields["api_key_env"].default))
            served[url] = only_model(url, env.get(key_env, ""))
        update[name] = section.model_copy(update={"model": served[url]})
        sources[f"{name}.model"] = f"{SERVED_MODEL} {public_url(url)} serves"
        if name == "defaults":
            base = base | {"model": served[url]}
    return settings.model_copy(update=update)


def _read_toml(path: Path, required: bool) -> dict[str, Any]:
    if not path.exists():
        if required:
            raise InputError(str(path), "the config file does not exist", "nothing was run")
        return {}
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(str(path), f"not valid TOML: {exc}", "nothing was run") from exc


def _flatten(table: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """{"caps": {"token_budget": 5}} -> {("caps", "token_budget"): 5}; a table under a dict-valued
    setting (a price per model) stays whole, since its keys are names, not settings."""
    flat: dict[tuple[str, ...], Any] = {}
    for key, value in table.items():
        path = (*prefix, key)
        if isinstance(value, dict) and _field_at(path) is not None and not _is_mapping_field(path):
            flat |= _flatten(value, path)
        else:
            flat[path] = value
    return flat


def _environment(env: Mapping[str, str]) -> Iterator[tuple[str, dict[tuple[str, ...], Any]]]:
    """The environment as layers: CITEFLOW_<SECTION>__<KEY> names (read by pydantic-settings), then the
    conventional names. Each layer is named by its variable, so `config show` can say which one."""
    for name, path in CONVENTIONAL_ENV.items():
        if env.get(name):
            yield f"{ENVIRONMENT} ({name})", {path: env[name]}
    source = EnvSettingsSource(Settings, case_sensitive=False)
    source.env_vars = {key.lower(): value for key, value in env.items()}
    for key, value in _flatten(source()).items():
        variable = ENV_PREFIX + "__".join(key).upper()
        if variable in CONVENTIONAL_ENV:
            continue
        yield f"{ENVIRONMENT} ({variable})", {key: value}
    # pydantic-settings reads only names it knows; a misspelt CITEFLOW_CAPS__... would go unseen.
    for variable in env:
        section, sep, key = variable.removeprefix(ENV_PREFIX).partition("__")
        if variable.startswith(ENV_PREFIX) and sep and _field_at((section.lower(),)) is not None:
            _check_known((section.lower(), *key.lower().split("__")), f"{ENVIRONMENT} ({variable})")


def _field_at(path: tuple[str, ...]) -> Any:
    """The pydantic field a dotted path names in the tree, or None."""
    model: Any = Settings
    field = None
    for part in path:
        fields = getattr(model, "model_fields", None)
        if fields is None:
            # inside a mapping-valued field (prices."model"): any key is a name
            return field if _is_mapping(field) else None
        field = fields.get(part)
        if field is None or field.exclude:
            return None
        model = field.annotation if isinstance(field.annotation, type) else None
        if model is None:
            return field
    return field


def _is_mapping(field: Any) -> bool:
    return getattr(getattr(field, "annotation", None), "__origin__", None) is dict


def _is_mapping_field(path: tuple[str, ...]) -> bool:
    return _is_mapping(_field_at(path))


def _known_paths(model: Any = Settings, prefix: tuple[str, ...] = ()) -> Iterator[str]:
    for name, field in model.model_fields.items():
        if field.exclude:  # a secret read from the environment, never a setting
            continue
        path = (*prefix, name)
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            yield from _known_paths(field.annotation, path)
        else:
            yield ".".join(path)


def _check_known(path: tuple[str, ...], source: str) -> None:
    if _field_at(path) is not None:
        return
    name = ".".join(path)
    close = difflib.get_close_matches(name, list(_known_paths()), n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]}?" if close else "; `citeflow config show` lists every setting"
    raise InputError(source, f"unknown setting {name}{hint}", "nothing was run")


def _put(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for part in path[:-1]:
        tree = tree.setdefault(part, {})
    tree[path[-1]] = value


def effective_values(loaded: Loaded) -> list[tuple[str, Any, str]]:
    """(dotted name, value, source) for every setting, for `citeflow config show`. Model roles are shown
    resolved: each configured role's every value, with the section it came from."""
    settings, sources = loaded.settings, loaded.sources
    dumped = settings.model_dump(mode="json")
    rows: list[tuple[str, Any, str]] = []
    for name in _known_paths():
        section = name.split(".")[0]
        if section in ROLE_SECTIONS:
            continue
        value: Any = dumped
        for part in name.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        # A price set by --set names the model too (prices.small.input_per_million).
        source = sources.get(name) or next(
            (where for key, where in sources.items() if key.startswith(f"{name}.")), DEFAULT
        )
        rows.append((name, shown(value), source))
    roles = settings.model_settings().roles
    for role in RoleName:
        config = roles.get(role)
        if config is None:
            rows.append((role.value, "extractive engine", "no base_url and model for this role"))
            continue
        for field, value in config.model_dump(mode="json").items():
            own, shared = sources.get(f"{role.value}.{field}"), sources.get(f"defaults.{field}")
            source = own or (f"{shared} [defaults]" if shared else DEFAULT)
            rows.append((f"{role.value}.{field}", shown(value), source))
    return rows


def shown(value: Any) -> Any:
    """A setting's value as it may be printed: the user info of any URL in it redacted."""
    return redact_user_info(value) if isinstance(value, str) else value


# Settings given to this process whose values hold a URL's user info: kept out of a flow's `settings`
# parameter (Prefect stores parameters and shows them in its UI) and applied by load_settings here instead.
_PRIVATE_FLAGS: dict[str, Any] = {}


def keep_private(flags: Mapping[str, Any]) -> dict[str, Any]:
    """`flags` without those that hold credentials in a URL, which load_settings in this process applies
    over the flags it is given. For the command line, whose flow runs in its own process."""
    private = {name: v for name, v in flags.items() if isinstance(v, str) and has_user_info(v)}
    _PRIVATE_FLAGS.clear()
    _PRIVATE_FLAGS.update(private)
    return {name: value for name, value in flags.items() if name not in private}
