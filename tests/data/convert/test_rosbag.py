"""rosbag2 <-> LeRobot v3 (issue 17, item 4) on real bags written here with rosbags' Writer (sqlite3 and
MCAP): time alignment as documented (nearest / linear, header stamp / receive time, trimmed edges),
episode splitting (gap, Bool and String markers), the export and round trip, training on a converted bag,
and every bad input named by file and topic."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from repo_paths import ROOT

pytest.importorskip("rosbags")
pytest.importorskip("cv2")

from rosbags.rosbag2 import StoragePlugin, Writer  # noqa: E402

from robot_rl.cli.main import main  # noqa: E402
from robot_rl.config import ConfigError  # noqa: E402
from robot_rl.data.convert import rosbag_messages as rm  # noqa: E402
from robot_rl.data.convert import rosbag_topics as rt  # noqa: E402
from robot_rl.data.convert.rosbag import bag_to_lerobot  # noqa: E402
from robot_rl.data.convert.rosbag_export import lerobot_to_bag  # noqa: E402
from robot_rl.data.errors import DatasetError  # noqa: E402
from robot_rl.data.lerobot.reader import LeRobotDataset  # noqa: E402
from robot_rl.data.lerobot.validate import validate_dataset  # noqa: E402

T0 = 1_700_000_000 * 10**9
JOINTS = ["a", "b", "c"]
TOPICS = """
fps: 10
task: pick the cube
state: {topic: /joint_states, fields: [position, velocity], joints: [a, b, c]}
action: {topic: /cmd}
cameras:
  front: {topic: /front/image_raw}
  wrist: {topic: /wrist/image_raw/compressed, type: sensor_msgs/msg/CompressedImage}
"""
TINY = ["--policy.hidden_dims=[32,32]", "--policy.image_features=8", "--offline.critic_hidden_dims=[32,32]"]


def ns(t: float) -> int:
    return T0 + round(t * 1e9)


def joint_values(t: float) -> tuple[np.ndarray, np.ndarray]:
    """Positions and velocities of joints a, b, c at time t: (t, 2t, -t) and (1, 2, -1) + t."""
    return np.array([t, 2 * t, -t]), np.array([1.0, 2.0, -1.0]) + t


def frame(value: int, h: int = 16, w: int = 24) -> np.ndarray:
    return np.full((h, w, 3), value, np.uint8)


class Bag:
    """Messages to write as a rosbag2: (receive ns, topic, type, message)."""

    def __init__(self) -> None:
        self.messages: list[tuple[int, str, str, object]] = []

    def add(self, topic: str, msgtype: str, t: float, msg, latency: float = 0.0) -> None:
        self.messages.append((ns(t + latency), topic, msgtype, msg))

    def robot(self, start: float, stop: float, cmd_offset: float = 0.01, image_latency: float = 0.0) -> Bag:
        """Joint states at 100 Hz (names in the order b, a, c), commands [t, -t] every 0.07 s from
        ``start + cmd_offset``, a raw rgb8 camera at 15 Hz and a JPEG one at 10 Hz whose pixels encode
        the frame's time (``round(20 t)``), received ``image_latency`` s after their stamp."""
        spec = rt.VectorTopic(fields=["position", "velocity"])
        for t in np.arange(start, stop, 0.01):
            pos, vel = joint_values(t)
            order = [1, 0, 2]  # b, a, c
            msg = rm.vector_message(
                rt.JOINT_STATE, np.r_[pos[order], vel[order]], spec, ["b", "a", "c"], ns(t)
            )
            self.add("/joint_states", rt.JOINT_STATE, t, msg)
        for t in np.arange(start + cmd_offset, stop, 0.07):
            self.add(
                "/cmd", rt.FLOAT_ARRAY, t, rm.vector_message(rt.FLOAT_ARRAY, np.array([t, -t]), spec, [], 0)
            )
        for topic, msgtype, rate in (
            ("/front/image_raw", rt.IMAGE, 15),
            ("/wrist/image_raw/compressed", rt.COMPRESSED, 10),
        ):
            for t in np.arange(start, stop, 1 / rate):
                img = rm.image_message(msgtype, frame(round(20 * t)), ns(t))
                self.add(topic, msgtype, t, img, image_latency)
        return self

    def record(self, layouts, path: Path, distro: str, storage: str, compression: str = "") -> Path:
        """Write the messages as ``ros2 bag record`` of ``distro`` lays them out (rosbag_layouts), split
        every 0.7 s of receive time, with a ``/rosout`` topic beside them; cameras best effort."""
        store = rm.typestore()
        log = "rcl_interfaces/msg/Log"
        messages = [*self.messages]
        for t in (0.05, 0.5):
            stamp = rm.header(ns(t)).stamp
            messages.append((ns(t), "/rosout", log, store.types[log](stamp, 20, "arm", "ready", "", "", 0)))
        topics, raw = {}, []
        for received, topic, msgtype, msg in sorted(messages, key=lambda m: m[0]):
            if topic not in topics:
                msgdef, _ = store.generate_msgdef(msgtype, ros_version=2)
                reliable = msgtype not in (rt.IMAGE, rt.COMPRESSED)
                topics[topic] = layouts.Topic(topic, msgtype, msgdef, store.hash_rihs01(msgtype), reliable)
            raw.append((received, topic, store.serialize_cdr(msg, msgtype)))
        return layouts.write_recorded(
            path, distro, storage, list(topics.values()), raw, 700_000_000, compression
        )

    def write(self, path: Path, storage: str = "sqlite3") -> Path:
        store = rm.typestore()
        plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
        with Writer(path, version=9, storage_plugin=plugin) as writer:
            conns = {}
            for received, topic, msgtype, msg in sorted(self.messages, key=lambda m: m[0]):
                if topic not in conns:
                    conns[topic] = writer.add_connection(topic, msgtype, typestore=store)
                writer.write(conns[topic], received, store.serialize_cdr(msg, msgtype))
        return path


def topics_file(tmp_path: Path, extra: str = "", name: str = "topics.yaml") -> Path:
    path = tmp_path / name
    path.write_text(TOPICS + extra)
    return path


def nearest_time(times: np.ndarray, t: float) -> float:
    """Brute force: the sample time nearest t, the earlier one on a tie."""
    d = np.abs(times - t)
    return float(times[np.flatnonzero(d <= d.min() + 1e-12)[0]])


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_bag_converts_aligned_to_the_grid_and_validates(tmp_path, storage):
    bag = Bag().robot(0.0, 2.0).write(tmp_path / "bag", storage)
    dst = bag_to_lerobot(bag, tmp_path / "ds", topics_file(tmp_path))
    assert validate_dataset(dst) == []
    ds = LeRobotDataset(dst)
    cols = ds.load_tabular()
    # grid from the latest first message (the command at 0.01 s) to the earliest last one (the wrist
    # camera at 1.9 s): 0.01, 0.11, ..., 1.81
    grid = 0.01 + np.arange(19) / 10
    assert ds.num_episodes == 1 and ds.num_frames == 19 and ds.fps == 10
    assert ds.tasks == ["pick the cube"]
    assert ds.features["observation.state"]["names"] == [
        f"{j}.{f}" for f in ("position", "velocity") for j in JOINTS
    ]
    js_times = np.arange(0.0, 2.0, 0.01)
    cmd_times = np.arange(0.01, 2.0, 0.07)
    for k, g in enumerate(grid):
        pos, vel = joint_values(nearest_time(js_times, g))
        np.testing.assert_allclose(cols["observation.state"][k], np.r_[pos, vel], atol=1e-6)
        c = nearest_time(cmd_times, g)
        np.testing.assert_allclose(cols["action"][k], [c, -c], atol=1e-6)
    front, wrist = (
        ds.episode_video(0, "observation.images.front"),
        ds.episode_video(0, "observation.images.wrist"),
    )
    expect_front = [round(20 * nearest_time(np.arange(0, 2.0, 1 / 15), g)) for g in grid]
    expect_wrist = [round(20 * nearest_time(np.arange(0, 2.0, 1 / 10), g)) for g in grid]
    np.testing.assert_allclose(front.mean(axis=(1, 2, 3)), expect_front, atol=2.5)
    np.testing.assert_allclose(wrist.mean(axis=(1, 2, 3)), expect_wrist, atol=2.5)


def test_linear_interpolation_and_receive_time(tmp_path):
    bag = Bag().robot(0.0, 2.0, image_latency=0.03).write(tmp_path / "bag")
    linear = LeRobotDataset(
        bag_to_lerobot(bag, tmp_path / "lin", topics_file(tmp_path, "interpolation: linear\n"))
    )
    cols = linear.load_tabular()
    grid = 0.01 + np.arange(linear.num_frames) / 10  # header stamps: images' latency does not matter
    np.testing.assert_allclose(cols["action"], np.stack([grid, -grid], 1), atol=1e-6)  # exact for a line
    # receive time: the cameras' first message arrives at 0.03 s, so the grid starts there
    received = bag_to_lerobot(bag, tmp_path / "recv", topics_file(tmp_path, "time: receive\n", "recv.yaml"))
    state = LeRobotDataset(received).load_tabular()["observation.state"]
    np.testing.assert_allclose(state[0], np.r_[joint_values(0.03)], atol=1e-6)


def test_episodes_split_by_gap_bool_and_string_markers(tmp_path):
    bag = Bag().robot(0.0, 1.5).robot(4.0, 5.0)
    for t, value in ((0.2, True), (1.0, False), (4.1, True)):
        bag.add("/recording", rt.BOOL, t, rm.marker_message(rt.BOOL, value))
    for t, text in ((0.0, "open the drawer"), (0.8, ""), (4.0, "close it")):
        bag.add("/task", rt.STRING, t, rm.marker_message(rt.STRING, text))
    path = bag.write(tmp_path / "bag")
    gap = LeRobotDataset(
        bag_to_lerobot(path, tmp_path / "gap", topics_file(tmp_path, "episodes: {split: gap}\n"))
    )
    assert gap.num_episodes == 2 and list(np.diff(gap.episode_from)) == [14]  # 0.01 .. 1.31 s
    marked = topics_file(tmp_path, "episodes: {split: topic, topic: /recording}\n", "bool.yaml")
    by_bool = LeRobotDataset(bag_to_lerobot(path, tmp_path / "bool", marked))
    lengths = list(np.diff(np.r_[by_bool.episode_from, by_bool.num_frames]))
    state = by_bool.load_tabular()["observation.state"]
    # from the first command after each true marker (0.22 s, 4.15 s) to the false one / the end
    assert lengths == [8, 8]
    np.testing.assert_allclose(state[[0, 8], 0], [0.22, 4.15], atol=1e-6)
    strings = topics_file(tmp_path, "episodes: {split: topic, topic: /task}\n", "string.yaml")
    by_text = LeRobotDataset(bag_to_lerobot(path, tmp_path / "text", strings))
    assert by_text.num_episodes == 3
    tasks = by_text.load_tabular()["task_index"][by_text.episode_from]
    assert [by_text.tasks[i] for i in tasks] == ["open the drawer", "pick the cube", "close it"]
    assert validate_dataset(by_text.root) == []


def test_command_types_and_image_encodings_decode(tmp_path):
    bag = Bag()
    types = rm.typestore().types
    for t in np.arange(0.0, 1.0, 0.05):
        traj = rm.vector_message(rt.TRAJECTORY, np.array([t, 3 * t]), None, ["y", "x"], ns(t))
        bag.add("/traj", rt.TRAJECTORY, t, traj)
        twist = rm.vector_message(rt.TWIST, np.arange(6) * t, None, [], ns(t))
        bag.add("/twist", rt.TWIST, t, twist)
        js = rm.vector_message(rt.JOINT_STATE, np.array([t, -t]), rt.VectorTopic(), ["x", "y"], ns(t))
        bag.add("/joint_states", rt.JOINT_STATE, t, js)
        rgb = np.zeros((4, 6, 3), np.uint8)
        rgb[..., 0], rgb[..., 2] = 200, 50
        padded = np.zeros((4, 20), np.uint8)  # bgr8 rows padded from 18 to 20 bytes
        padded[:, :18] = rgb[:, :, ::-1].reshape(4, 18)
        bag.add(
            "/bgr", rt.IMAGE, t, types[rt.IMAGE](rm.header(ns(t)), 4, 6, "bgr8", 0, 20, padded.reshape(-1))
        )
        mono = np.full(24, 90, np.uint8)
        bag.add("/mono", rt.IMAGE, t, types[rt.IMAGE](rm.header(ns(t)), 4, 6, "mono8", 0, 6, mono))
    path = bag.write(tmp_path / "bag", "mcap")
    base = "fps: 10\nstate: {topic: /joint_states, joints: [y, x]}\n"
    base += "cameras: {bgr: {topic: /bgr}, mono: {topic: /mono}}\n"
    for action, names, first in (
        ("/traj", ["x", "y"], lambda t: [3 * t, t]),
        ("/twist", rt.TWIST_NAMES, lambda t: list(np.arange(6) * t)),
    ):
        cfg = tmp_path / f"{action[1:]}.yaml"
        cfg.write_text(base + f"action: {{topic: {action}, joints: [x, y]}}\n")
        ds = LeRobotDataset(bag_to_lerobot(path, tmp_path / action[1:], cfg))
        cols = ds.load_tabular()
        assert ds.features["action"]["names"] == names
        np.testing.assert_allclose(cols["action"][3], first(0.3), atol=1e-6)
        np.testing.assert_allclose(cols["observation.state"][3], [-0.3, 0.3], atol=1e-6)  # [y, x]
    bgr = ds.episode_video(0, "observation.images.bgr").astype(float).mean(axis=(0, 1, 2))
    np.testing.assert_allclose(bgr, [200, 0, 50], atol=6)  # back in RGB order
    np.testing.assert_allclose(
        ds.episode_video(0, "observation.images.mono").mean(axis=(0, 1, 2)), 90, atol=4
    )


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_round_trip_bag_dataset_bag_dataset(tmp_path, storage):
    path = Bag().robot(0.0, 1.5).robot(4.0, 5.0).write(tmp_path / "bag", storage)
    cfg = topics_file(tmp_path, "episodes: {split: topic, topic: /ep, type: std_msgs/String}\n")
    cfg_gap = topics_file(tmp_path, "episodes: {split: gap}\n", "gap.yaml")
    first = bag_to_lerobot(path, tmp_path / "ds1", cfg_gap)
    exported = lerobot_to_bag(first, tmp_path / "bag2", cfg, episodes=[0, 1], storage=storage)
    assert (exported / f"bag2.{'mcap' if storage == 'mcap' else 'db3'}").is_file()
    second = bag_to_lerobot(exported, tmp_path / "ds2", cfg)
    a, b = LeRobotDataset(first), LeRobotDataset(second)
    ta, tb = a.load_tabular(), b.load_tabular()
    assert set(ta) == set(tb)
    for key in ta:
        np.testing.assert_array_equal(ta[key], tb[key], err_msg=key)
    assert a.features["observation.state"]["names"] == b.features["observation.state"]["names"]
    assert b.tasks == ["pick the cube"]  # carried by the String markers
    for key in a.video_keys:  # raw rgb8 frames: one more video encode; JPEG: one more lossy step
        for ep in range(2):
            diff = np.abs(a.episode_video(ep, key).astype(float) - b.episode_video(ep, key))
            assert diff.mean() < 2.0, (key, ep, diff.mean())


def test_export_defaults_and_cli(tmp_path, capsys):
    path = Bag().robot(0.0, 1.0).write(tmp_path / "bag")
    cfg = topics_file(tmp_path)
    assert main(["dataset", "convert", str(path), "--out", str(tmp_path / "ds"), "--topics", str(cfg)]) == 0
    assert "1 episodes, 9 frames" in capsys.readouterr().out
    assert main(["dataset", "validate", str(tmp_path / "ds")]) == 0
    out = tmp_path / "exported"
    assert main(["dataset", "convert", str(tmp_path / "ds"), "--to", "rosbag2", "--out", str(out)]) == 0
    from rosbags.rosbag2 import Reader

    with Reader(out) as reader:
        found = {c.topic: (c.msgtype, c.msgcount) for c in reader.connections}
    assert found == {
        "/joint_states": (rt.JOINT_STATE, 9),
        "/action": (rt.FLOAT_ARRAY, 9),
        "/camera/front/image_raw": (rt.IMAGE, 9),
        "/camera/wrist/image_raw": (rt.IMAGE, 9),
    }
    assert main(["dataset", "convert", str(path), "--out", str(tmp_path / "x")]) == 1
    assert "needs --topics" in capsys.readouterr().err
    assert main(["dataset", "convert", str(tmp_path / "ds"), "--to", "rosbag2", "--out", str(out)]) == 1
    assert "already exists" in capsys.readouterr().err


def test_converted_bag_trains_a_policy(tmp_path):
    path = Bag().robot(0.0, 2.0).robot(4.0, 6.0).write(tmp_path / "bag", "mcap")
    dst = tmp_path / "ds"
    args = [
        "dataset",
        "convert",
        str(path),
        "--out",
        str(dst),
        "--topics",
        str(topics_file(tmp_path, "episodes: {split: gap}\n")),
    ]
    assert main(args) == 0
    run = tmp_path / "run"
    train = ["train", "--algo", "bc", "--seed", "0", f"--run_dir={run}", f"--data.path={dst}"]
    train += [
        "--data.image_size=[16,24]",
        "--data.val_episodes=[1]",
        "--data.val_every=2",
        "--data.horizon_s=0.3",
    ]
    train += ["--data.frame_cache=none", "--data.num_workers=0", "--bc.steps=4", "--bc.batch_size=8", *TINY]
    assert main(train) == 0
    assert (run / "checkpoints" / "bc_seed0").is_dir()


# -- rosbag2 of Humble and Jazzy (issue 34, item 5) ----------------------------------------------------
@pytest.fixture
def layouts():
    """tests/rosbag_layouts.py: each distro's rosbag2 read and record rules (needs the ``mcap`` package)."""
    pytest.importorskip("mcap")
    import rosbag_layouts

    return rosbag_layouts


def assert_same_dataset(a: Path, b: Path) -> None:
    """Equal features, tasks, tabular columns and decoded video frames."""
    da, db = LeRobotDataset(a), LeRobotDataset(b)
    assert da.features == db.features and da.tasks == db.tasks
    ta, tb = da.load_tabular(), db.load_tabular()
    assert set(ta) == set(tb)
    for key in ta:
        np.testing.assert_array_equal(ta[key], tb[key], err_msg=key)
    for key in da.video_keys:
        for ep in range(da.num_episodes):
            np.testing.assert_array_equal(da.episode_video(ep, key), db.episode_video(ep, key), key)


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_exported_bag_reads_under_humble_and_jazzy_rules(tmp_path, layouts, storage):
    source = Bag().robot(0.0, 1.0).write(tmp_path / "bag")
    ds = bag_to_lerobot(source, tmp_path / "ds", topics_file(tmp_path))
    cfg = topics_file(tmp_path, "episodes: {split: topic, topic: /ep, type: std_msgs/String}\n", "ep.yaml")
    exported = lerobot_to_bag(ds, tmp_path / "exported", cfg, storage=storage)
    expected = {
        "/joint_states": (rt.JOINT_STATE, 9),
        "/cmd": (rt.FLOAT_ARRAY, 9),
        "/front/image_raw": (rt.IMAGE, 9),
        "/wrist/image_raw/compressed": (rt.COMPRESSED, 9),
        "/ep": (rt.STRING, 1),
    }
    infinite = dict(layouts.INFINITE)
    profile = {  # keep last 10, reliable, volatile, automatic, as integers (metadata version 8)
        "history": 1,
        "reliability": 1,
        "durability": 2,
        "liveliness": 1,
        "depth": 10,
        "deadline": infinite,
        "lifespan": infinite,
        "liveliness_lease_duration": infinite,
        "avoid_ros_namespace_conventions": False,
    }
    store = rm.typestore()
    for distro in layouts.DISTROS:
        opened = layouts.read_bag(exported, distro)
        assert opened.metadata["version"] == 8 and opened.metadata["message_count"] == 37
        assert {t: (v["type"], v["message_count"]) for t, v in opened.metadata["topics"].items()} == expected
        assert {t: (v["type"], v["messages"]) for t, v in opened.topics.items()} == expected  # the storage
        for topic, info in [*opened.metadata["topics"].items(), *opened.topics.items()]:
            assert info["qos"] == [profile], (distro, topic)
            assert info["serialization_format"] == "cdr"
            if distro == "jazzy" and "type_description_hash" in info:
                assert info["type_description_hash"] == store.hash_rihs01(info["type"])
    # the rules are not vacuous: Humble throws on the QoS list of version 9 (what rosbags writes by
    # default), Jazzy on a QoS string under version 9
    with pytest.raises(layouts.RuleError, match=r"offered_qos_profiles: a sequence where a string is read"):
        layouts.read_bag(source, "humble")
    meta = exported / "metadata.yaml"
    meta.write_text(meta.read_text().replace("version: 8", "version: 9"))
    with pytest.raises(layouts.RuleError, match=r"offered_qos_profiles: not a sequence"):
        layouts.read_bag(exported, "jazzy")


@pytest.mark.parametrize("distro", ["humble", "jazzy"])
@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_bags_laid_out_as_ros2_bag_record_import_as_the_same_dataset(tmp_path, layouts, distro, storage):
    """Each compression ``ros2 bag record`` offers for the storage: none, ``--compression-mode file``
    (``<bag>_<i>.db3.zstd``) and, for sqlite3 only, ``--compression-mode message``."""
    bag = Bag().robot(0.0, 1.5)
    cfg = topics_file(tmp_path)
    reference = bag_to_lerobot(bag.write(tmp_path / "rosbags"), tmp_path / "reference", cfg)
    for compression in ("", "file", "message")[: 3 if storage == "sqlite3" else 2]:
        folder = tmp_path / compression / "rosbag2_2026_01_02-03_04_05"
        recorded = bag.record(layouts, folder, distro, storage, compression)
        opened = layouts.read_bag(recorded, distro)  # the layout follows its own distro's rules
        assert len(opened.metadata["relative_file_paths"]) == 3  # split at 0.7 s and 1.4 s
        assert opened.topics["/front/image_raw"]["qos"][0]["reliability"] == 2  # best effort
        assert_same_dataset(reference, bag_to_lerobot(recorded, tmp_path / compression / "ds", cfg))


# -- bad input -----------------------------------------------------------------------------------------
def test_missing_topic_and_unsupported_types_are_named(tmp_path):
    bag = Bag().robot(0.0, 0.5)
    for t in np.arange(0.0, 0.5, 0.1):
        bag.add("/pose", "std_msgs/msg/Int32", t, rm.typestore().types["std_msgs/msg/Int32"](data=1))
    path = bag.write(tmp_path / "bag")
    missing = tmp_path / "missing.yaml"
    missing.write_text(TOPICS.replace("/cmd", "/arm/commands"))
    with pytest.raises(
        DatasetError, match=r"'/arm/commands' \(action\) is not in the bag; its topics: .*/cmd"
    ):
        bag_to_lerobot(path, tmp_path / "o1", missing)
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(TOPICS.replace("/cmd", "/pose"))
    with pytest.raises(
        DatasetError, match=r"'/pose' \(action\) has message type std_msgs/msg/Int32, which is not"
    ):
        bag_to_lerobot(path, tmp_path / "o2", wrong)
    camera_as_state = tmp_path / "cam.yaml"
    camera_as_state.write_text(TOPICS.replace("topic: /joint_states", "topic: /front/image_raw"))
    with pytest.raises(DatasetError, match="mapped twice|sensor_msgs/msg/Image, which is not supported"):
        bag_to_lerobot(path, tmp_path / "o3", camera_as_state)
    declared = topics_file(tmp_path, "", "declared.yaml")
    declared.write_text(TOPICS.replace("{topic: /cmd}", "{topic: /cmd, type: sensor_msgs/JointState}"))
    with pytest.raises(DatasetError, match="the topics file says sensor_msgs/JointState"):
        bag_to_lerobot(path, tmp_path / "o4", declared)
    assert not any(p.name.startswith(("o", ".o")) for p in tmp_path.iterdir())  # nothing left behind


def test_bad_topics_files_name_file_and_key(tmp_path):
    for text, key in (
        (TOPICS + "cameras: {front: {topic: /f, encoding: rgb8}}\n", "encoding"),
        (TOPICS + "framerate: 10\n", "framerate"),
        (TOPICS + "interpolation: cubic\n", "interpolation"),
        (TOPICS.replace("action: {topic: /cmd}", ""), "action.topic"),
        (TOPICS + "episodes: {split: topic}\n", "episodes.topic"),
        (TOPICS.replace("[position, velocity]", "[position, torque]"), "state.fields"),
    ):
        path = tmp_path / "bad.yaml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=key) as err:
            rt.load_topics(path)
        assert str(path) in str(err.value)


def test_wrong_image_encoding_is_named(tmp_path):
    bag = Bag().robot(0.0, 0.5)
    types = rm.typestore().types
    for t in np.arange(0.0, 0.5, 0.1):
        depth = types[rt.IMAGE](rm.header(ns(t)), 16, 24, "16UC1", 0, 48, np.zeros(16 * 48, np.uint8))
        bag.add("/depth", rt.IMAGE, t, depth)
    path = bag.write(tmp_path / "bag")
    cfg = topics_file(tmp_path, "  depth: {topic: /depth}\n")
    with pytest.raises(
        DatasetError, match=r"/depth: image encoding '16UC1' is not supported \(supported: \['rgb8'"
    ):
        bag_to_lerobot(path, tmp_path / "out", cfg)
    assert not (tmp_path / "out").exists()


def test_joint_missing_in_some_messages_is_named(tmp_path):
    bag = Bag().robot(0.0, 0.5)
    bag.add(
        "/joint_states",
        rt.JOINT_STATE,
        0.255,
        rm.vector_message(
            rt.JOINT_STATE,
            np.zeros(4),
            rt.VectorTopic(fields=["position", "velocity"]),
            ["a", "c"],
            ns(0.255),
        ),
    )
    path = bag.write(tmp_path / "bag")
    with pytest.raises(
        DatasetError, match=r"/joint_states: message at t=.* lacks joints \['b'\] \(it names \['a', 'c'\]\)"
    ):
        bag_to_lerobot(path, tmp_path / "out", topics_file(tmp_path))


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_corrupt_or_truncated_bag_is_named(tmp_path, storage):
    path = Bag().robot(0.0, 1.0).write(tmp_path / "bag", storage)
    data = next(p for p in path.iterdir() if p.suffix in (".db3", ".mcap"))
    os.truncate(data, data.stat().st_size // 2)
    with pytest.raises(DatasetError, match=rf"{path}: not a readable rosbag2 \(files .*{data.name}"):
        bag_to_lerobot(path, tmp_path / "out", topics_file(tmp_path))
    (path / "metadata.yaml").write_text("rosbag2_bagfile_information: [not, a, mapping\n")
    with pytest.raises(DatasetError, match="not a readable rosbag2"):
        bag_to_lerobot(path, tmp_path / "out", topics_file(tmp_path))
    assert not (tmp_path / "out").exists()


def test_empty_episode_is_named(tmp_path):
    bag = Bag().robot(0.0, 1.0).robot(2.0, 3.0)
    for t, value in ((0.1, True), (0.5, False), (1.5, True), (1.8, False)):  # the second holds no data
        bag.add("/recording", rt.BOOL, t, rm.marker_message(rt.BOOL, value))
    path = bag.write(tmp_path / "bag")
    cfg = topics_file(tmp_path, "episodes: {split: topic, topic: /recording}\n")
    with pytest.raises(
        DatasetError, match=r"episode 1 \(1\.500-1\.800 s into the bag\) has no message on /joint_states"
    ):
        bag_to_lerobot(path, tmp_path / "out", cfg)
    assert not (tmp_path / "out").exists()


def test_example_topics_file_loads():
    cfg = rt.load_topics(ROOT / "configs" / "ros2" / "rosbag_topics.yaml")
    assert cfg.fps == 30 and cfg.action.type == "trajectory_msgs/msg/JointTrajectory"
    assert len(cfg.state.joints) == 6 and set(cfg.cameras) == {"front", "wrist"}
