"""A stock ROS 2 node written with plain rclpy (no robot_rl import): the far side of the interop test.

``python rclpy_peer.py pkg/msg/Type ...`` subscribes ``/interop/c2r/<pkg>/<Type>`` for each type and
republishes every message it gets, unchanged, on ``/interop/r2c/<pkg>/<Type>``; the first message of each
type is printed as one JSON line ``{"type": ..., "fields": {...}}`` (arrays as lists, ``uint8[]`` as a list
of ints). Once every type has arrived it prints ``{"graph": {"nodes": [...], "topics": {...}}}`` (the ROS
graph as rclpy sees it) whenever that graph changes, and keeps echoing until stdin closes. Runs on
whatever RMW ROS 2 picks (Fast DDS by default), in ``ROS_DOMAIN_ID``.
"""

import importlib
import json
import sys
import threading

import rclpy
from rclpy.node import Node


def plain(value):
    """An rclpy message or field value as JSON-ready Python (messages as dicts, arrays as lists)."""
    if hasattr(value, "get_fields_and_field_types"):
        return {name: plain(getattr(value, name)) for name in value.get_fields_and_field_types()}
    if isinstance(value, bytes | bytearray):
        return list(value)
    if isinstance(value, str | bool | int | float):
        return value
    return [plain(v.item() if hasattr(v, "item") else v) for v in value]


def main(types: list[str]) -> None:
    rclpy.init()
    node = Node("interop_peer")
    seen: set[str] = set()
    last_graph = None

    def echo(name: str, pub):
        def callback(msg) -> None:
            pub.publish(msg)
            if name not in seen:
                seen.add(name)
                print(json.dumps({"type": name, "fields": plain(msg)}), flush=True)

        return callback

    for name in types:
        pkg, _, cls_name = name.split("/")
        cls = getattr(importlib.import_module(f"{pkg}.msg"), cls_name)
        pub = node.create_publisher(cls, f"/interop/r2c/{pkg}/{cls_name}", 10)
        node.create_subscription(cls, f"/interop/c2r/{pkg}/{cls_name}", echo(name, pub), 10)
    stdin_closed = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stdin_closed.set()), daemon=True).start()
    while not stdin_closed.is_set():
        rclpy.spin_once(node, timeout_sec=0.05)
        if seen >= set(types):
            nodes = sorted(f"{ns.rstrip('/')}/{n}" for n, ns in node.get_node_names_and_namespaces())
            graph = {"nodes": nodes, "topics": dict(node.get_topic_names_and_types())}
            if graph != last_graph:
                last_graph = graph
                print(json.dumps({"graph": graph}), flush=True)
    node.destroy_node()
    rclpy.shutdown()


if __name__ == "__main__":
    main(sys.argv[1:])
