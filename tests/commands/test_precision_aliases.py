"""A precision alias (recipes.toml `aliases`: 'fp8' for fp8_tensorwise, ...) is read as its recipe's
name where it enters, a flag, --layout text or a plan.json, so that what comes out is what the
recipe's own name gives: `estimate --precision fp8` once wrote "precision": "fp8" (issue 25). An alias
that got past an edge fails loudly in precision.recipe (tests/core/test_precision_registry.py)."""

import json

import pytest

from trainplan.parsing import read_toml
from trainplan.plan import plan_from_dict
from trainplan.precision import _FILE

# every alias the registry's own file declares, with its recipe
ALIASES = [(a, name) for name, row in read_toml(_FILE).items() for a in row.get("aliases", ())]
JOB = ("--model", "llama-3.2-1b", "--instance", "ml.p6-b200.48xlarge")


def test_the_registry_has_aliases_to_test():
    assert ALIASES


def _json(cli, *argv):
    code, out, err = cli(*argv, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("alias, name", ALIASES)
def test_estimate_with_an_alias_is_the_estimate_of_its_recipe(cli, alias, name):
    got = _json(cli, "estimate", *JOB, "--dp-shard", "8", "--precision", alias)
    assert got["layout"]["precision"] == name
    assert got == _json(cli, "estimate", *JOB, "--dp-shard", "8", "--precision", name)


@pytest.mark.parametrize("alias, name", ALIASES)
def test_layout_text_with_an_alias_reads_as_its_recipe(cli, alias, name):
    text = "{} ac=full mb=1 ga=1 dp=1x8(fsdp)"
    got = _json(cli, "estimate", *JOB, "--layout", text.format(alias))
    assert got["layout"]["precision"] == name
    assert got == _json(cli, "estimate", *JOB, "--layout", text.format(name))


@pytest.mark.parametrize("alias, name", ALIASES)
def test_plan_with_an_alias_writes_its_recipe(cli, tmp_path, alias, name):
    out = tmp_path / "plan.json"
    got = _json(cli, "plan", *JOB, "--nodes", "1", "--precision", alias, "--out", str(out))
    assert got["plan"]["layout"]["precision"] == name
    assert json.loads(out.read_text())["layout"]["precision"] == name


@pytest.mark.parametrize("alias, name", ALIASES)
def test_a_plan_json_with_an_alias_reads_as_its_recipe(cli, tmp_path, alias, name):
    out = tmp_path / "plan.json"
    assert cli("plan", *JOB, "--nodes", "1", "--precision", name, "--out", str(out))[0] == 0
    d = json.loads(out.read_text())
    d["layout"]["precision"] = alias
    assert plan_from_dict(d).layout == plan_from_dict(json.loads(out.read_text())).layout
    assert plan_from_dict(d).layout.precision == name
