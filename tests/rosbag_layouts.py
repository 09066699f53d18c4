"""rosbag2 as Humble's and Jazzy's C++ rosbag2 read and write it, for tests (independent of the project's
converters and of ``rosbags``' reader).

The reader (:func:`read_bag`) follows each distro's decode rules from ros2/rosbag2 (branches
``humble`` 0.15.x, ``jazzy`` 0.26.x): ``rosbag2_storage/src/rosbag2_storage/metadata_io.cpp`` (Humble) and
``rosbag2_storage/include/rosbag2_storage/yaml.hpp`` (Jazzy) for ``metadata.yaml``; Humble's player
(``rosbag2_transport/src/rosbag2_transport/qos.cpp``, ``player.cpp``) and Jazzy's
``rosbag2_storage/src/rosbag2_storage/qos.cpp`` for ``offered_qos_profiles``; the sqlite3 plugins
(``rosbag2_storage_default_plugins/.../sqlite_storage.cpp`` on Humble, ``rosbag2_storage_sqlite3`` on Jazzy)
and ``rosbag2_storage_mcap/src/mcap_storage.cpp``. YAML values convert as yaml-cpp's ``as<T>()`` does: a
missing key, a sequence where a string is read or a non-integer where a number is read raises
:class:`RuleError`; keys a distro does not read are ignored, as in C++.

Writer (``write_recorded``) lays a bag out as ``ros2 bag record`` of that distro writes it: a folder with
``metadata.yaml`` and ``<folder>_0.db3`` (that distro's sqlite3 schema) or ``<folder>_0.mcap`` (profile
``ros2``, ``ros2msg`` schemas, ``cdr`` channels carrying ``offered_qos_profiles``, a ``rosbag2`` metadata
record), with the QoS profiles the recorder reads from discovery.
"""

from __future__ import annotations

import re
import sqlite3
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml
import zstandard
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

DISTROS = ("humble", "jazzy")
METADATA_VERSION = {"humble": 5, "jazzy": 9}  # BagMetadata::version of each distro's bag_metadata.hpp
DB_SCHEMA = {"humble": 3, "jazzy": 4}  # SqliteStorage::kDBSchemaVersion_
INFINITE = {"sec": 9223372036, "nsec": 854775807}  # RMW_DURATION_INFINITE as discovery reports it
HISTORY = ("system_default", "keep_last", "keep_all", "unknown")
RELIABILITY = ("system_default", "reliable", "best_effort", "unknown", "best_available")
DURABILITY = ("system_default", "transient_local", "volatile", "unknown", "best_available")
LIVELINESS = ("system_default", "automatic", "manual_by_node", "manual_by_topic", "unknown", "best_available")
_NULLS = {"", "~", "null", "Null", "NULL"}
_TRUE = {"y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"}
_FALSE = {"n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"}


class RuleError(ValueError):
    """A value the distro's C++ decoder rejects (yaml-cpp would throw), naming the key path."""


# -- yaml-cpp's Node::as<T>() ----------------------------------------------------------------------------
def _load(text: str, where: str) -> Node | None:
    try:
        return yaml.compose(text)
    except yaml.YAMLError as err:
        raise RuleError(f"{where}: not YAML: {err}") from err


def _is_null(node: Node | None) -> bool:
    return node is None or (isinstance(node, ScalarNode) and node.style is None and node.value in _NULLS)


def _get(node: Node | None, key: str, where: str) -> Node:
    """``node[key]`` then ``as<>``: a missing key (or a non-map) is yaml-cpp's InvalidNode/BadConversion."""
    if isinstance(node, MappingNode):
        for k, v in node.value:
            if isinstance(k, ScalarNode) and k.value == key:
                return v
    raise RuleError(f"{where}.{key}: missing")


def _str(node: Node, where: str) -> str:
    if _is_null(node):
        return "null"  # yaml-cpp's as<std::string>() of a null node
    if not isinstance(node, ScalarNode):
        raise RuleError(f"{where}: a {type(node).__name__[:-4].lower()} where a string is read")
    return node.value


def _int(node: Node, where: str, unsigned: bool = False) -> int:
    text = _str(node, where).strip()
    if not re.fullmatch(r"[+]?\d+" if unsigned else r"[-+]?\d+", text):
        raise RuleError(f"{where}: {text!r} is not an {'unsigned ' if unsigned else ''}integer")
    return int(text)


def _bool(node: Node, where: str) -> bool:
    text = _str(node, where)
    if text not in _TRUE | _FALSE:
        raise RuleError(f"{where}: {text!r} is not a bool")
    return text in _TRUE


def _seq(node: Node, where: str) -> list[Node]:
    if not isinstance(node, SequenceNode):
        raise RuleError(f"{where}: not a sequence")
    return node.value


# -- offered_qos_profiles --------------------------------------------------------------------------------
def _time(node: Node, where: str) -> dict[str, int]:
    return {k: _int(_get(node, k, where), f"{where}.{k}", unsigned=True) for k in ("sec", "nsec")}


def _qos(node: Node, where: str, names: bool) -> dict:
    """One profile. ``names``: Jazzy's decoder (enum names or integers); else Humble's (integers only)."""
    history_node = _get(node, "history", where)
    text = _str(history_node, f"{where}.history")
    as_int = not names or (re.fullmatch(r"[-+]?\d+", text.strip()) and 0 <= int(text) <= 3)
    policies = {}
    for key, table in (
        ("history", HISTORY),
        ("reliability", RELIABILITY),
        ("durability", DURABILITY),
        ("liveliness", LIVELINESS),
    ):
        sub = _get(node, key, where)
        if as_int:
            policies[key] = _int(sub, f"{where}.{key}")
        else:  # rmw_qos_*_policy_from_str: an unknown name gives the UNKNOWN value
            value = _str(sub, f"{where}.{key}")
            policies[key] = table.index(value) if value in table else table.index("unknown")
    if not names or policies["history"] == 1:  # Jazzy reads depth only for keep_last
        policies["depth"] = _int(_get(node, "depth", where), f"{where}.depth")
    for key in ("deadline", "lifespan", "liveliness_lease_duration"):
        policies[key] = _time(_get(node, key, where), f"{where}.{key}")
    avoid = _get(node, "avoid_ros_namespace_conventions", where)
    policies["avoid_ros_namespace_conventions"] = _bool(avoid, f"{where}.avoid_ros_namespace_conventions")
    return policies


def _qos_list(node: Node | None, where: str, names: bool) -> list[dict]:
    return [_qos(p, f"{where}[{i}]", names) for i, p in enumerate(_seq(node, where))]


def humble_qos(text: str, where: str) -> list[dict]:
    """Humble's player (``player.cpp``): an empty string is the default profile, else YAML holding a list
    of profiles with integer policies."""
    return [] if text == "" else _qos_list(_load(text, where), where, names=False)


def jazzy_qos_string(text: str, where: str) -> list[dict]:
    """Jazzy's ``to_rclcpp_qos_vector``: an empty string is no profile, else YAML holding a list."""
    return [] if text == "" else _qos_list(_load(text, where), where, names=True)


# -- BagMetadata --------------------------------------------------------------------------------------------
def decode_metadata(node: Node | None, distro: str, where: str) -> dict:
    """``convert<BagMetadata>::decode`` of ``distro``: a dict of what it reads (topic QoS profiles parsed
    as its player or storage parses them). Raises RuleError naming the key that C++ would throw on."""
    get = lambda key: _get(node, key, where)  # noqa: E731
    version = _int(get("version"), f"{where}.version")
    out = {
        "version": version,
        "storage_identifier": _str(get("storage_identifier"), f"{where}.storage_identifier"),
        "duration": _int(_get(get("duration"), "nanoseconds", where), f"{where}.duration", True),
        "starting_time": _int(
            _get(get("starting_time"), "nanoseconds_since_epoch", where), f"{where}.starting_time", True
        ),
        "message_count": _int(get("message_count"), f"{where}.message_count", True),
        "topics": {},
    }
    topics = get("topics_with_message_count")
    for i, info in enumerate(_seq(topics, f"{where}.topics_with_message_count")):
        at = f"{where}.topics_with_message_count[{i}]"
        meta = _get(info, "topic_metadata", at)
        at_meta = f"{at}.topic_metadata"
        name = _str(_get(meta, "name", at_meta), f"{at_meta}.name")
        topic = {
            "type": _str(_get(meta, "type", at_meta), f"{at_meta}.type"),
            "serialization_format": _str(_get(meta, "serialization_format", at_meta), at_meta),
            "message_count": _int(_get(info, "message_count", at), f"{at}.message_count", True),
            "qos": [],
        }
        qos_at = f"{at_meta}.offered_qos_profiles"
        if distro == "jazzy" and version >= 9:
            topic["qos"] = _qos_list(_get(meta, "offered_qos_profiles", at_meta), qos_at, names=True)
        elif version >= 4:
            text = _str(_get(meta, "offered_qos_profiles", at_meta), qos_at)
            parse = humble_qos if distro == "humble" else jazzy_qos_string
            topic["qos"] = parse(text, qos_at)
        if distro == "jazzy" and version >= 7:
            topic["type_description_hash"] = _str(_get(meta, "type_description_hash", at_meta), at_meta)
        out["topics"][name] = topic
    paths = _seq(get("relative_file_paths"), f"{where}.relative_file_paths")
    out["relative_file_paths"] = [_str(p, f"{where}.relative_file_paths") for p in paths]
    if version >= 3:
        for key in ("compression_format", "compression_mode"):
            out[key] = _str(get(key), f"{where}.{key}")
    if version >= 5:
        for i, f in enumerate(_seq(get("files"), f"{where}.files")):
            at = f"{where}.files[{i}]"
            _str(_get(f, "path", at), f"{at}.path")
            _int(_get(_get(f, "starting_time", at), "nanoseconds_since_epoch", at), at, True)
            _int(_get(_get(f, "duration", at), "nanoseconds", at), at, True)
            _int(_get(f, "message_count", at), f"{at}.message_count", True)
    if distro == "jazzy" and version >= 6:
        custom = get("custom_data")  # rosbag2's own convert<unordered_map>: a null node is empty
        if not _is_null(custom) and not isinstance(custom, MappingNode):
            raise RuleError(f"{where}.custom_data: not a map")
    if distro == "jazzy" and version >= 8:
        out["ros_distro"] = _str(get("ros_distro"), f"{where}.ros_distro")
    return out


# -- reading a bag folder as each distro does ----------------------------------------------------------------
@dataclass
class Opened:
    """What a distro's rosbag2 reads from a bag: decoded metadata.yaml and, per storage file, topic ->
    (type, serialization format, QoS profiles as its player parses them, messages read)."""

    metadata: dict
    topics: dict[str, dict]


def _read_sqlite(path: Path, distro: str) -> dict[str, dict]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        columns = {r[1] for r in db.execute("PRAGMA table_info(topics)")}
        schema = db.execute("SELECT schema_version FROM schema").fetchone()[0] if "schema" in tables else 2
        if distro == "jazzy" and schema >= 3:  # read_metadata(): every row decodes (the last one is used)
            for i, (_, text) in enumerate(db.execute("SELECT metadata_version, metadata FROM metadata")):
                decode_metadata(_load(text, f"{path}:metadata[{i}]"), "jazzy", f"{path}:metadata[{i}]")
        if distro == "jazzy" and schema >= 4:
            definitions = "SELECT topic_type, encoding, encoded_message_definition, type_description_hash"
            db.execute(definitions + " FROM message_definitions").fetchall()
        has_hash = distro == "jazzy" and "type_description_hash" in columns
        query = "SELECT id, name, type, serialization_format, offered_qos_profiles"
        query += ", type_description_hash" if has_hash else ""
        topics = {}
        for row in db.execute(query + " FROM topics ORDER BY id"):
            where = f"{path}:topics[{row[1]}].offered_qos_profiles"
            parse = humble_qos if distro == "humble" else jazzy_qos_string
            count = db.execute("SELECT COUNT(*) FROM messages WHERE topic_id = ?", (row[0],)).fetchone()[0]
            topics[row[1]] = {"type": row[2], "serialization_format": row[3], "qos": parse(row[4], where)}
            topics[row[1]]["messages"] = count
        joined = "SELECT data, timestamp FROM messages JOIN topics ON messages.topic_id = topics.id"
        assert sum(1 for _ in db.execute(joined)) == sum(t["messages"] for t in topics.values())
        return topics
    finally:
        db.close()


def _read_mcap(path: Path, distro: str) -> dict[str, dict]:
    from mcap.reader import make_reader

    with path.open("rb") as f:
        reader = make_reader(f)
        header = reader.get_header()
        assert header.profile == "ros2", f"{path}: MCAP profile {header.profile!r}"
        if distro == "jazzy":  # read_metadata(): the 'rosbag2' record's serialized_metadata decodes
            for record in reader.iter_metadata():
                text = record.metadata.get("serialized_metadata", "") if record.name == "rosbag2" else ""
                if text:
                    decode_metadata(_load(text, f"{path}:rosbag2"), "jazzy", f"{path}:rosbag2")
        summary = reader.get_summary()
        topics = {}
        for channel in summary.channels.values():
            where = f"{path}:{channel.topic}.offered_qos_profiles"
            text = channel.metadata.get("offered_qos_profiles", "")
            parse = humble_qos if distro == "humble" else jazzy_qos_string
            topics[channel.topic] = {
                "type": summary.schemas[channel.schema_id].name,
                "serialization_format": channel.message_encoding,
                "qos": parse(text, where),
                "messages": summary.statistics.channel_message_counts.get(channel.id, 0),
            }
        read = sum(1 for _ in reader.iter_messages())
        assert read == sum(t["messages"] for t in topics.values())
        return topics


def read_bag(bag: Path, distro: str) -> Opened:
    """Open ``bag`` as ``distro``'s rosbag2 does: ``metadata.yaml`` (MetadataIo::read_metadata), then each
    relative file with the storage plugin it names, topics merged across files.
    Raises RuleError naming the file and key that distro would throw on."""
    where = f"{bag}/metadata.yaml"
    root = _load((bag / "metadata.yaml").read_text(), where)
    meta = decode_metadata(_get(root, "rosbag2_bagfile_information", where), distro, where)
    read = {"sqlite3": _read_sqlite, "mcap": _read_mcap}[meta["storage_identifier"]]
    topics: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rel in meta["relative_file_paths"]:
            path = bag / rel
            if meta["compression_mode"].upper() == "FILE":  # each file is decompressed before opening
                assert meta["compression_format"] == "zstd", meta["compression_format"]
                path = Path(tmp) / rel.removesuffix(".zstd")
                path.write_bytes(zstandard.ZstdDecompressor().decompress((bag / rel).read_bytes()))
            for name, topic in read(path, distro).items():
                merged = topics.setdefault(name, {**topic, "messages": 0})
                merged["messages"] += topic["messages"]
    return Opened(meta, topics)


# -- writing a bag as `ros2 bag record` does ---------------------------------------------------------------
def recorded_qos(distro: str, reliable: bool) -> list[dict]:
    """The profile the recorder stores for one discovered publisher: history unknown with depth 0 (DDS
    discovery does not carry them), volatile, automatic liveliness, infinite durations; integers on Humble
    (and Jazzy before v9), names on Jazzy."""
    values = {
        "history": "unknown",
        "depth": 0,
        "reliability": "reliable" if reliable else "best_effort",
        "durability": "volatile",
        "deadline": dict(INFINITE),
        "lifespan": dict(INFINITE),
        "liveliness": "automatic",
        "liveliness_lease_duration": dict(INFINITE),
        "avoid_ros_namespace_conventions": False,
    }
    if distro == "humble":
        for key, table in (
            ("history", HISTORY),
            ("reliability", RELIABILITY),
            ("durability", DURABILITY),
            ("liveliness", LIVELINESS),
        ):
            values[key] = table.index(values[key])
    return [values]


@dataclass
class Topic:
    """A recorded topic: name, type, ros2msg definition and RIHS01 hash, reliable or best effort."""

    name: str
    type: str
    msgdef: str
    rihs01: str
    reliable: bool = True


def _dump(value) -> str:
    return yaml.safe_dump(value, sort_keys=False, default_flow_style=False, width=10_000)


def _metadata(
    distro: str, storage: str, parts: dict[str, list], topics: list[Topic], compression: str
) -> dict:
    """``convert<BagMetadata>::encode`` of ``distro`` (the keys it writes, in its order) for the files
    ``parts`` ({relative path: its messages})."""
    version = METADATA_VERSION[distro]
    times = [m[0] for ms in parts.values() for m in ms]
    start, end = min(times), max(times)
    counts = {t.name: 0 for t in topics}
    for ms in parts.values():
        for _, topic, _ in ms:
            counts[topic] += 1
    infos = []
    for t in topics:
        qos = recorded_qos(distro, t.reliable)
        meta = {"name": t.name, "type": t.type, "serialization_format": "cdr"}
        meta["offered_qos_profiles"] = qos if version >= 9 else _dump(qos)
        if distro == "jazzy":
            meta["type_description_hash"] = t.rihs01
        infos.append({"topic_metadata": meta, "message_count": counts[t.name]})
    out = {
        "version": version,
        "storage_identifier": storage,
        "duration": {"nanoseconds": end - start},
        "starting_time": {"nanoseconds_since_epoch": start},
        "message_count": sum(counts.values()),
        "topics_with_message_count": infos,
        "compression_format": "zstd" if compression else "",
        "compression_mode": compression.upper(),
        "relative_file_paths": list(parts),
        "files": [
            {
                "path": f,
                "starting_time": {"nanoseconds_since_epoch": ms[0][0]},
                "duration": {"nanoseconds": ms[-1][0] - ms[0][0]},
                "message_count": len(ms),
            }
            for f, ms in parts.items()
        ],
    }
    if distro == "jazzy":
        out["custom_data"] = None
        out["ros_distro"] = "jazzy"
    return out


def _write_sqlite(path: Path, distro: str, topics: list[Topic], messages, metadata: dict) -> None:
    """The sqlite3 plugin's ``initialize()`` schema of ``distro``, then topics, definitions, messages."""
    db = sqlite3.connect(path)
    hash_col = ", type_description_hash TEXT NOT NULL" if distro == "jazzy" else ""
    db.executescript(
        "CREATE TABLE schema(schema_version INTEGER PRIMARY KEY, ros_distro TEXT NOT NULL);"
        "CREATE TABLE metadata(id INTEGER PRIMARY KEY, metadata_version INTEGER NOT NULL,"
        " metadata TEXT NOT NULL);"
        "CREATE TABLE topics(id INTEGER PRIMARY KEY, name TEXT NOT NULL, type TEXT NOT NULL,"
        f" serialization_format TEXT NOT NULL, offered_qos_profiles TEXT NOT NULL{hash_col});"
        + (
            "CREATE TABLE message_definitions(id INTEGER PRIMARY KEY, topic_type TEXT NOT NULL,"
            " encoding TEXT NOT NULL, encoded_message_definition TEXT NOT NULL,"
            " type_description_hash TEXT NOT NULL);"
            if distro == "jazzy"
            else ""
        )
        + "CREATE TABLE messages(id INTEGER PRIMARY KEY, topic_id INTEGER NOT NULL,"
        " timestamp INTEGER NOT NULL, data BLOB NOT NULL);"
        "CREATE INDEX timestamp_idx ON messages (timestamp ASC);"
    )
    db.execute("INSERT INTO schema VALUES (?, ?)", (DB_SCHEMA[distro], distro))
    ids = {}
    for t in topics:
        row = [t.name, t.type, "cdr", _dump(recorded_qos(distro, t.reliable))]
        cols = "name, type, serialization_format, offered_qos_profiles"
        if distro == "jazzy":
            row.append(t.rihs01)
            cols += ", type_description_hash"
            db.execute(
                "INSERT INTO message_definitions (topic_type, encoding, encoded_message_definition, "
                "type_description_hash) VALUES (?, 'ros2msg', ?, ?)",
                (t.type, t.msgdef, t.rihs01),
            )
        cur = db.execute(f"INSERT INTO topics ({cols}) VALUES ({', '.join('?' * len(row))})", row)
        ids[t.name] = cur.lastrowid
    db.executemany(
        "INSERT INTO messages (timestamp, topic_id, data) VALUES (?, ?, ?)",
        [(t, ids[name], bytes(data)) for t, name, data in messages],
    )
    if distro == "jazzy":  # update_metadata() at close stores the bag's metadata in the file too
        db.execute(
            "INSERT INTO metadata (metadata_version, metadata) VALUES (?, ?)",
            (METADATA_VERSION[distro], _dump(metadata)),
        )
    db.commit()
    db.close()


def _write_mcap(path: Path, distro: str, topics: list[Topic], messages, metadata: dict) -> None:
    """McapWriterOptions("ros2") with the plugin's defaults (chunked, no compression)."""
    from mcap.writer import CompressionType, Writer

    with path.open("wb") as f:
        writer = Writer(f, compression=CompressionType.NONE)
        writer.start(profile="ros2", library="libmcap 1.4.0")
        channels = {}
        for t in topics:
            schema = writer.register_schema(t.type, "ros2msg", t.msgdef.encode())
            meta = {"offered_qos_profiles": _dump(recorded_qos(distro, t.reliable))}
            if distro == "jazzy":
                meta["topic_type_hash"] = t.rihs01
            channels[t.name] = writer.register_channel(t.name, "cdr", schema, meta)
        for stamp, name, data in messages:
            writer.add_message(channels[name], log_time=stamp, data=bytes(data), publish_time=stamp)
        if distro == "jazzy":
            writer.add_metadata("rosbag2", {"serialized_metadata": _dump(metadata)})
        else:
            writer.add_metadata("rosbag2", {"ROS_DISTRO": "humble"})
        writer.finish()


def write_recorded(
    folder: Path,
    distro: str,
    storage: str,
    topics: list[Topic],
    messages,
    split_ns: int | None = None,
    compression: str = "",
) -> Path:
    """Write ``folder`` as ``ros2 bag record -s <storage>`` of ``distro`` does, split into
    ``<folder>_0``, ``<folder>_1``, ... every ``split_ns`` of receive time (``--max-bag-duration``), each
    file declaring every topic. ``compression``: ``""``, ``"file"`` (``--compression-mode file
    --compression-format zstd``: each closed file zstd-compressed to ``<file>.zstd``) or ``"message"``
    (sqlite3 only: each message's data compressed).

    Args:
        topics: the recorded topics (every topic of ``messages``, plus any without messages).
        messages: (receive time ns, topic name, CDR bytes) in receive order.
    Returns: ``folder``.
    """
    folder.mkdir(parents=True)
    suffix = "db3" if storage == "sqlite3" else "mcap"
    if compression == "message":
        messages = [(t, name, zstandard.ZstdCompressor().compress(bytes(d))) for t, name, d in messages]
    parts: dict[str, list] = {}
    for m in messages:
        index = (m[0] - messages[0][0]) // split_ns if split_ns else 0
        name = f"{folder.name}_{index}.{suffix}" + (".zstd" if compression == "file" else "")
        parts.setdefault(name, []).append(m)
    meta = _metadata(distro, storage, parts, topics, compression)
    for name, part in parts.items():
        path = folder / name.removesuffix(".zstd")
        (_write_sqlite if storage == "sqlite3" else _write_mcap)(path, distro, topics, part, meta)
        if compression == "file":
            (folder / name).write_bytes(zstandard.ZstdCompressor().compress(path.read_bytes()))
            path.unlink()
    (folder / "metadata.yaml").write_text(_dump({"rosbag2_bagfile_information": meta}))
    return folder
