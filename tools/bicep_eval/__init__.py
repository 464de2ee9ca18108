"""Offline Bicep: parse the templates (tree-sitter-bicep), check resource bodies against Azure's
type data, and evaluate expressions with ARM's semantics, so tests can ask what a deployment
would produce without a Bicep compiler or an Azure subscription.

- ``syntax``: parsing, literals, declarations, decorators, ``load*()`` calls;
- ``azure_types``: resource bodies against ``../shared/azure-types`` (``BICEP_EVAL_TYPES``);
- ``checks``: whole files (modules, loaded files, imports, undeclared names);
- ``evaluator``, ``functions``: parameters, variables, user-defined and imported functions,
  loops, lambdas, ``fail()``, with ARM's functions;
- ``arm``: what ARM itself limits or refuses (expression length, properties that cannot change).

Its own tests are ``tests/tools/test_bicep_eval.py``; ``tests/infra`` uses it on ``infra/``.
"""

from .arm import MAX_EXPRESSION, expression_length, expressions, immutable_changes
from .azure_types import Finding, check_resource, is_typed, known_versions, resource_body_type
from .checks import (
    check_file,
    check_source,
    conditional_accesses,
    is_reference,
    undefined_names,
    untyped,
)
from .evaluator import BicepFail, Evaluator, ParamRejected, Unsupported
from .syntax import (
    Expression,
    Loaded,
    Resource,
    decorator_map,
    literal_value,
    load_calls,
    object_properties,
    outputs,
    params,
    parse,
    pos,
    property_key,
    property_value,
    resources,
    string_value,
    syntax_problems,
    text,
    variables,
)

__all__ = [
    "MAX_EXPRESSION",
    "BicepFail",
    "Evaluator",
    "Expression",
    "Finding",
    "Loaded",
    "ParamRejected",
    "Resource",
    "Unsupported",
    "check_file",
    "check_resource",
    "check_source",
    "conditional_accesses",
    "decorator_map",
    "expression_length",
    "expressions",
    "immutable_changes",
    "is_reference",
    "is_typed",
    "known_versions",
    "literal_value",
    "load_calls",
    "object_properties",
    "outputs",
    "params",
    "parse",
    "pos",
    "property_key",
    "property_value",
    "resource_body_type",
    "resources",
    "string_value",
    "syntax_problems",
    "text",
    "undefined_names",
    "untyped",
    "variables",
]
