"""setuptools' package discovery for robot-rl; pyproject.toml holds everything else.

The design card's top-level folders (docs/design.md §2) are packages of the one import namespace
``robot_rl``: ``robot_rl/`` is ``robot_rl`` and every other top-level package folder ``X/`` (``sim``,
``policies``, ``hardware``, ``teleop``) is ``robot_rl.X``. ``find_packages`` finds them and all their
subpackages, so a new subpackage needs no edit anywhere. Folders without ``__init__.py`` (``tests``,
``benchmarks``, ``docs``, ``launch``, ``configs``, ``testing``: the test support is its own distribution)
are not packages and stay out of the wheel.
"""

from setuptools import find_packages, setup

NAMESPACE = "robot_rl"


def _name(package: str) -> str:
    """The import name of the package found at ``package`` (dotted folder path): ``sim.tasks`` ->
    ``robot_rl.sim.tasks``."""
    return package if package.split(".")[0] == NAMESPACE else f"{NAMESPACE}.{package}"


FOUND = find_packages(exclude=["tests", "tests.*", "benchmarks", "benchmarks.*", "testing", "testing.*"])

setup(
    package_dir={_name(p): p.replace(".", "/") for p in FOUND if "." not in p},
    packages=sorted(_name(p) for p in FOUND),
)
