"""Settings: defaults, the settings file, the environment and explicit values, in that rising order."""

from __future__ import annotations

import ast
import importlib.resources
import inspect
from pathlib import Path

import pytest

from obsmem.errors import ConfigurationError
from obsmem.settings import ModelOverride, ModelSettings, builtin_settings, default_data_dir, load_settings


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults(tmp_path: Path) -> None:
    settings = load_settings()
    assert settings.data_dir == default_data_dir() == tmp_path / "xdg-data" / "obsmem"
    assert (settings.server.host, settings.server.port, settings.server.mcp) == ("127.0.0.1", 8765, True)
    assert (settings.search.default_limit, settings.search.max_limit) == (20, 50)
    assert settings.api_keys == [] and not settings.auth_enabled


def test_explicit_values_beat_the_environment_which_beats_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write(tmp_path / "obsmem.toml", "[server]\nport = 9001\nhost = '127.0.0.2'\n")
    assert load_settings(config).server.port == 9001
    monkeypatch.setenv("OBSMEM_SERVER__PORT", "9002")
    from_env = load_settings(config)
    assert (from_env.server.port, from_env.server.host) == (9002, "127.0.0.2")
    explicit = load_settings(config, server={"port": 9003})
    assert (explicit.server.port, explicit.server.host) == (9003, "127.0.0.2")


def test_which_file_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data_dir = tmp_path / "data"
    write(data_dir / "obsmem.toml", "[search]\ndefault_limit = 3\n")
    assert load_settings(data_dir=data_dir).search.default_limit == 3
    monkeypatch.setenv("OBSMEM_DATA_DIR", str(data_dir))
    assert load_settings().search.default_limit == 3
    named = write(tmp_path / "named.toml", "[search]\ndefault_limit = 4\n")
    monkeypatch.setenv("OBSMEM_CONFIG", str(named))
    assert load_settings().search.default_limit == 4  # a named file replaces the data directory's
    explicit = write(tmp_path / "explicit.toml", "[search]\ndefault_limit = 5\n")
    assert load_settings(explicit).search.default_limit == 5


def test_data_dir_from_the_file_and_overridden(tmp_path: Path) -> None:
    config = write(tmp_path / "obsmem.toml", f"data_dir = '{(tmp_path / 'from-file').as_posix()}'\n")
    assert load_settings(config).data_dir == tmp_path / "from-file"
    assert load_settings(config, data_dir=tmp_path / "flag").data_dir == tmp_path / "flag"


def test_api_keys_from_the_file_and_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = write(
        tmp_path / "obsmem.toml",
        "[[api_keys]]\nname = 'ci'\nkey = '0123456789abcdef'\nprojects = ['my-app']\n"
        "[[api_keys]]\nkey = 'fedcba9876543210'\n",
    )
    ci, admin = load_settings(config).api_keys
    assert ci.allows("my-app") and not ci.allows("other")
    assert admin.allows("anything") and admin.name == ""
    monkeypatch.setenv("OBSMEM_API_KEYS", '[{"key": "abcdefabcdefabcdef", "projects": ["x"]}]')
    [only] = load_settings(config).api_keys
    assert only.key.get_secret_value() == "abcdefabcdefabcdef" and only.projects == ["x"]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[server]\nprot = 9000\n", "server.prot"),
        ("[server]\nport = 70000\n", "server.port"),
        ("[search]\nmax_limit = 51\n", "search.max_limit"),
        ("[search]\nmax_limit = 10\n", "default_limit must not be larger than max_limit"),
        ("[server]\nmax_in_flight = 4\nmax_stream_followers = 4\n", "must be smaller than max_in_flight"),
        ("[server]\nmax_in_flight = 4\nmax_stream_followers = 5\n", "must be smaller than max_in_flight"),
        ("[[api_keys]]\nkey = 'short-secret'\n", None),
        ("[server\n", None),
    ],
)
def test_bad_settings_are_configuration_errors(tmp_path: Path, text: str, named: str | None) -> None:
    config = write(tmp_path / "obsmem.toml", text)
    with pytest.raises(ConfigurationError) as caught:
        load_settings(config)
    assert caught.value.code == "configuration_error"
    if named is not None:
        assert named in caught.value.message


def test_a_short_key_is_refused_without_echoing_it(tmp_path: Path) -> None:
    config = write(tmp_path / "obsmem.toml", "[[api_keys]]\nkey = 'sekrit-value'\n")
    with pytest.raises(ConfigurationError) as caught:
        load_settings(config)
    assert "at least 16 characters" in caught.value.message and "sekrit" not in caught.value.message


def test_a_named_file_that_does_not_exist_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError, match="settings file not found"):
        load_settings(tmp_path / "missing.toml")
    monkeypatch.setenv("OBSMEM_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigurationError, match="settings file not found"):
        load_settings()


def test_builtin_settings_ignore_the_file_and_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OBSMEM_CONFIG", str(write(tmp_path / "c.toml", "[search]\ndefault_limit = 2\n")))
    monkeypatch.setenv("OBSMEM_SERVER__PORT", "9100")
    settings = builtin_settings(data_dir=tmp_path / "demo")
    assert (settings.search.default_limit, settings.server.port) == (20, 8765)
    assert settings.data_dir == tmp_path / "demo"


def test_role_overrides_offer_every_model_setting_with_its_bounds() -> None:
    assert list(ModelOverride.model_fields) == list(ModelSettings.model_fields)
    for name, field in ModelOverride.model_fields.items():
        assert field.default is None, name
        assert field.metadata == ModelSettings.model_fields[name].metadata, name


def test_the_type_checkers_model_override_declares_the_generated_fields() -> None:
    """``ModelOverride`` is generated at run time; type checkers read a hand-written declaration instead.
    It must name every generated field, in order, with the ``[model]`` type made optional, or a checker
    would miss (or invent) an override."""
    import obsmem.settings.main as module

    tree = ast.parse(inspect.getsource(module))
    guarded = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    declared = next(n for n in guarded.body if isinstance(n, ast.ClassDef) and n.name == "ModelOverride")
    fields = [n for n in declared.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]
    assert [f.target.id for f in fields if isinstance(f.target, ast.Name)] == list(ModelOverride.model_fields)
    namespace = vars(module)
    for field in fields:
        assert isinstance(field.target, ast.Name)
        name = field.target.id
        expected = ModelSettings.model_fields[name].annotation
        assert eval(ast.unparse(field.annotation), namespace) == (expected | None), name  # noqa: S307
        assert field.value is not None and ast.unparse(field.value) == "None", name


def test_the_package_is_marked_as_typed() -> None:
    """PEP 561: without ``py.typed`` a type checker ignores the installed package's annotations."""
    assert importlib.resources.files("obsmem").joinpath("py.typed").is_file()


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("timeout_seconds = 0", "reflector.model.timeout_seconds: Input should be greater than 0"),
        ("max_retries = 11", "reflector.model.max_retries: Input should be less than or equal to 10"),
        ('base_url = "ftp://h/v1"', "reflector.model.base_url: must be an http:// or https://"),
        ('base_url = "http://u:p@h/v1"', "must not contain credentials; set api_key instead"),
        ("colour = 1", "reflector.model.colour"),
    ],
)
def test_role_overrides_are_checked_like_the_model_settings(tmp_path: Path, value: str, named: str) -> None:
    config = write(tmp_path / "obsmem.toml", f"[reflector.model]\n{value}\n")
    with pytest.raises(ConfigurationError) as caught:
        load_settings(config)
    assert named in caught.value.message


def test_a_role_override_replaces_only_what_it_names(tmp_path: Path) -> None:
    config = write(
        tmp_path / "obsmem.toml",
        '[model]\nbase_url = "http://h/v1"\nmodel_id = "big"\nmax_retries = 5\n'
        '[observer.model]\nbase_url = "http://other/v1/"\nmodel_id = "small"\n',
    )
    settings = load_settings(config)
    observer = settings.model_for("observer")
    assert (observer.base_url, observer.model_id, observer.max_retries) == ("http://other/v1", "small", 5)
    assert settings.model_for("reflector") == settings.model
