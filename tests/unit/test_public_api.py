"""The package's public surface: each package's names are exactly its `__all__`, they resolve lazily,
type checkers see the same names, and everything else is private (underscored)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import shardline

LIBRARY = Path(shardline.__file__).resolve().parent
PACKAGES = sorted(
    f"shardline.{path.parent.name}"
    for path in LIBRARY.glob("*/__init__.py")
    if path.parent.name != "__pycache__"
)
PUBLIC_MODULES = ["shardline.errors", "shardline.protocols"]


def _type_checking_names(package: str) -> dict[str, str]:
    """{name: module} of the `if TYPE_CHECKING:` re-exports in a package's __init__."""
    tree = ast.parse((LIBRARY / package.split(".")[1] / "__init__.py").read_text())
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom) and statement.module is not None
                for alias in statement.names:
                    assert alias.asname == alias.name, f"{package}: re-export {alias.name} as itself"
                    names[alias.name] = statement.module
    return names


def test_the_architecture_packages_exist() -> None:
    expected = {"aws_lambda", "cdk", "consumer", "kinesis", "kpl", "producer", "testing"}
    assert {name.split(".")[1] for name in PACKAGES} == expected


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_resolves_from_the_module_that_defines_it(package: str) -> None:
    module = importlib.import_module(package)
    exports: dict[str, str] = module._EXPORTS
    assert sorted(module.__all__) == sorted(exports)
    for name, source in exports.items():
        source_module = importlib.import_module(source if "." in source else f"{package}.{source}")
        assert getattr(module, name) is getattr(source_module, name), f"{package}.{name}"
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        module.Nope  # noqa: B018 - the lookup itself is the test


@pytest.mark.parametrize("package", [p for p in PACKAGES if p != "shardline.aws_lambda"])
def test_type_checkers_see_the_same_names_as_the_runtime(package: str) -> None:
    module = importlib.import_module(package)
    seen = _type_checking_names(package)
    assert set(seen) == set(module._EXPORTS)
    for name, source in module._EXPORTS.items():
        assert seen[name] == (source if "." in source else f"{package}.{source}"), name


@pytest.mark.parametrize("package", PACKAGES)
def test_modules_inside_a_package_are_private(package: str) -> None:
    folder = LIBRARY / package.split(".")[1]
    public = [path.name for path in folder.glob("*.py") if not path.name.startswith("_")]
    assert public == [], f"{package}: modules without a leading underscore: {public}"


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_public_modules_declare_all_and_define_every_name(name: str) -> None:
    module = importlib.import_module(name)
    for public in module.__all__:
        assert hasattr(module, public), f"{name}.{public}"
    defined = {n for n, v in vars(module).items() if callable(v) and getattr(v, "__module__", None) == name}
    assert {n for n in defined if not n.startswith("_")} <= set(module.__all__), (
        f"{name}: public, not in __all__"
    )


def test_every_exception_is_a_shardline_error() -> None:
    import shardline.errors as errors

    classes = [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, BaseException)]
    assert len(classes) >= 8
    assert all(issubclass(cls, errors.ShardlineError) for cls in classes)
    for cls in (errors.ConfigurationError, errors.InvalidRecord, errors.AggregationError, errors.EventError):
        assert issubclass(cls, ValueError), f"{cls.__name__} stays a ValueError for existing callers"


def test_importing_the_producer_loads_no_consumer_lambda_or_powertools_code() -> None:
    code = (
        "import sys; from shardline.producer import Producer, ProducerConfig, UserRecord; "
        "print(sorted(m for m in sys.modules if m.startswith(('shardline.', 'aws_lambda_powertools'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(LIBRARY.parent)},
    ).stdout
    loaded = ast.literal_eval(out)
    assert not [
        m for m in loaded if m.startswith(("shardline.consumer", "shardline.aws_lambda", "aws_lambda"))
    ]
    assert "shardline.producer._producer" in loaded


def test_the_testing_package_offers_an_in_memory_kinesis_for_producers() -> None:
    import shardline.testing as testing

    assert {"InMemoryKinesis", "Fault", "StoredRecord"} <= set(testing.__all__)
    assert testing.InMemoryKinesis.__module__ == "shardline.testing._kinesis"
