"""The generic check of config sections, run at load, and the checks other modules share.

A config section (a dataclass of :mod:`robot_rl.config`) declares its own rules:

- a choice key is typed with a ``Literal`` (``critic_agg: CriticAgg = "mean"``);
- a numeric key, or a list of numbers (each element checked), carries its range in its field's metadata,
  written with :func:`bounded` (``lr: float = bounded(3e-4, gt=0)``); one without a range must still be
  finite (and a whole number when typed ``int``);
- its cross-field rules are its ``validate(at)`` method, which returns its problems, each naming its dotted
  key under the prefix ``at`` (``"env.robot."``).

:func:`section_problems` walks a section and every section below it (nested, optional, or the values of a
``dict[str, Section]``) and names each bad dotted key, its value and what is allowed. A value out of range
(``--online.num_actors=0``, ``--offline.gamma=1.5``, a NaN) would otherwise be accepted and hang a run or
make it do nothing. It reads declarations only, so a bad config fails before torch and MuJoCo load.
"""

from __future__ import annotations

import functools
import math
import re
import typing
from collections.abc import Callable, Iterator
from dataclasses import MISSING, Field, dataclass, field, fields, is_dataclass, replace
from typing import Any, Literal

import draccus

RANGE = "range"
"""The field-metadata key of a numeric field's :class:`Range`."""


@dataclass(frozen=True)
class Range:
    """A closed or open interval; ``None`` bounds are unbounded. ``integer`` also requires whole numbers."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False

    def ok(self, value: Any) -> bool:
        """Whether ``value`` is a finite number (an ``int`` when ``integer``) inside the interval."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.integer and not isinstance(value, int):
            return False
        if not math.isfinite(value):
            return False
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            return False
        return self.hi is None or (value < self.hi if self.hi_open else value <= self.hi)

    def __str__(self) -> str:
        kind = "an integer" if self.integer else "a finite number"
        if self.lo is not None and self.hi is not None:
            lo, hi = "(" if self.lo_open else "[", ")" if self.hi_open else "]"
            return f"{kind} in {lo}{_num(self.lo)}, {_num(self.hi)}{hi}"
        if self.lo is not None:
            return f"{kind} {'>' if self.lo_open else '>='} {_num(self.lo)}"
        if self.hi is not None:
            return f"{kind} {'<' if self.hi_open else '<='} {_num(self.hi)}"
        return kind


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def bounded(
    default: Any = MISSING,
    *,
    factory: Callable[[], Any] | None = None,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
) -> Any:
    """A dataclass field (``default``, or ``factory`` for a list) whose number, or each element of whose
    list, must be finite and within the bounds: ``ge``/``gt`` below (>=, >), ``le``/``lt`` above (<=, <);
    none given: any finite number. Whole numbers are required when the field is typed ``int``.

    Raises:
        TypeError: both ``ge`` and ``gt``, or both ``le`` and ``lt``, are given.
    """
    if (ge is not None and gt is not None) or (le is not None and lt is not None):
        raise TypeError("bounded: give at most one lower (ge/gt) and one upper (le/lt) bound")
    rule = Range(
        lo=gt if gt is not None else ge,
        hi=lt if lt is not None else le,
        lo_open=gt is not None,
        hi_open=lt is not None,
    )
    if factory is not None:
        return field(default_factory=factory, metadata={RANGE: rule})
    return field(default=default, metadata={RANGE: rule})


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def literal_choices(hint: Any) -> tuple[Any, ...] | None:
    """The allowed values of a ``Literal[...]`` type hint, or None for any other hint."""
    return typing.get_args(hint) if typing.get_origin(hint) is Literal else None


def _numeric_rule(f: Field, hint: Any) -> Range | None:
    """The range of a field typed ``int``, ``float`` or a list of them (from its metadata; any finite number
    without), whole numbers for ``int``; None for any other field."""
    scalar = typing.get_args(hint)[0] if typing.get_origin(hint) is list else hint
    if scalar not in (int, float):
        return None
    rule = f.metadata.get(RANGE, Range())
    return replace(rule, integer=True) if scalar is int else rule


def _rule_problem(key: str, value: Any, rule: Range) -> list[str]:
    """``["<key>=<value>: must be <rule>"]`` when ``value`` breaks ``rule`` (a list: any element), else []."""
    values = value if isinstance(value, list) else [value]
    if all(rule.ok(v) for v in values):
        return []
    each = "each element " if isinstance(value, list) else ""
    return [f"{key}={value!r}: {each}must be {rule}"]


def section_problems(section: Any, at: str = "") -> list[str]:
    """Every problem of the config dataclass ``section`` and the sections below it, each naming its dotted
    key (prefixed with ``at``, e.g. ``"env.robot."``), its value and the fix: a ``Literal`` key holding
    another value, a number out of its :func:`bounded` range (or not finite), then what the section's
    ``validate(at)`` returns."""
    out: list[str] = []
    hints = _hints(type(section))
    for f in fields(section):
        key, value, hint = f"{at}{f.name}", getattr(section, f.name), hints[f.name]
        allowed = literal_choices(hint)
        rule = _numeric_rule(f, hint)
        if allowed is not None and (isinstance(value, bool) or value not in allowed):
            out.append(f"{key}={value!r}: must be one of {', '.join(str(a) for a in allowed)}")
        elif rule is not None:
            out += _rule_problem(key, value, rule)
        if is_dataclass(value):
            out += section_problems(value, f"{key}.")
        elif isinstance(value, dict):
            for name, sub in value.items():
                if is_dataclass(sub):
                    out += section_problems(sub, f"{key}.{name}.")
    validate = getattr(section, "validate", None)
    if callable(validate):
        out += validate(at)
    return out


def boolean_number_problems(tree: Any, cls: type, at: str = "") -> list[str]:
    """The keys of the raw (YAML or override) ``tree`` of config dataclass ``cls`` and its sections where a
    number, or a list of numbers, is given a boolean (``--bc.steps=true``): decoding would read it as 1 or
    0 and :func:`section_problems` would never see it. Each problem names the dotted key (under ``at``)."""
    if not isinstance(tree, dict):
        return []
    out: list[str] = []
    hints = _hints(cls)
    for f in fields(cls):
        if f.name not in tree:
            continue
        key, value, hint = f"{at}{f.name}", tree[f.name], hints[f.name]
        rule = _numeric_rule(f, hint)
        values = value if isinstance(value, list) else [value]
        if rule is not None and any(isinstance(v, bool) for v in values):
            out.append(f"{key}={value!r}: must be {rule}, not a boolean")
        section = next((h for h in (hint, *typing.get_args(hint)) if is_dataclass(h)), None)
        if section is not None:
            out += boolean_number_problems(value, section, f"{key}.")
    return out


def _hints_below(cls: type, seen: set[type]) -> Iterator[Any]:
    """Every type hint of ``cls``'s fields and of the sections below it (through unions, lists, dicts)."""
    if cls in seen:
        return
    seen.add(cls)
    stack = list(_hints(cls).values())
    while stack:
        hint = stack.pop()
        yield hint
        if is_dataclass(hint):
            yield from _hints_below(hint, seen)
        elif typing.get_origin(hint) is not Literal:
            stack += typing.get_args(hint)


def _choice_decoder(allowed: tuple[Any, ...]) -> Callable[..., Any]:
    def decode(raw: Any, path: Any = ()) -> Any:
        for choice in allowed:
            if (raw == choice and type(raw) is type(choice)) or (isinstance(raw, str) and raw == str(choice)):
                return choice
        return raw  # kept for section_problems to name with every other problem

    return decode


def register_choice_decoders(cls: type) -> None:
    """Make draccus decode every ``Literal`` key of ``cls`` and its sections without checking the choice (the
    value is kept as given; ``"90"`` becomes ``90`` for ``Literal[0, 90]``), so that
    :func:`section_problems` names a wrong choice together with every other problem, in one format. draccus
    below 0.11 cannot decode a ``Literal`` at all; 0.11 stops at the first wrong one."""
    for hint in _hints_below(cls, set()):
        allowed = literal_choices(hint)
        if allowed is not None and draccus.decode.dispatch(hint) is None:
            draccus.decode.register(hint, _choice_decoder(allowed))


_TCP = re.compile(r"^tcp://(?P<host>[^:/\s]+|\[[0-9a-fA-F:.]+\]):(?P<port>\d+|\*)$")


def address_problem(address: str) -> str | None:
    """Why ``address`` is not a ZeroMQ endpoint this project can bind or connect, or None when it is.

    Accepted: ``tcp://HOST:PORT`` (HOST a name, an IPv4 address, ``[IPv6]`` or ``*``; PORT 0-65535 or
    ``*``), ``ipc://PATH`` and ``inproc://NAME``.
    """
    if address.startswith(("ipc://", "inproc://")):
        return None if address.split("://", 1)[1] else "the path after :// is empty"
    match = _TCP.match(address)
    if match is None:
        return "expected tcp://HOST:PORT (e.g. tcp://127.0.0.1:5560), ipc://PATH or inproc://NAME"
    port = match["port"]
    if port != "*" and int(port) > 65535:
        return f"port {port} is out of range 0-65535"
    return None


def controller_host_problem(address: str) -> str | None:
    """Why ``address`` is not a vendor arm controller's host (``192.168.1.10``, ``tcp://`` optional), or
    None when it is: the vendor SDKs (UR, xArm, Franka) use fixed ports, so a port is a mistake."""
    host = address.removeprefix("tcp://").strip()
    if not host or ":" in host or "/" in host:
        return "needs the controller's IP or hostname without a port (e.g. 192.168.1.10)"
    return None


REAL_ROBOT_MAX_SCALE = 0.25
"""The largest joint speed and acceleration scale a vendor arm runs at, and the default on any real robot."""
VENDOR_ARMS = ("ur", "xarm", "franka")
"""Drivers whose ``env.robot.address`` is the controller's host (:func:`controller_host_problem`)."""


def real_robot_problems(robot: Any, moving: bool = True) -> list[str]:
    """Problems of a vendor arm's ``env.robot.safety`` (driver ``so101`` or one of :data:`VENDOR_ARMS`):
    the joint speed and acceleration scales may not exceed :data:`REAL_ROBOT_MAX_SCALE`, and when the arm
    is to be ``moving`` (not only read, as ``hardware check`` without ``--move`` does) the workspace box
    must be given, since a driver's own box is its reach cube."""
    if robot.driver not in ("so101", *VENDOR_ARMS):
        return []
    safety, out = robot.safety, []
    if moving and not (safety.workspace_low and safety.workspace_high):
        out.append(
            f"env.robot.safety.workspace_low/workspace_high: required for env.robot.driver={robot.driver} "
            "(the end-effector box the arm may move in, m in its base frame, e.g. [0.3, -0.3, 0.02] and "
            "[0.7, 0.3, 0.4]); the driver's own box is its reach cube, table included"
        )
    for key in ("velocity_scale", "acceleration_scale"):
        value = getattr(safety, key)
        if value > REAL_ROBOT_MAX_SCALE:
            out.append(
                f"env.robot.safety.{key}={value:g}: at most {REAL_ROBOT_MAX_SCALE:g} on a real "
                f"{robot.driver} arm (0, the default, is {REAL_ROBOT_MAX_SCALE:g})"
            )
    return out


def problems(cfg: Any) -> list[str]:
    """Every problem of ``cfg`` (a :class:`~robot_rl.config.PipelineConfig`), each naming the dotted key,
    its value and the fix."""
    return section_problems(cfg)


def robot_problems(robot: Any) -> list[str]:
    """Problems of ``env.robot`` (a :class:`~robot_rl.config.RobotConfig`), each naming its dotted key."""
    return section_problems(robot, "env.robot.")


def safety_problems(safety: Any) -> list[str]:
    """Problems of ``env.robot.safety`` (a :class:`~robot_rl.config.SafetyConfig`), each naming its key."""
    return section_problems(safety, "env.robot.safety.")


def randomize_problems(randomize: Any) -> list[str]:
    """Problems of ``env.randomize`` (a :class:`~robot_rl.config.RandomizeConfig`), each naming its key."""
    return section_problems(randomize, "env.randomize.")
