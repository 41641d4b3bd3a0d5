"""The rule registry: every id written once, typed, with its severity and its docs page."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest

from monitor.core import model, rules

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_the_type_and_the_table_name_the_same_ids_in_the_same_order() -> None:
    assert list(get_args(rules.RuleId)) == list(rules.TABLE)
    assert all(rule.id == key for key, rule in rules.TABLE.items())


def test_every_rule_is_explained_on_its_docs_page() -> None:
    missing = [f"{rule.id} ({rule.page})" for rule in rules.TABLE.values()
               if f"`{rule.id}`" not in (DOCS / rule.page).read_text()]
    assert missing == []


def test_the_check_rules_and_the_url_states_take_their_severity_from_the_table() -> None:
    checks = {i: r.severity for i, r in rules.TABLE.items() if not i.startswith("url-")}
    assert checks == model.RULES
    for state, rule in model.URL_STATES.items():
        if rule is not None:
            assert rules.TABLE[rule[0]].severity == rule[1], state
    assert set(model.URL_RULES) == {i for i in rules.TABLE if i.startswith("url-")}


@pytest.mark.parametrize("rule", list(rules.TABLE))
def test_an_issue_of_every_rule_knows_its_severity(rule: rules.RuleId) -> None:
    """A URL check's rule is an issue like any other: its severity comes from the table."""
    assert model.Issue(rule, "found").severity == rules.TABLE[rule].severity


def test_an_id_from_outside_the_code_is_checked() -> None:
    assert rules.rule_id("lastmod-invalid") == "lastmod-invalid"
    with pytest.raises(ValueError, match="'lastmod-invalidd' is not a rule id"):
        rules.rule_id("lastmod-invalidd")


def test_a_misspelt_rule_id_is_a_type_error() -> None:
    """mypy refuses an issue made with an id that is not in the registry."""
    program = ("from monitor.core.model import Issue\n"
               "Issue('lastmod-invalid', 'fine')\n"
               "Issue('lastmod-invalidd', 'a typo')\n")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "", "--strict", "--no-incremental",
         "--follow-imports", "silent", "-c", program],
        capture_output=True, text=True, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1, done.stdout
    assert "<string>:3:" in errors[0], done.stdout
