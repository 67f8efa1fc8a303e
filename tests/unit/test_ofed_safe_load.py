"""``ofed-safe-load``: it sets the safe-load annotation on its Node, waits while the annotation is there,
exits once the upgrade controller removed it (the key the controller's plan clears), and fails when
stopped first or without its Node. No sleeping: the context's ``sleep`` is the test's step function."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpu_operator.agents.ofed import safeload
from gpu_operator.agents.ofed.safeload import ANNOTATION, SafeLoadError
from gpu_operator.gpu.null import NullBackend
from gpu_operator.names.keys import upgrade_keys
from tests.unit.fake_context import FakeContext, FakeNode


@dataclass
class AnnotatedNode(FakeNode):
    notes: dict[str, str] = field(default_factory=dict)
    reads: int = 0
    remove_after: int | None = None  # the controller removes the annotation after this many reads
    key: str = ANNOTATION

    async def annotations(self) -> dict[str, str]:
        self.reads += 1
        if self.remove_after is not None and self.reads > self.remove_after:
            self.notes.pop(self.key, None)
        return dict(self.notes)

    async def patch_annotations(self, changes: Mapping[str, str | None]) -> None:
        self.patches += 1
        for key, value in changes.items():
            if value is None:
                self.notes.pop(key, None)
            else:
                self.notes[key] = value


def _ctx(tmp_path: Path, node: FakeNode | None, *, stop_after: int = 1000, **env: str) -> FakeContext:
    ctx = FakeContext(root=tmp_path, gpu=NullBackend(reason="no GPU"), env=dict(env), stop_after=stop_after)
    ctx.node = node
    return ctx


def test_the_annotation_is_the_upgrade_controllers_safe_load_key() -> None:
    assert ANNOTATION == "nvidia.com/ofed-driver-upgrade.driver-wait-for-safe-load"
    assert upgrade_keys("ofed").safe_load == ANNOTATION


def test_sets_the_annotation_and_waits_until_it_is_removed(tmp_path: Path) -> None:
    node = AnnotatedNode(remove_after=3)
    ctx = _ctx(tmp_path, node)
    asyncio.run(safeload.main(ctx))
    assert node.patches == 1
    assert node.reads == 4  # three reads saw "true", the fourth found it gone
    assert ANNOTATION not in node.notes
    assert ctx.stop_after == 1000 - 3  # one poll between reads


def test_the_value_it_sets_is_true(tmp_path: Path) -> None:
    node = AnnotatedNode(remove_after=1)
    seen: list[dict[str, str]] = []
    original = node.annotations

    async def spy() -> dict[str, str]:
        seen.append(await original())
        return seen[-1]

    node.annotations = spy  # type: ignore[method-assign]
    asyncio.run(safeload.main(_ctx(tmp_path, node)))
    assert seen[0] == {ANNOTATION: "true"}


def test_an_empty_value_counts_as_removed(tmp_path: Path) -> None:
    node = AnnotatedNode()

    async def patch(changes: Mapping[str, str | None]) -> None:
        node.notes[ANNOTATION] = ""

    node.patch_annotations = patch  # type: ignore[method-assign]
    asyncio.run(safeload.main(_ctx(tmp_path, node)))
    assert node.reads == 1


def test_stopped_while_waiting_is_an_error(tmp_path: Path) -> None:
    node = AnnotatedNode()
    with pytest.raises(SafeLoadError, match="stopped while waiting"):
        asyncio.run(safeload.main(_ctx(tmp_path, node, stop_after=2)))
    assert node.notes == {ANNOTATION: "true"}


def test_another_annotation_and_poll_from_the_environment(tmp_path: Path) -> None:
    node = AnnotatedNode(remove_after=1, key="example.com/wait")
    ctx = _ctx(tmp_path, node, SAFE_LOAD_ANNOTATION="example.com/wait", SAFE_LOAD_POLL_SECONDS="0.5")
    slept: list[float | None] = []

    async def sleep(seconds: float | None) -> bool:
        slept.append(seconds)
        return False

    ctx.sleep = sleep  # type: ignore[method-assign]
    asyncio.run(safeload.main(ctx))
    assert node.patches == 1
    assert node.notes == {}
    assert slept == [0.5]


def test_bad_poll_seconds_name_the_variable(tmp_path: Path) -> None:
    with pytest.raises(SafeLoadError, match='SAFE_LOAD_POLL_SECONDS: "soon" is not a duration'):
        asyncio.run(safeload.main(_ctx(tmp_path, AnnotatedNode(), SAFE_LOAD_POLL_SECONDS="soon")))
    with pytest.raises(SafeLoadError, match="from 100ms to 5m"):
        asyncio.run(safeload.main(_ctx(tmp_path, AnnotatedNode(), SAFE_LOAD_POLL_SECONDS="0")))


def test_without_node_access_it_fails(tmp_path: Path) -> None:
    with pytest.raises(SafeLoadError, match="needs its Node"):
        asyncio.run(safeload.main(_ctx(tmp_path, None)))
    with pytest.raises(SafeLoadError, match="needs its Node"):
        asyncio.run(safeload.main(_ctx(tmp_path, FakeNode())))  # labels only
