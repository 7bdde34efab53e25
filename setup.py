"""Package discovery for obsmem.

The stages live in top-level folders (retrieval/, pipeline/, indexer/, eval/) so the tree reads as the
data flow, but they install inside the ``obsmem`` namespace (``obsmem.retrieval`` and so on), never as
generic top-level modules. The package list is derived here so a new subpackage is never left out.
"""

from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).parent
STAGES = ("retrieval", "pipeline", "indexer", "eval")


def discover() -> tuple[list[str], dict[str, str]]:
    packages = find_packages(include=["obsmem", "obsmem.*"])
    package_dir = {"obsmem": "obsmem"}
    for stage in STAGES:
        package_dir[f"obsmem.{stage}"] = stage
        packages.append(f"obsmem.{stage}")
        for sub in find_packages(where=stage):
            packages.append(f"obsmem.{stage}.{sub}")
            package_dir[f"obsmem.{stage}.{sub}"] = str(Path(stage, *sub.split(".")))
    return packages, package_dir


packages, package_dir = discover()
setup(packages=packages, package_dir=package_dir)
