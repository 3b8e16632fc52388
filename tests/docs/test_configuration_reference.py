"""The documentation keeps up with the code: every setting has a reference entry, and the README stays short.

The settings are found the way ``portal/settings.py`` reads them: ``os.environ.get``/``os.getenv``/``os.environ[...]``,
its helpers ``env_bool``, ``env_list`` and ``env_secret``, and ``dj_database_url.config`` (``DATABASE_URL`` unless it
names another).
"""

import ast
import re
from pathlib import Path

ROOT_DIR = Path(__file__).resolve().parents[2]
SETTINGS = ROOT_DIR / "portal" / "settings.py"
REFERENCE = ROOT_DIR / "docs" / "reference" / "configuration.md"
README = ROOT_DIR / "README.md"
README_MAX_BYTES = 10_240  # issue 31: a five-minute page, at most about 10 KB

# Calls whose first argument (or ``env=`` keyword) is the name of an environment variable.
ENV_HELPERS = {"env_bool", "env_list", "env_secret", "getenv"}


def _call_name(func: ast.expr) -> str:
    """The dotted name of a call's target, e.g. ``os.environ.get`` (empty when it is not a plain name)."""
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        inner = _call_name(func.value)
        return f"{inner}.{func.attr}" if inner else ""
    return ""


def _literal(node: ast.expr | None) -> str | None:
    """The string a node spells, if it is a string constant."""
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def settings_read_from_environment(source: str) -> set[str]:
    """Every environment variable name the settings module reads."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = _call_name(node.func)
            first = node.args[0] if node.args else None
            if name in ("os.environ.get", "environ.get", "os.getenv") or name.split(".")[-1] in ENV_HELPERS:
                found = _literal(first)
            elif name.endswith("dj_database_url.config"):
                env = next((k.value for k in node.keywords if k.arg == "env"), None)
                found = _literal(env) if env is not None else "DATABASE_URL"
            else:
                continue
            if found:
                names.add(found)
        elif isinstance(node, ast.Subscript) and _call_name(node.value) in ("os.environ", "environ"):
            found = _literal(node.slice)
            if found:
                names.add(found)
    return names


def documented_names(text: str) -> set[str]:
    """The names the reference documents: those in backticks in the first column of a table row."""
    return set(re.findall(r"^\|\s*`([A-Z][A-Z0-9_]*)`", text, flags=re.MULTILINE))


def test_the_parser_finds_each_way_settings_are_read() -> None:
    source = (
        "import os\nimport dj_database_url\n"
        "A = os.environ.get('ONE', '1')\nB = env_bool('TWO')\nC = env_list('THREE', '')\n"
        "D = os.environ['FOUR']\nE = os.getenv('FIVE')\nF = dj_database_url.config(default='sqlite://')\n"
        "G = env_secret('SIX', os.environ.get('SIX_FILE', ''))\n"
    )
    assert settings_read_from_environment(source) == {
        "ONE", "TWO", "THREE", "FOUR", "FIVE", "DATABASE_URL", "SIX", "SIX_FILE"
    }


def test_every_setting_read_from_the_environment_is_in_the_configuration_reference() -> None:
    read = settings_read_from_environment(SETTINGS.read_text())
    assert len(read) > 40, sorted(read)  # the parser still sees how settings.py reads them
    missing = sorted(read - documented_names(REFERENCE.read_text()))
    assert not missing, f"portal/settings.py reads {missing}, which docs/reference/configuration.md does not list"


def test_the_readme_is_a_short_page_that_stands_alone() -> None:
    data = README.read_bytes()
    assert len(data) <= README_MAX_BYTES, f"README.md is {len(data)} bytes; keep it under {README_MAX_BYTES}"
    text = data.decode()
    assert "../shared" not in text and "/work/" not in text
    for target in re.findall(r"\]\(([^)#\s]+)", text):
        if not re.match(r"[a-z]+:", target):
            assert (ROOT_DIR / target).exists(), f"README.md links to {target}, which does not exist"


def test_the_docs_stand_alone() -> None:
    for page in (ROOT_DIR / "docs").rglob("*.md"):
        text = page.read_text()
        assert "../shared" not in text and "/work/" not in text, page
