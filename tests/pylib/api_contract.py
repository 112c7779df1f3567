"""Checks HTTP responses of the scheduler against its OpenAPI description (api/openapi.yaml).

The shared HTTP helpers of the Python suites (tests/integration/harness.py, tests/ha/ha_cluster.py)
pass every response they receive to check_response(), so each suite also tests that the server
answers as described: the schema is chosen by method, path template and status.

    check_response("GET", "/api/v1/tasks/task-1", 200, "application/json", body_bytes)

raises ContractViolation (an AssertionError) naming the operation and what does not match:
  * a path the description does not have must answer 404 with the error object;
  * a described path asked with a method it does not describe must answer 405
    method_not_allowed;
  * a described operation must answer one of its described statuses, with the described content
    type, and a JSON body valid against the described schema (arrays over ARRAY_SAMPLE items
    are checked on their first and last items).

Needs python3-yaml and python3-jsonschema (scripts/install-deps.sh). Without them the check is
off on a developer machine (a note on stderr, once) and an error under CI=true.
"""

import json
import os
import re
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DESCRIPTION = os.path.join(REPO, "api", "openapi.yaml")
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


class ContractViolation(AssertionError):
    """A response that the description does not allow."""


def missing_modules():
    """The names of the Python modules the check needs that are not installed."""
    missing = []
    for name in ("yaml", "jsonschema"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    return missing


def load_description(path=DESCRIPTION):
    """The description as Python objects."""
    import yaml
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def template_regex(template):
    """A regex matching the concrete paths of an OpenAPI path template."""
    parts = re.split(r"(\{[^}/]+\})", template)
    return re.compile("^" + "".join("[^/]+" if p.startswith("{") else re.escape(p)
                                    for p in parts if p) + "$")


def described_routes(doc):
    """{(METHOD, path template)} of the description."""
    return {(m.upper(), p) for p, item in doc["paths"].items() for m in item if m in METHODS}


class Contract:
    """The description, ready to check responses."""

    def __init__(self, doc):
        import jsonschema
        self.doc = doc
        self._jsonschema = jsonschema
        # Exact paths first, so that /api/v1/tasks never falls to a template.
        self.templates = sorted(((template_regex(p), p) for p in doc["paths"]),
                                key=lambda t: "{" in t[1])
        self._validators = {}

    def _resolve(self, node):
        while isinstance(node, dict) and "$ref" in node:
            node = self._pointer(node["$ref"])
        return node

    def _pointer(self, ref):
        if not ref.startswith("#/"):
            raise ContractViolation("only local references are supported: %s" % ref)
        node = self.doc
        for part in ref[2:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def inline(self, schema):
        """`schema` with every local $ref replaced by what it refers to (the description has no
        recursive schemas), so that validation needs no reference lookups, which are slow."""
        if isinstance(schema, list):
            return [self.inline(x) for x in schema]
        if not isinstance(schema, dict):
            return schema
        if "$ref" in schema:
            target = self.inline(self._pointer(schema["$ref"]))
            rest = {k: self.inline(v) for k, v in schema.items() if k != "$ref"}
            return dict(rest, allOf=[target]) if rest else target
        return {k: self.inline(v) for k, v in schema.items()}

    def _validator(self, key, schema):
        v = self._validators.get(key)
        if v is None:
            root = self.inline(schema)
            cls = self._jsonschema.Draft202012Validator
            cls.check_schema(root)
            v = self._validators[key] = cls(root)
        return v

    def template_of(self, path):
        for regex, template in self.templates:
            if regex.match(path):
                return template
        return None

    def error_schema(self, name):
        return {"$ref": "#/components/schemas/" + name}

    def check(self, method, path, status, content_type, body):
        """Raises ContractViolation when the response is not as described."""
        method = method.upper()
        path = path.split("?", 1)[0]
        template = self.template_of(path)
        where = "%s %s -> %d" % (method, path, status)
        if template is None:
            return self._check_error(where, status, 404, "NotFoundError", content_type, body)
        item = self.doc["paths"][template]
        op = item.get(method.lower())
        if op is None:
            return self._check_error(where, status, 405, "MethodNotAllowedError", content_type,
                                     body)
        where = "%s %s (%s %s) -> %d" % (method, path, method, template, status)
        responses = op.get("responses", {})
        response = responses.get(str(status))
        if response is None:
            raise ContractViolation("%s: status %d is not described (described: %s); body %r"
                                    % (where, status, ", ".join(sorted(responses)), body[:300]))
        response = self._resolve(response)
        content = response.get("content")
        if not content:
            if body:
                raise ContractViolation("%s: described without a body, got %r" % (where,
                                                                                  body[:300]))
            return
        media = (content_type or "").split(";", 1)[0].strip().lower()
        if media not in content:
            raise ContractViolation("%s: Content-Type %r is not described (described: %s)"
                                    % (where, content_type, ", ".join(sorted(content))))
        if media != "application/json":
            return
        schema = content[media].get("schema")
        if schema is None:
            return
        self._validate(where, (method, template, status, media), schema, body)

    def _check_error(self, where, status, expected, schema_name, content_type, body):
        if status != expected:
            raise ContractViolation("%s: not a described operation, so the answer must be %d, "
                                    "got %d with %r" % (where, expected, status, body[:300]))
        media = (content_type or "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            raise ContractViolation("%s: an error must be application/json, got %r"
                                    % (where, content_type))
        self._validate(where, schema_name, self.error_schema(schema_name), body)

    def _validate(self, where, key, schema, body):
        try:
            doc = json.loads(body.decode("utf-8") if isinstance(body, bytes) else body)
        except (ValueError, UnicodeDecodeError) as e:
            raise ContractViolation("%s: the body is not JSON (%s): %r" % (where, e, body[:300]))
        errors = sorted(self._validator(key, schema).iter_errors(bounded(doc)),
                        key=lambda e: e.path)
        if errors:
            lines = ["%s: the body does not match the description:" % where]
            for e in errors[:5]:
                lines.append("  at /%s: %s" % ("/".join(str(p) for p in e.absolute_path),
                                               e.message))
            lines.append("  body: %s" % json.dumps(doc)[:600])
            raise ContractViolation("\n".join(lines))


# Arrays longer than this are checked on their first and last ARRAY_SAMPLE // 2 items: every item
# of a listing comes from the same code, and validating thousands of tasks per page (about a
# millisecond each) would slow the suites that list whole queues to a crawl.
ARRAY_SAMPLE = 50


def bounded(doc):
    """`doc` with every array over ARRAY_SAMPLE items cut to its first and last halves of it."""
    if isinstance(doc, list):
        if len(doc) > ARRAY_SAMPLE:
            half = ARRAY_SAMPLE // 2
            doc = doc[:half] + doc[-half:]
        return [bounded(x) for x in doc]
    if isinstance(doc, dict):
        return {k: bounded(v) for k, v in doc.items()}
    return doc


_contract = None
_disabled_noted = False


def _on_ci():
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def contract():
    """The shared Contract for api/openapi.yaml, or None when the modules it needs are missing
    on a developer machine (under CI=true that raises ContractViolation instead)."""
    global _contract, _disabled_noted
    if _contract is not None:
        return _contract
    missing = missing_modules()
    if missing:
        if _on_ci():
            raise ContractViolation("responses cannot be checked against api/openapi.yaml: "
                                    "python modules missing: %s (CI=true: every declared "
                                    "dependency must be installed)" % ", ".join(missing))
        if not _disabled_noted:
            sys.stderr.write("api_contract: python modules missing (%s): responses are not "
                             "checked against api/openapi.yaml\n" % ", ".join(missing))
            _disabled_noted = True
        return None
    _contract = Contract(load_description())
    return _contract


def check_response(method, path, status, content_type, body):
    """Checks one response against the description (see the module's docstring)."""
    c = contract()
    if c is not None:
        c.check(method, path, status, content_type, body or b"")
