"""Safe YAML loading that keeps line numbers, so every profile error can name its file, line and key.

Only plain data is built (PyYAML's SafeLoader: no tags that construct objects, nothing executed). Mappings
come back as ``LineDict`` and sequences as ``LineList``; both know their own line and each key's or item's
line. A duplicate key is an error (plain PyYAML would silently keep the last one), and so are anchors and
aliases, nesting deeper than ``MAX_YAML_DEPTH`` and files over ``MAX_PROFILE_BYTES``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from abi.errors import ProfileError, excerpt


class LineDict(dict):
    """A mapping from YAML: ``line`` is where it starts, ``lines[key]`` where each key is written (1-based)."""

    line: int = 0
    lines: dict[Any, int]


class LineList(list):
    """A sequence from YAML: ``line`` is where it starts, ``lines[i]`` where item i is written (1-based)."""

    line: int = 0
    lines: list[int]


# a profile is a few KiB, a few levels deep: anything far beyond is refused before it is built
MAX_PROFILE_BYTES = 1 << 20
MAX_YAML_DEPTH = 32


class LineLoader(yaml.SafeLoader):
    """SafeLoader that builds LineDict / LineList, rejects duplicate keys, nesting deeper than MAX_YAML_DEPTH
    (checked while composing, before Python's recursion limit is near) and aliases (one ``*a`` could make the
    checks walk an exponentially large tree)."""

    depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(None, None, "anchors and aliases are not allowed in a profile",
                                              self.peek_event().start_mark)
        if self.depth >= MAX_YAML_DEPTH:
            raise yaml.composer.ComposerError(None, None, f"nesting expected at most MAX_YAML_DEPTH={MAX_YAML_DEPTH}"
                                              " levels, got deeper", self.peek_event().start_mark)
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _construct_map(loader: LineLoader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    out = LineDict()
    out.line, out.lines = node.start_mark.line + 1, {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(None, None, "a mapping key must be a scalar",
                                                    key_node.start_mark) from None
        if key in out:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        out[key] = loader.construct_object(value_node, deep=True)
        out.lines[key] = key_node.start_mark.line + 1
    return out


def _construct_seq(loader: LineLoader, node: yaml.SequenceNode) -> LineList:
    out = LineList(loader.construct_object(child, deep=True) for child in node.value)
    out.line, out.lines = node.start_mark.line + 1, [child.start_mark.line + 1 for child in node.value]
    return out


LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_map)
LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_seq)


def load_yaml(path: Path) -> Any:
    """Parse ``path`` into LineDict / LineList / scalars; syntax errors become ProfileError with the line."""
    try:
        size = path.stat().st_size
        if size > MAX_PROFILE_BYTES:
            raise ProfileError(str(path), 0, "", f"size expected <= MAX_PROFILE_BYTES={MAX_PROFILE_BYTES} bytes, "
                                                 f"got {size}")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ProfileError(str(path), 0, "", f"cannot read the file ({excerpt(str(e))})") from None
    try:
        return yaml.load(text, Loader=LineLoader)  # noqa: S506 - LineLoader is a SafeLoader subclass
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else 0
        raise ProfileError(str(path), line, "", f"invalid YAML: {excerpt(str(e.problem or e.context))}") from None
    except (yaml.YAMLError, ValueError, RecursionError) as e:  # ValueError: int() of a 5,000-digit scalar
        raise ProfileError(str(path), 0, "", f"invalid YAML: {excerpt(str(e))}") from None


def line_of(container: Any, key: Any) -> int:
    """The line of ``key`` inside a LineDict / LineList (the container's own line if unknown, else 0)."""
    if isinstance(container, LineDict):
        return container.lines.get(key, container.line)
    if isinstance(container, LineList):
        return container.lines[key] if isinstance(key, int) and 0 <= key < len(container.lines) else container.line
    return 0
