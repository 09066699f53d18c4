"""ZarrReplayBuffer: append, reopen, spec checks, and SIGKILL durability with a real subprocess."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import zarr

from robot_rl import keys
from robot_rl.data.errors import DatasetError
from robot_rl.data.replay import ZarrReplayBuffer
from robot_rl.data.training.sampler import ChunkSampler

SPEC = {
    keys.STATE: ((3,), np.float32),
    keys.ACTION: ((2,), np.float32),
    keys.REWARD: ((), np.float32),
    keys.DONE: ((), np.bool_),
    keys.INTERVENTION: ((), np.bool_),
}


def episode(length: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        keys.STATE: np.full((length, 3), seed, np.float32) + np.arange(length, dtype=np.float32)[:, None],
        keys.ACTION: rng.normal(size=(length, 2)).astype(np.float32),
        keys.REWARD: rng.uniform(size=length).astype(np.float32),
        keys.DONE: np.arange(length) == length - 1,
        keys.INTERVENTION: rng.uniform(size=length) < 0.5,
    }


def test_append_reopen_and_sample(tmp_path: Path) -> None:
    buf = ZarrReplayBuffer(tmp_path / "rb", SPEC, chunk_frames=4)
    eps = [episode(n, i) for i, n in enumerate((3, 6, 2))]
    for i, ep in enumerate(eps):
        assert buf.add_episode(ep, source=["demo", "online", "intervention"][i]) == i
    assert len(buf) == 11 and buf.num_episodes == 3
    buf = ZarrReplayBuffer(tmp_path / "rb")  # reopen without a spec
    assert len(buf) == 11 and buf.num_episodes == 3
    np.testing.assert_array_equal(buf.episode_ends, [3, 9, 11])
    np.testing.assert_array_equal(buf.episode_sources, [0, 1, 2])
    np.testing.assert_array_equal(buf.episode_index, [0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2])
    arrays = buf.arrays()
    for key in SPEC:
        np.testing.assert_array_equal(arrays[key], np.concatenate([e[key] for e in eps]), err_msg=key)
    buf.add_episode(episode(4, 3), source=1)
    assert len(ZarrReplayBuffer(tmp_path / "rb", SPEC)) == 15
    sampler = ChunkSampler(buf.arrays(), buf.episode_index, [keys.STATE], horizon=3, gamma=0.9)
    batch = sampler.sample(8, np.random.default_rng(0))
    assert batch["actions"].shape == (8, 3, 2) and batch["is_intervention"].shape == (8, 3)


def test_camera_keys_get_chunks_of_a_few_megabytes_and_round_trip(tmp_path: Path) -> None:
    """zarr rewrites a whole chunk per append and decodes one per frame read: a 480x640 camera in the
    1,024-frame chunks of the state keys would be 943 MB a chunk. Large keys get ~4 MiB chunks, small
    keys keep ``chunk_frames``, a resumed store keeps its chunks, and the frames read back unchanged."""
    cam = keys.image_key("front")
    spec = {**SPEC, cam: ((480, 640, 3), np.uint8)}
    buf = ZarrReplayBuffer(tmp_path / "rb", spec, episode_spec={f"final.{cam}": ((480, 640, 3), np.uint8)})
    arrays = buf.zarr_arrays()
    assert arrays[cam].chunks == (4, 480, 640, 3) and arrays[keys.STATE].chunks[0] == 1024
    assert zarr.open_group(str(tmp_path / "rb"))[f"final.{cam}"].chunks[0] == 4
    ep = {**episode(6, 1), cam: np.random.default_rng(2).integers(0, 256, (6, 480, 640, 3), np.uint8)}
    buf.add_episode({**ep, f"final.{cam}": ep[cam][-1]}, source="online")
    again = ZarrReplayBuffer(tmp_path / "rb", spec, chunk_frames=2)
    assert again.zarr_arrays()[cam].chunks[0] == 4
    np.testing.assert_array_equal(again.episode(0)[cam], ep[cam])


def test_spec_and_frame_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="no spec"):
        ZarrReplayBuffer(tmp_path / "none")
    buf = ZarrReplayBuffer(tmp_path / "rb", SPEC)
    with pytest.raises(DatasetError, match="differs"):
        ZarrReplayBuffer(tmp_path / "rb", {keys.STATE: ((4,), np.float32)})
    bad = episode(4, 0)
    bad[keys.ACTION] = bad[keys.ACTION][:, :1]
    with pytest.raises(DatasetError, match="'action'"):
        buf.add_episode(bad)
    bad = episode(4, 0)
    bad[keys.ACTION][1, 1] = np.inf
    with pytest.raises(DatasetError, match="'action'.*NaN or inf"):
        buf.add_episode(bad)
    bad = episode(4, 0)
    del bad[keys.DONE]
    with pytest.raises(DatasetError, match="'next.done'"):
        buf.add_episode(bad)
    with pytest.raises(DatasetError, match="source"):
        buf.add_episode(episode(4, 0), source="nope")
    assert len(buf) == 0 and buf.num_episodes == 0
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "zarr.json").write_text("{not json")
    with pytest.raises(DatasetError, match="broken: unreadable replay buffer"):
        ZarrReplayBuffer(tmp_path / "broken")


_CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    from test_data_replay import SPEC, ZarrReplayBuffer, episode
    buf = ZarrReplayBuffer({path!r}, SPEC, chunk_frames=16)
    i = buf.num_episodes
    while True:
        buf.add_episode(episode(5 + i % 7, i), source=i % 4)
        print("done", i, flush=True)
        i += 1
    """
)


def test_sigkill_keeps_committed_episodes(tmp_path: Path) -> None:
    path = tmp_path / "rb"
    code = _CHILD.format(tests=str(Path(__file__).parent), path=str(path))
    for round_ in range(2):  # the second round resumes the buffer the first one left
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        seen, last_printed = 0, -1
        try:
            for line in proc.stdout:
                if line.startswith("done"):
                    seen, last_printed = seen + 1, int(line.split()[1])
                if seen == 25:
                    break
            proc.send_signal(signal.SIGKILL)  # most likely in the middle of an add_episode
        finally:
            proc.kill()
            rest = proc.communicate()[0]
        for line in rest.splitlines():
            if line.startswith("done"):
                last_printed = int(line.split()[1])
        buf = ZarrReplayBuffer(path)
        n = buf.num_episodes
        assert n >= 25 * (round_ + 1) and n in (last_printed + 1, last_printed + 2)
        lengths = [5 + i % 7 for i in range(n)]
        np.testing.assert_array_equal(buf.episode_ends, np.cumsum(lengths))
        assert len(buf) == sum(lengths)
        arrays = buf.arrays()
        for i in (0, n - 1):  # first and last committed episodes are complete and intact
            ep = episode(lengths[i], i)
            lo = sum(lengths[:i])
            for key in SPEC:
                np.testing.assert_array_equal(arrays[key][lo : lo + lengths[i]], ep[key], err_msg=key)
