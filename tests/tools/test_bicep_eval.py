"""tools/bicep_eval on small templates written here: the evaluator's semantics (operators, strings,
lambdas, user-defined and imported functions, decorators, fail()), the checks, and ARM's own
limits (expression length, properties a second deployment may not change). tests/infra uses the
package on infra/; these tests hold the package to what it claims, whatever the templates say."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import bicep_eval as bicep
import pytest
from bicep_eval import BicepFail, Evaluator, ParamRejected, Unsupported


def write(tmp_path: Path, source: str, name: str = "main.bicep") -> Path:
    path = tmp_path / name
    path.write_text(source)
    return path


def value(tmp_path: Path, expression: str, params: str = "", given: dict | None = None):
    path = write(tmp_path, f"{params}\nvar x = {expression}\n")
    return Evaluator(path, given).var("x")


@pytest.mark.parametrize(
    "expression,expected",
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("10 - 4 - 3", 3),  # left-associative
        ("7 / 2", 3),  # integer division
        ("true || false && false", True),
        ("!false && true", True),
        ("1 < 2 == true", True),
        ("'A' =~ 'a'", True),
        ("'A' !~ 'a'", False),
        ("null ?? 'fallback'", "fallback"),
        ("true ? 'yes' : 'no'", "yes"),
        ("{a: {b: 'deep'}}.a.b", "deep"),
        ("{Name: 1}.name", 1),  # ARM property names are case-insensitive
        ("[10, 20, 30][1]", 20),
        ("{a: null}.?a.?b", None),
    ],
)
def test_operators_and_access(tmp_path, expression, expected):
    assert value(tmp_path, expression) == expected


def test_member_access_binds_tighter_than_operators(tmp_path):
    """tree-sitter-bicep groups ``o.a || o.b`` as ``(o.a || o).b``; the evaluator regroups."""
    params = "param o object = {a: false, b: true}"
    assert value(tmp_path, "o.a || o.b", params) is True
    assert value(tmp_path, "!o.a", params) is True


def test_strings_escapes_and_interpolation(tmp_path):
    assert value(tmp_path, r"'it\'s ${1 + 1} \$x\n'") == "it's 2 $x\n"
    assert value(tmp_path, "'''\nraw ${not}\n'''") == "raw ${not}\n"


def test_lambdas(tmp_path):
    assert value(tmp_path, "map([1, 2], n => n * 10)") == [10, 20]
    assert value(tmp_path, "filter(['a', '', 'b'], s => !empty(s))") == ["a", "b"]
    assert value(tmp_path, "toObject(['x', 'y'], k => k, k => toUpper(k))") == {"x": "X", "y": "Y"}
    # a lambda whose body starts with member access (the parser's left spine)
    assert value(tmp_path, "filter([{v: 1}, {v: 2}], o => o.v != 1)") == [{"v": 2}]


def test_arm_functions(tmp_path):
    assert value(tmp_path, "string({a: [1, true]})") == '{"a":[1,true]}'
    assert value(tmp_path, "base64('hi')") == base64.b64encode(b"hi").decode()
    assert value(tmp_path, "union({a: {b: 1}}, {a: {c: 2}})") == {"a": {"b": 1, "c": 2}}
    assert value(tmp_path, "format('{0}-{1}{{x}}', 'a', 2)") == "a-2{x}"
    assert value(tmp_path, "split('a/b/c', '/')[2]") == "c"
    assert value(tmp_path, "flatten([[1, 2], [], [3]])") == [1, 2, 3]
    # blanks right before an interpolation are text (the parser puts them inside its node)
    assert value(tmp_path, "' ${'a'}'") == " a"
    assert value(tmp_path, "'x  ${'a'} ${'b'}'") == "x  a b"
    assert value(tmp_path, "'${'a'} '") == "a "
    assert value(tmp_path, "take('abcdef', 3)") == "abc"
    assert value(tmp_path, "startsWith('HTTPS://x', 'https://')") is True
    with pytest.raises(Unsupported, match="function notAFunction"):
        value(tmp_path, "notAFunction(1)")


def test_guid_and_unique_string_are_deterministic_and_case_sensitive(tmp_path):
    a = value(tmp_path, "guid('/Subscriptions/X', 'k')")
    assert a == value(tmp_path, "guid('/Subscriptions/X', 'k')")
    assert a != value(tmp_path, "guid('/subscriptions/x', 'k')")
    assert len(value(tmp_path, "uniqueString('rg')")) == 13


def test_parameters_defaults_and_decorators(tmp_path):
    path = write(
        tmp_path,
        "@minValue(1)\n@maxValue(3)\nparam n int = 2\n"
        "@allowed(['a', 'b'])\nparam s string = 'a'\n"
        "@maxLength(2)\nparam ids array = []\nparam opt int?\n"
        "var x = [n, s, ids, opt]\n",
    )
    assert Evaluator(path).var("x") == [2, "a", [], None]
    assert Evaluator(path, {"n": 3, "ids": ["1", "2"]}).var("x")[0] == 3
    for given in ({"n": 4}, {"s": "c"}, {"ids": ["1", "2", "3"]}):
        with pytest.raises(ParamRejected):
            Evaluator(path, given).var("x")
    with pytest.raises(Unsupported, match="no parameter"):
        Evaluator(path, {"nope": 1})


def test_user_defined_and_imported_functions_and_fail(tmp_path):
    write(
        tmp_path,
        "@export()\nfunc twice(n int) int => n * 2\n"
        "@export()\nfunc positive(n int) int => n > 0 ? n : fail('n must be positive, got ${n}')\n",
        "lib.bicep",
    )
    path = write(
        tmp_path,
        "import { twice, positive } from 'lib.bicep'\n"
        "import * as lib from 'lib.bicep'\n"
        "func local(s string) string => '<${s}>'\n"
        "param n int = 2\nvar x = [twice(n), lib.twice(3), local('a')]\n"
        "var bad = positive(-1)\n",
    )
    e = Evaluator(path)
    assert e.var("x") == [4, 6, "<a>"]
    assert e.call("local", "b") == "<b>"
    with pytest.raises(BicepFail, match="n must be positive, got -1"):
        e.var("bad")


def test_a_function_sees_only_its_parameters(tmp_path):
    path = write(
        tmp_path, "param p string = 'x'\nfunc f(s string) string => '${s}${p}'\nvar x = f('a')\n"
    )
    with pytest.raises(Unsupported, match="cannot use 'p'"):
        Evaluator(path).var("x")


def test_resources_loops_and_load_functions(tmp_path):
    (tmp_path / "data.json").write_text('{"k": "v"}')
    path = write(
        tmp_path,
        "param names array = ['a', 'b']\n"
        "var data = loadJsonContent('data.json')\n"
        "resource r 'Microsoft.Storage/storageAccounts@2023-05-01' = [for (n, i) in names: {\n"
        "  name: '${n}${i}${data.k}'\n}]\n",
    )
    e = Evaluator(path)
    assert e.resource("r", "name", loop={"n": "a", "i": 0}) == "a0v"
    assert e.resource("r", "missing", loop={"n": "a", "i": 0}) is None


def test_unknown_names_need_symbols(tmp_path):
    path = write(tmp_path, "var x = someResource.properties.id\n")
    with pytest.raises(Unsupported, match="someResource"):
        Evaluator(path).var("x")
    assert Evaluator(path, symbols={"someResource": {"properties": {"id": "/x"}}}).var("x") == "/x"


# --- the checks -----------------------------------------------------------------------------------


def test_checks_find_unknown_properties_and_undeclared_names(tmp_path):
    path = write(
        tmp_path,
        "resource id 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {\n"
        "  name: nope\n  location: 'x'\n  propertiez: {}\n}\n",
    )
    problems = bicep.check_file(path)
    assert any("propertiez is not a property" in p for p in problems), problems
    assert any("'nope' is not declared" in p for p in problems), problems


# --- ARM's limits ---------------------------------------------------------------------------------


def test_expression_length_counts_loaded_files_inside_expressions_only(tmp_path):
    (tmp_path / "big.txt").write_text("it's " + "x" * 1000)
    path = write(
        tmp_path,
        "param p string = 'a'\n"
        "var alone = loadTextContent('big.txt')\n"
        "var inside = replace(loadTextContent('big.txt'), 'x', p)\n"
        "var viaVariable = replace(alone, 'x', p)\n",
    )
    assert bicep.expression_length(path, "alone") == 0  # a plain JSON string, not an expression
    inside = bicep.expression_length(path, "inside")
    # the file as an ARM literal (quote doubled) plus the call around it
    assert 1000 + 6 + 2 < inside < 1000 + 80
    assert bicep.expression_length(path, "viaVariable") < 60
    assert json.loads(json.dumps(inside)) == inside


def test_immutable_changes_name_the_vm_properties_azure_refuses(tmp_path):
    path = write(
        tmp_path,
        "param data string\nresource vm 'Microsoft.Compute/virtualMachines@2024-07-01' = {\n"
        "  name: 'vm'\n  location: 'x'\n  properties: {\n    osProfile: {\n"
        "      computerName: 'vm'\n      customData: base64(data)\n    }\n  }\n}\n",
    )
    same = bicep.immutable_changes(Evaluator(path, {"data": "a"}), Evaluator(path, {"data": "a"}))
    assert same == []
    changed = bicep.immutable_changes(
        Evaluator(path, {"data": "a"}), Evaluator(path, {"data": "b"})
    )
    assert [c.path for c in changed] == [("properties", "osProfile", "customData")]
    assert "PropertyChangeNotAllowed" in str(changed[0])


def test_conditional_resources_are_read_with_the_non_null_assertion(tmp_path):
    """Bicep 0.36 and later warn (BCP318) on a property of a conditional resource or module
    read without ``!`` or ``.?``: the check finds those, and only those."""
    path = write(
        tmp_path,
        "param on bool = false\n"
        "resource id 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = if (on) {\n"
        "  name: 'x'\n  location: 'x'\n}\n"
        "output bad string = on ? id.properties.clientId : ''\n"
        "output good string = on ? id!.properties.clientId : ''\n"
        "output safe string = id.?properties.clientId ?? ''\n",
    )
    problems = bicep.conditional_accesses(bicep.parse(path.read_bytes()))
    assert len(problems) == 1 and "id.properties" in problems[0] and "BCP318" in problems[0]
