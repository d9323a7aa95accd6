"""Who acts with which policy: a table of agent-id patterns to module ids.

Both sides must agree which RLModule an agent uses without shipping code, so
the mapping is data: an ordered list of ``[pattern, module_id]`` pairs, first
match wins, patterns in shell style (``*`` any run of characters, ``?`` one,
``[ab]`` one of a set; :func:`fnmatch.fnmatchcase`, case-sensitive)::

    [["runner_*", "runner"], ["chaser_*", "chaser"], ["*", "shared"]]

The runner sends it in ``SET_CONFIG`` (``multi_agent.agent_mapping``) and uses
the same :class:`AgentMapping` as RLlib's ``policy_mapping_fn`` (an instance is
callable with RLlib's ``(agent_id, episode, **kwargs)`` signature and pickles,
so Ray can ship it to every actor).
"""

from __future__ import annotations

import fnmatch
from typing import Any, Iterable, Optional

from .errors import InvalidMessage

__all__ = ["AgentMapping", "UnknownAgent", "MAX_MAPPING_ROWS"]

#: Most rows a mapping table may have.
MAX_MAPPING_ROWS = 256
_MAX_TEXT = 256


class UnknownAgent(InvalidMessage, KeyError):
    """No row of the table matches an agent id."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class AgentMapping:
    """An ordered table of ``(pattern, module_id)``; the first matching pattern names the module.

    Args:
        rows: ``(pattern, module_id)`` pairs, both non-empty strings of at
            most 256 characters, at most :data:`MAX_MAPPING_ROWS` rows.

    Raises:
        InvalidMessage: a row is malformed (also a ``ValueError`` to
            callers building a table by hand).
    """

    __slots__ = ("rows", "_cache")

    def __init__(self, rows: Iterable[Any]) -> None:
        checked = []
        for i, row in enumerate(rows):
            if i >= MAX_MAPPING_ROWS:
                raise MappingError(f"agent_mapping: more than {MAX_MAPPING_ROWS} rows")
            if not isinstance(row, (list, tuple)) or len(row) != 2:
                raise MappingError(f"agent_mapping[{i}]: expected [pattern, module_id], got {row!r:.80}")
            for what, text in zip(("pattern", "module_id"), row):
                if type(text) is not str or not 0 < len(text) <= _MAX_TEXT:
                    raise MappingError(f"agent_mapping[{i}]: {what} must be a string of 1-{_MAX_TEXT} chars")
            checked.append((row[0], row[1]))
        if not checked:
            raise MappingError("agent_mapping: needs at least one row")
        self.rows: tuple[tuple[str, str], ...] = tuple(checked)
        self._cache: dict[str, Optional[str]] = {}

    @property
    def module_ids(self) -> frozenset[str]:
        """Every module the table can name."""
        return frozenset(module for _, module in self.rows)

    def find(self, agent_id: str) -> Optional[str]:
        """The module of ``agent_id``, or ``None`` when no pattern matches."""
        found = self._cache.get(agent_id, False)
        if found is False:
            found = next((module for pattern, module in self.rows if fnmatch.fnmatchcase(agent_id, pattern)), None)
            if len(self._cache) < 65_536:
                self._cache[agent_id] = found
        return found

    def module_for(self, agent_id: str) -> str:
        """The module of ``agent_id``.

        Raises:
            UnknownAgent: no pattern matches.
        """
        found = self.find(agent_id)
        if found is None:
            patterns = ", ".join(pattern for pattern, _ in self.rows[:8])
            raise UnknownAgent(f"agent {agent_id!r:.80}: no pattern of the agent mapping matches it ({patterns})")
        return found

    def __call__(self, agent_id: Any, episode: Any = None, **kwargs: Any) -> str:
        """RLlib's ``policy_mapping_fn(agent_id, episode, **kwargs)``."""
        return self.module_for(str(agent_id))

    def to_wire(self) -> list[list[str]]:
        """The table as ``SET_CONFIG`` carries it."""
        return [[pattern, module] for pattern, module in self.rows]

    @classmethod
    def from_wire(cls, raw: Any) -> "AgentMapping":
        """Read a table a peer sent.

        Raises:
            InvalidMessage: not a non-empty list of ``[pattern, module_id]`` pairs.
        """
        if not isinstance(raw, list):
            raise MappingError(f"agent_mapping must be a list of [pattern, module_id], got {type(raw).__name__}")
        return cls(raw)

    def __getstate__(self) -> tuple:
        return self.rows

    def __setstate__(self, rows: tuple) -> None:
        self.rows = rows
        self._cache = {}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AgentMapping) and other.rows == self.rows

    def __hash__(self) -> int:
        return hash(self.rows)

    def __repr__(self) -> str:
        return f"AgentMapping({list(self.rows)!r})"


class MappingError(InvalidMessage, ValueError):
    """A mapping table is malformed."""
