"""What `make test` leaves out: each test marked `long` names, in `covered_by`, the cheaper tests
that prove its behaviour, and those exist and are not marked long themselves, so `make test`
(`-m "not long"`) runs them. Read from the test files' syntax, without collecting them."""

import ast

from repo_paths import REPO_ROOT

TESTS = REPO_ROOT / "tests"


def is_mark(node, name) -> bool:
    """Whether `node` is `pytest.mark.<name>` or a call of it."""
    target = node.func if isinstance(node, ast.Call) else node
    return (
        isinstance(target, ast.Attribute)
        and target.attr == name
        and isinstance(target.value, ast.Attribute)
        and target.value.attr == "mark"
    )


def marks_within(nodes, assigned: dict[str, ast.expr]) -> list[ast.expr]:
    """The `long` marks anywhere in `nodes` (decorators, `pytest.param(..., marks=...)`), and in
    the module-level values their names refer to (`assigned`)."""
    seen = [m for node in nodes for m in ast.walk(node)]
    seen += [m for n in seen if isinstance(n, ast.Name) for m in ast.walk(assigned.get(n.id, n))]
    found = [m for m in seen if is_mark(m, "long")]
    called = {id(m.func) for m in found if isinstance(m, ast.Call)}
    return [m for m in found if id(m) not in called]


def long_marks(tree: ast.Module) -> dict[str, tuple[list[ast.expr], list[ast.expr]]]:
    """{test function name: (its `long` marks that leave all of it out, those of some of its
    parameters)}, a module-level `pytestmark` counting for each function."""
    assigned = {
        target.id: node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    module_marks = marks_within([assigned["pytestmark"]] if "pytestmark" in assigned else [], {})
    marks = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            whole = [d for d in node.decorator_list if is_mark(d, "long")]
            some = [m for m in marks_within(node.decorator_list, assigned) if m not in whole]
            marks[node.name] = (module_marks + whole, some)
    return marks


def marks_of_the_suite() -> dict[str, tuple[list[ast.expr], list[ast.expr]]]:
    """{"tests/path.py::test_name": its `long` marks (`long_marks`)} for every test of tests/."""
    marks = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        relative = path.relative_to(REPO_ROOT).as_posix()
        for name, found in long_marks(ast.parse(path.read_text(), str(path))).items():
            marks[f"{relative}::{name}"] = found
    return marks


def covered_by(mark: ast.expr) -> list[str]:
    keywords = {k.arg: k.value for k in mark.keywords} if isinstance(mark, ast.Call) else {}
    value = ast.literal_eval(keywords["covered_by"]) if "covered_by" in keywords else []
    return [value] if isinstance(value, str) else list(value)


def test_each_long_test_names_cheaper_tests_that_make_test_runs():
    marks = marks_of_the_suite()
    long_tests = {test: whole + some for test, (whole, some) in marks.items() if whole + some}
    assert long_tests, "no test is marked long: `make test-long` would run nothing"
    for test, found in long_tests.items():
        for mark in found:
            named = covered_by(mark)
            assert named, f"{test}: its long mark names no cheaper test (covered_by)"
            for cover in named:
                assert cover in marks, f"{test}: covered_by {cover!r} is no test of tests/"
                assert not marks[cover][0], f"{test}: covered_by {cover!r} is marked long too"


def test_marks_are_read_from_decorators_and_pytestmark():
    source = """
import pytest
pytestmark = [pytest.mark.slow, pytest.mark.long(covered_by="tests/a.py::test_b")]
UNCOVERED = [pytest.mark.long]

@pytest.mark.long(covered_by=["tests/a.py::test_c"])
@pytest.mark.parametrize("x", [1, pytest.param(2, marks=UNCOVERED)])
def test_one(x):
    pass

def helper():
    pass
"""
    found = long_marks(ast.parse(source))
    assert list(found) == ["test_one"]
    whole, some = found["test_one"]
    assert [covered_by(m) for m in whole] == [["tests/a.py::test_b"], ["tests/a.py::test_c"]]
    assert [covered_by(m) for m in some] == [[]]
