"""The ``raftlog`` console script.

Commands: ``server`` (run one node), ``local start|status|stop|add-node`` (a local
cluster of node processes), ``cluster health`` (exit status 0 only when all
is well), ``cluster decommission``,
``topic create|describe|list|delete|alter-config|add-partitions`` (``--format json``
for scripts), ``partition transfer-leadership|move``, ``produce``,
``consume`` and ``offsets``
(console producer and consumer, one record per line, as Kafka's console tools).

Every client command finds the cluster through ``--servers``, else
``RAFTLOG_SERVERS``, else the local cluster recorded in the default data dir
(``$RAFTLOG_HOME`` or ``~/.raftlog/local``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import sys
import time
from typing import Any

from raftlog import __version__
from raftlog.client.partitioner import murmur2
from raftlog.node.config import FLUSH_SCOPE_NODE, FLUSH_SCOPES

NO_CLUSTER = (
    "no raftlog cluster found: pass --servers HOST:PORT[,HOST:PORT...], set RAFTLOG_SERVERS, "
    "or start a local cluster with `raftlog local start`"
)


def _positive_int(name: str) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{name}: expected an integer >= 1, got {text!r}"
            ) from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{name}: expected an integer >= 1, got {value}")
        return value

    return parse


def _positive_float(name: str) -> Any:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not value > 0 or value == float("inf"):
            raise argparse.ArgumentTypeError(f"{name}: expected a number > 0, got {text!r}")
        return value

    return parse


def _non_negative_int(name: str) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = -1
        if value < 0:
            raise argparse.ArgumentTypeError(f"{name} must be an integer >= 0; got {text!r}")
        return value

    return parse


def _offset_arg(text: str) -> int | str:
    if text in ("earliest", "latest"):
        return text
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(
            f"--offset must be an integer >= 0, 'earliest' or 'latest'; got {text!r}"
        )
    return value


def _topic_partition(text: str) -> tuple[str, int]:
    topic, sep, part = text.rpartition("/")
    if not sep or not topic or not part.isdigit():
        raise argparse.ArgumentTypeError(
            f"TOPIC/PARTITION: expected a topic and a partition number >= 0, e.g. events/0; "
            f"got {text!r}"
        )
    return topic, int(part)


def _node_list(text: str) -> list[int]:
    items = [t.strip() for t in text.split(",")]
    if not items or not all(t.isdigit() for t in items):
        raise argparse.ArgumentTypeError(
            f"--replicas: expected node ids as NODE[,NODE...], e.g. 2,3,4; got {text!r}"
        )
    return [int(t) for t in items]


def _header(text: str) -> tuple[str, bytes]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--header must be KEY=VALUE; got {text!r}")
    return key, value.encode("utf-8")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raftlog",
        description="A replicated, partitioned log on Raft.",
    )
    parser.add_argument("--version", action="version", version=f"raftlog {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    from raftlog.node import add_server_arguments

    server = sub.add_parser("server", help="run one node")
    add_server_arguments(server)
    server.set_defaults(handler=_cmd_server)

    local = sub.add_parser("local", help="a local cluster of node processes")
    local_sub = local.add_subparsers(dest="local_command", metavar="ACTION")
    for name, handler, help_text in (
        ("start", _cmd_local_start, "start a detached local cluster (no-op if running)"),
        ("status", _cmd_local_status, "nodes, PIDs and leaders; the disk each topic uses"),
        ("stop", _cmd_local_stop, "stop the processes `local start` started"),
    ):
        p = local_sub.add_parser(name, help=help_text)
        p.add_argument("--data-dir", help="default: $RAFTLOG_HOME or ~/.raftlog/local")
        p.set_defaults(handler=handler)
        if name == "start":
            p.add_argument(
                "--nodes",
                type=_positive_int("--nodes"),
                default=None,
                help="node count of a new cluster (default 3); a recorded cluster keeps its own",
            )
            p.add_argument(
                "--default-partitions", type=_positive_int("--default-partitions"), default=6
            )
            p.add_argument(
                "--shards",
                type=_positive_int("--shards"),
                default=None,
                help="processes per node (default 1: the local nodes already share this "
                "machine's cores)",
            )
            p.add_argument(
                "--flush-scope",
                choices=FLUSH_SCOPES,
                default=None,
                help="how the nodes make writes durable (raftlog server --flush-scope): "
                "node, one syncfs for all partitions; group, an fsync per partition's log "
                "(default node); a recorded cluster keeps its own",
            )

    add_node = local_sub.add_parser(
        "add-node",
        help="add a node process to the running local cluster; prints its id and address",
        description="The node gets the next id, a free port and the cluster's server flags, "
        "is recorded in cluster.json and registered through the controller (every node "
        "learns its address); new topics and partitions are placed on it too.",
    )
    add_node.add_argument("--data-dir", help="default: $RAFTLOG_HOME or ~/.raftlog/local")
    add_node.add_argument("--format", choices=["text", "json"], default="text")
    add_node.set_defaults(handler=_cmd_local_add_node)

    node = sub.add_parser("node", help="a node's data directory")
    node_sub = node.add_subparsers(dest="node_command", metavar="ACTION")
    purge = node_sub.add_parser(
        "purge-moved-aside",
        help="delete the group directories a node moved aside (dropped groups, damaged "
        "logs; a deleted topic's replicas go by themselves after --file-delete-delay-ms); "
        "refuses a directory that is not a node's, never follows symlinks",
    )
    purge.add_argument("--data-dir", required=True, help="the node's --data-dir")
    purge.add_argument("--dry-run", action="store_true", help="only list what would go")
    purge.set_defaults(handler=_cmd_node_purge_moved_aside)

    cluster = sub.add_parser("cluster", help="inspect a cluster")
    cluster_sub = cluster.add_subparsers(dest="cluster_command", metavar="ACTION")
    health = cluster_sub.add_parser(
        "health",
        help="nodes up or down, leaderless and under-replicated partitions, the controller; "
        "exit status 0 only when all is well",
    )
    health.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        help="json: one document (with --watch: one per line)",
    )
    health.add_argument(
        "--watch",
        action="store_true",
        help="print the report again every --interval seconds until interrupted",
    )
    health.add_argument(
        "--interval",
        type=_positive_float("--interval"),
        default=2.0,
        metavar="SECONDS",
        help="seconds between reports with --watch (default 2)",
    )
    health.add_argument(
        "--count",
        type=_positive_int("--count"),
        default=None,
        help="with --watch: stop after this many reports",
    )
    health.set_defaults(handler=_cmd_cluster_health)
    decommission = cluster_sub.add_parser(
        "decommission",
        help="move every replica off a node, then remove it from the cluster",
        description="No new replica goes to the node; each of its partitions moves to the "
        "node with the fewest replicas (as `partition move`, writes going on); then the "
        "node leaves the controller group and the cluster's node list. Waits until it is "
        "removed (--timeout-s); an interrupted wait leaves the draining going on. A node "
        "of the local cluster ($RAFTLOG_HOME) is then stopped and dropped from its "
        "cluster.json; any other node's process keeps running until you stop it.",
    )
    decommission.add_argument("node", type=_non_negative_int("NODE"), metavar="NODE")
    decommission.add_argument(
        "--timeout-s",
        type=_positive_float("--timeout-s"),
        default=300.0,
        help="how long to wait until the node is removed (default 300)",
    )
    decommission.add_argument("--format", choices=["text", "json"], default="text")
    decommission.set_defaults(handler=_cmd_cluster_decommission)

    topic = sub.add_parser(
        "topic", help="create, describe, list, delete topics and change their configs"
    )
    topic_sub = topic.add_subparsers(dest="topic_command", metavar="ACTION")
    config_help = (
        "a topic config KEY=VALUE (repeatable), Kafka's names: retention.bytes, "
        "retention.ms, segment.bytes, segment.ms, compression.type (none, lz4, zstd, producer)"
    )
    create = topic_sub.add_parser("create", help="create a topic")
    create.add_argument("name")
    create.add_argument("--partitions", type=_positive_int("--partitions"), default=None)
    create.add_argument(
        "--replication-factor",
        type=_positive_int("--replication-factor"),
        default=None,
        help="replicas per partition; refused above the node count (default: 3, or the "
        "node count when smaller)",
    )
    create.add_argument("--if-not-exists", action="store_true")
    create.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE", help=config_help
    )
    create.set_defaults(handler=_cmd_topic_create)
    describe = topic_sub.add_parser("describe", help="partitions, leaders, offsets, configs")
    describe.add_argument("name")
    describe.set_defaults(handler=_cmd_topic_describe)
    lst = topic_sub.add_parser("list", help="topic names")
    lst.set_defaults(handler=_cmd_topic_list)
    delete = topic_sub.add_parser("delete", help="delete a topic")
    delete.add_argument("name")
    delete.set_defaults(handler=_cmd_topic_delete)
    alter = topic_sub.add_parser(
        "alter-config",
        help="change a topic's configs live",
        description="Set (--config) and remove (--delete-config, back to the default) topic "
        "configs in one atomic change; every partition applies it at once.",
    )
    alter.add_argument("name")
    alter.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE", help=config_help
    )
    alter.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="KEY",
        help="return KEY to its default (repeatable)",
    )
    alter.set_defaults(handler=_cmd_topic_alter_config)
    add_parts = topic_sub.add_parser(
        "add-partitions",
        help="grow a topic to a new total of partitions",
        description="Kafka's semantics: --partitions is the new total, never fewer than the "
        "topic has. The new partitions are placed over the nodes through the controller.",
    )
    add_parts.add_argument("name")
    add_parts.add_argument(
        "--partitions",
        type=_positive_int("--partitions"),
        required=True,
        help="the topic's new partition count in all",
    )
    add_parts.set_defaults(handler=_cmd_topic_add_partitions)
    for p in (create, describe, lst, delete, alter, add_parts):
        p.add_argument("--format", choices=["text", "json"], default="text")

    partition = sub.add_parser("partition", help="a partition's leadership")
    partition_sub = partition.add_subparsers(dest="partition_command", metavar="ACTION")
    transfer = partition_sub.add_parser(
        "transfer-leadership",
        help="move a partition's leadership to one of its replicas",
        description="The node becomes the partition's preferred replica (kept by the "
        "controller, so the leader balancer keeps the leadership there); the command "
        "returns once it leads.",
    )
    transfer.add_argument("partition", type=_topic_partition, metavar="TOPIC/PARTITION")
    transfer.add_argument(
        "--to",
        type=_non_negative_int("--to"),
        required=True,
        metavar="NODE",
        help="the node id that is to lead",
    )
    transfer.add_argument("--format", choices=["text", "json"], default="text")
    transfer.set_defaults(handler=_cmd_partition_transfer_leadership)
    move = partition_sub.add_parser(
        "move",
        help="move a partition's replicas to other nodes while writes go on",
        description="Through the controller, the partition's leader adds each new node as "
        "a learner, promotes it once it has caught up, then removes the replicas that go "
        "(one configuration change at a time; the leader last, after handing over its "
        "leadership). The first node listed becomes the preferred leader. Waits until the "
        "move is done (--timeout-s); an interrupted wait leaves the move going on.",
    )
    move.add_argument("partition", type=_topic_partition, metavar="TOPIC/PARTITION")
    move.add_argument(
        "--replicas", type=_node_list, required=True, metavar="NODE[,NODE...]",
        help="the node ids to hold the partition, e.g. 2,3,4",
    )  # fmt: skip
    move.add_argument(
        "--timeout-s",
        type=_positive_float("--timeout-s"),
        default=120.0,
        help="how long to wait for the move to finish (default 120)",
    )
    move.add_argument("--format", choices=["text", "json"], default="text")
    move.set_defaults(handler=_cmd_partition_move)

    produce = sub.add_parser(
        "produce",
        help="produce stdin lines, one record each",
        description="Each stdin line is one record. With --key-separator, the text before "
        "the first separator is the key, and the record goes to the partition Kafka's "
        "default partitioner gives (murmur2 of the key); without a key, lines spread "
        "round-robin, unless --partition is given.",
    )
    produce.add_argument("topic")
    produce.add_argument("--acks", choices=["all", "1", "0"], default="all")
    produce.add_argument(
        "--batch-lines",
        type=_positive_int("--batch-lines"),
        default=1000,
        help="lines read before sending (default 1000)",
    )
    produce.add_argument(
        "--key-separator", default=None, help="split each line into KEY SEP VALUE at the first SEP"
    )
    produce.add_argument(
        "--partition", type=_non_negative_int("--partition"), default=None, help="partition N"
    )
    produce.add_argument(
        "--header",
        action="append",
        default=[],
        type=_header,
        metavar="K=V",
        help="a header on every record (repeatable)",
    )
    produce.set_defaults(handler=_cmd_produce)

    consume = sub.add_parser("consume", help="print records, one per line")
    consume.add_argument("topic")
    # where to start: one of these (argparse refuses two, naming both)
    start_at = consume.add_mutually_exclusive_group()
    start_at.add_argument("--from-beginning", action="store_true", help="same as --offset earliest")
    consume.add_argument(
        "--partition", type=_non_negative_int("--partition"), default=None, help="only partition N"
    )
    start_at.add_argument(
        "--offset",
        type=_offset_arg,
        default=None,
        metavar="N|earliest|latest",
        help="where to start in every partition read (default latest)",
    )
    start_at.add_argument(
        "--from-timestamp",
        type=_non_negative_int("--from-timestamp"),
        default=None,
        metavar="MS",
        help="start each partition at its first record appended at or after MS (ms since the "
        "epoch), found through the partition's time index; at its end when there is none",
    )
    consume.add_argument("--max", type=_positive_int("--max"), default=None, dest="max_records")
    consume.add_argument("--print-offsets", action="store_true")
    consume.add_argument("--print-key", action="store_true", help="print KEY<TAB>VALUE")
    consume.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        help="json: one object per record (topic, partition, offset, timestamp, key, value, "
        "headers; bytes that are not UTF-8 as base64 under key_b64/value_b64)",
    )
    consume.add_argument(
        "--timeout-ms",
        type=_positive_int("--timeout-ms"),
        default=None,
        help="exit when no record arrives for this long",
    )
    consume.set_defaults(handler=_cmd_consume)

    offsets = sub.add_parser(
        "offsets", help="log start, high watermark and last stable offset per partition"
    )
    offsets.add_argument("topic")
    offsets.add_argument("--format", choices=["text", "json"], default="text")
    offsets.set_defaults(handler=_cmd_offsets)

    console = sub.add_parser(
        "console",
        help="serve a read-only web page of the cluster: nodes, topics, partitions, open "
        "transactions and the Spark writers' micro-batches",
        description="Reads the cluster as a client (--servers, --auth-token, --tls-ca, as "
        "the other commands) and serves the page at http://127.0.0.1:9650/console; it "
        "refreshes itself. A browser gives the client token, when the cluster has one, "
        "as the password. A node serves the same page at /console when started with "
        "--console.",
    )
    from raftlog.console.app import add_console_arguments

    add_console_arguments(console)
    console.set_defaults(handler=_cmd_console)

    for p in (
        health,
        console,
        decommission,
        create,
        describe,
        lst,
        delete,
        alter,
        add_parts,
        transfer,
        move,
        produce,
        consume,
        offsets,
    ):
        p.add_argument("--servers", help="HOST:PORT[,HOST:PORT...] (else $RAFTLOG_SERVERS)")
        p.add_argument(
            "--auth-token",
            "--client-token",
            dest="auth_token",
            help="the client token (else $RAFTLOG_CLIENT_TOKEN or $RAFTLOG_AUTH_TOKEN)",
        )
        p.add_argument(
            "--tls-ca", help="PEM CA file: use HTTPS, verified by it (else $RAFTLOG_TLS_CA)"
        )
    # the admin role's calls (raftlog.rpc.roles): each takes the admin token
    for p in (decommission, delete, alter, add_parts, transfer, move, add_node):
        _add_admin_token_arguments(p)
    return parser


def _add_admin_token_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--admin-token",
        help="the admin token, which admin calls need (else --admin-token-file, "
        "$RAFTLOG_ADMIN_TOKEN, or a local cluster's own)",
    )
    p.add_argument(
        "--admin-token-file", metavar="PATH", help="read the admin token from PATH (first line)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # the command line after the program: a node of several shards runs it again per shard
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return 2
    from raftlog.client.errors import RaftlogError
    from raftlog.cluster import ClusterError

    try:
        return int(args.handler(args) or 0)
    except (RaftlogError, ClusterError, ValueError) as exc:
        print(f"raftlog: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


# ---------------------------------------------------------------- server / local


def _cmd_server(args: argparse.Namespace) -> int:
    from raftlog.node import run_server

    return run_server(args)


def _cmd_local_start(args: argparse.Namespace) -> int:
    """Print the servers on stdout; a node that is down is a warning on stderr with the
    end of its log (the cluster serves while a majority runs)."""
    from raftlog.cluster import start_cluster

    cluster = start_cluster(
        args.data_dir,
        args.nodes,
        extra_args=[
            "--default-partitions",
            str(args.default_partitions),
            *(["--shards", str(args.shards)] if args.shards else []),
            *(["--flush-scope", args.flush_scope] if args.flush_scope else []),
        ],
    )
    for flag in ("--shards", "--flush-scope"):
        asked = getattr(args, flag[2:].replace("-", "_"))
        # a node without --flush-scope in its argv runs the server's default
        kept = cluster.flag(flag) or (FLUSH_SCOPE_NODE if flag == "--flush-scope" else None)
        if asked is not None and kept is not None and str(asked) != kept:
            print(
                f"raftlog: warning: {flag} {asked} ignored: the local cluster in "
                f"{cluster.data_dir} was created with {flag} {kept}; stop it and use "
                "another --data-dir for a cluster with other flags",
                file=sys.stderr,
            )
    for failure in cluster.down:
        print(f"raftlog: warning: {failure.describe()}", file=sys.stderr)
    if cluster.down:
        print(
            f"raftlog: warning: serving with {len(cluster.nodes) - len(cluster.down)} of "
            f"{len(cluster.nodes)} nodes; run `raftlog local start` again once the cause is fixed",
            file=sys.stderr,
        )
    print(",".join(cluster.servers))
    if cluster.kafka_bootstrap:
        # stdout stays the servers line (scripts read it); the Kafka door beside it
        print(
            f"raftlog: Kafka clients: bootstrap.servers={','.join(cluster.kafka_bootstrap)}",
            file=sys.stderr,
        )
    return 0


def _cmd_local_add_node(args: argparse.Namespace) -> int:
    from raftlog.cluster import add_node

    node = add_node(args.data_dir, admin_token=_admin_token(args))
    if args.format == "json":
        print(json.dumps({"node_id": node.node_id, "address": node.address, "pid": node.pid}))
    else:
        print(f"node {node.node_id} {node.address}")
    return 0


def _cmd_local_status(args: argparse.Namespace) -> int:
    from raftlog.cluster import cluster_status, default_data_dir, load_cluster

    cluster = load_cluster(args.data_dir)
    if cluster is None:
        print(
            f"no local cluster in {args.data_dir or default_data_dir()}; "
            "start one with `raftlog local start`",
            file=sys.stderr,
        )
        return 1
    print(f"data dir: {cluster.data_dir}")
    if cluster.kafka_bootstrap:
        print(f"kafka bootstrap: {','.join(cluster.kafka_bootstrap)}")
    for st in cluster_status(cluster):
        h = st["health"] or {}
        state = "up" if st["alive"] else "down"
        leads = h.get("leader_of", "-")
        kafka = f"kafka {st['kafka']}  " if st["kafka"] else ""
        print(
            f"node {st['node_id']}  {st['address']}  {kafka}pid {st['pid']}  {state}  "
            f"controller leader {h.get('controller_leader', '-')}  "
            f"groups {h.get('groups', '-')}  leading {leads}"
        )
    _print_topic_disk(cluster)
    return 0


def _print_topic_disk(cluster: Any) -> None:
    """The disk each topic takes on the local cluster's nodes (all replicas), and what
    deleted topics still hold until the nodes remove it."""
    from raftlog.cluster import topic_disk_usage
    from raftlog.health import format_bytes

    usage = topic_disk_usage(cluster)
    live = [u for u in usage if u.replicas]
    width = max([len("topic"), *(len(u.topic) for u in live)])
    print(f"{'topic':<{width}}  partitions  replicas  disk")
    for u in live:
        print(f"{u.topic:<{width}}  {u.partitions:>10}  {u.replicas:>8}  {format_bytes(u.bytes)}")
    total = sum(u.bytes for u in live)
    print(f"{'total':<{width}}  {'':>10}  {'':>8}  {format_bytes(total)}")
    deleted = sum(u.deleted_bytes for u in usage)
    if deleted:
        print(
            f"deleted topics, not yet removed: {format_bytes(deleted)} (a running node "
            "removes them --file-delete-delay-ms after the delete, 60 s by default)"
        )


def _cmd_local_stop(args: argparse.Namespace) -> int:
    from raftlog.cluster import cluster_status, default_data_dir, load_cluster, stop_cluster

    recorded = load_cluster(args.data_dir)
    if recorded is None:
        print(f"no local cluster in {args.data_dir or default_data_dir()}", file=sys.stderr)
        return 1
    pids = [str(st["pid"]) for st in cluster_status(recorded) if st["alive"]]
    stop_cluster(args.data_dir)
    if pids:
        print("stopped pids " + " ".join(pids))
    else:
        print(f"no node of the local cluster in {recorded.data_dir} was running")
    return 0


def _cmd_node_purge_moved_aside(args: argparse.Namespace) -> int:
    from raftlog.storage import identity

    root = pathlib.Path(args.data_dir)
    if not root.is_dir():
        print(f"raftlog: --data-dir {root}: not a directory", file=sys.stderr)
        return 2
    try:  # only a node's data directory: never delete under another one
        identity.require_node_dir(root)
    except identity.NotANodeDirectory as exc:
        print(f"raftlog: {exc}", file=sys.stderr)
        return 2
    found = identity.moved_aside(root)
    if not args.dry_run:
        found = identity.purge_moved_aside(root)
    for p in found:
        print(f"{'would delete' if args.dry_run else 'deleted'} {p}")
    if not found:
        print(f"nothing moved aside under {root}")
    return 0


def _cmd_cluster_health(args: argparse.Namespace) -> int:
    """Exit 0 when healthy, 1 when not (and when no cluster is found); with --watch,
    as the last report printed."""
    if args.count is not None and not args.watch:
        raise ValueError("--count: only with --watch (it bounds the reports printed)")
    from raftlog.client import RaftlogClient, parse_servers
    from raftlog.cluster import load_cluster
    from raftlog.health import check_health

    # Unlike the data commands, a recorded local cluster is checked even when none of
    # its nodes runs: "all down" is a health report, not a missing cluster.
    recorded = None if args.servers or os.environ.get("RAFTLOG_SERVERS") else load_cluster()
    if recorded is not None:
        servers = recorded.servers
    else:
        servers, recorded = resolve_servers(args.servers)
    token, ca_file = _credentials(args, recorded)

    def show(report: Any) -> None:
        if args.format == "json":
            doc = report.to_dict()
            if args.watch:
                doc["time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            print(json.dumps(doc) if args.watch else json.dumps(doc, indent=2), flush=True)
        else:
            if args.watch:
                print(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')}", flush=True)
            print(report.render(), flush=True)

    async def go() -> bool:
        healthy = False
        async with RaftlogClient(
            parse_servers(servers), auth_token=token, tls_ca_file=ca_file, request_timeout_s=10.0
        ) as client:
            printed = 0
            while True:
                report = await check_health(client, servers, token)
                show(report)
                healthy = report.healthy
                printed += 1
                if not args.watch or (args.count is not None and printed >= args.count):
                    return healthy
                await asyncio.sleep(args.interval)

    # Ctrl-C ends a watch: main() turns the KeyboardInterrupt into exit status 130
    return 0 if asyncio.run(go()) else 1


def _cmd_console(args: argparse.Namespace) -> int:
    from raftlog.console.app import run_console

    servers, recorded = resolve_servers(args.servers)
    token, ca_file = _credentials(args, recorded)
    return run_console(args, servers, token, ca_file)


# ---------------------------------------------------------------- client commands


def resolve_servers(servers: str | None) -> tuple[list[str], Any]:
    """(servers, the local cluster they came from or None) from the flag, the env or
    the default local cluster."""
    from raftlog.client import parse_servers
    from raftlog.cluster import load_cluster, running

    if servers:
        return parse_servers(servers), None
    env = os.environ.get("RAFTLOG_SERVERS")
    if env:
        return parse_servers(env), None
    cluster = load_cluster()
    if cluster is not None and running(cluster):
        return cluster.servers, cluster
    raise ValueError(NO_CLUSTER)


def _credentials(args: argparse.Namespace, recorded: Any) -> tuple[str | None, str | None]:
    """(client token, CA file): each from its flag, else its environment variable
    (RAFTLOG_CLIENT_TOKEN or RAFTLOG_AUTH_TOKEN, RAFTLOG_TLS_CA), else what the local
    cluster ``recorded``."""
    token = (
        args.auth_token
        or os.environ.get("RAFTLOG_CLIENT_TOKEN")
        or os.environ.get("RAFTLOG_AUTH_TOKEN")
    )
    ca_file = args.tls_ca or os.environ.get("RAFTLOG_TLS_CA")
    if recorded is not None:
        token, ca_file = token or recorded.auth_token, ca_file or recorded.tls_ca_file
    return token, ca_file


def _admin_token(args: argparse.Namespace, recorded: Any = None) -> str | None:
    """The admin token of an admin command: ``--admin-token``, else
    ``--admin-token-file``, else $RAFTLOG_ADMIN_TOKEN, else the one the local cluster
    ``recorded`` (its own, in its cluster.json). ValueError names the flag when the
    file cannot be read or is empty."""
    from raftlog.node.config import resolve_token
    from raftlog.rpc.roles import Role

    found = resolve_token(args, Role.ADMIN) if hasattr(args, "admin_token") else None
    if found is None and recorded is not None:
        found = getattr(recorded, "admin_token", None)
    return found


def _client(args: argparse.Namespace) -> Any:
    from raftlog.client import RaftlogClient

    servers, recorded = resolve_servers(args.servers)
    token, ca_file = _credentials(args, recorded)
    return RaftlogClient(
        servers,
        auth_token=token,
        admin_token=_admin_token(args, recorded),
        tls_ca_file=ca_file,
        request_timeout_s=30.0,
    )


def _run(args: argparse.Namespace, fn: Any) -> int:
    async def go() -> int:
        async with _client(args) as client:
            return int(await fn(client) or 0)

    return asyncio.run(go())


def _topic_configs_arg(args: argparse.Namespace) -> dict[str, str]:
    """``--config K=V`` items, validated before anything is sent (ValueError names the key)."""
    from raftlog.controller.topic_config import parse_assignments

    return parse_assignments(args.config, "--config")


def _cmd_topic_create(args: argparse.Namespace) -> int:
    configs = _topic_configs_arg(args)

    async def go(client: Any) -> None:
        meta = await client.create_topic(
            args.name,
            args.partitions,
            args.replication_factor,
            exist_ok=args.if_not_exists,
            configs=configs,
        )
        if args.format == "json":
            doc = {
                "topic": meta.name,
                "topic_id": meta.topic_id,
                "partitions": len(meta.partitions),
                "replication_factor": meta.replication_factor,
                "configs": configs,
            }
            print(json.dumps(doc))
            return
        print(
            f"created topic {meta.name}: {len(meta.partitions)} partitions, "
            f"replication factor {meta.replication_factor}"
            + "".join(f", {k}={v}" for k, v in configs.items())
        )

    return _run(args, go)


def _cmd_topic_describe(args: argparse.Namespace) -> int:
    async def go(client: Any) -> None:
        meta = await client.describe_topic(args.name)
        configs = await client.describe_configs(args.name)
        if args.format == "json":
            doc = {
                "topic": meta.name,
                "topic_id": meta.topic_id,
                "replication_factor": meta.replication_factor,
                "schema": meta.schema is not None,
                "partitions": [
                    {
                        "partition": p.partition,
                        "leader": p.leader,
                        "replicas": list(p.replicas),
                        "log_start": p.start_offset,
                        "high_watermark": p.high_watermark,
                        "last_stable_offset": p.last_stable_offset,
                    }
                    for p in meta.partitions
                ],
                "configs": configs.configs,
                "overrides": configs.overrides,
            }
            print(json.dumps(doc))
            return
        print(
            f"topic {meta.name}  id {meta.topic_id}  partitions {len(meta.partitions)}  "
            f"replication factor {meta.replication_factor}  "
            f"schema {'yes' if meta.schema else 'none'}"
        )
        for p in meta.partitions:
            print(
                f"  partition {p.partition}  leader {p.leader}  replicas "
                f"{','.join(map(str, p.replicas))}  start {p.start_offset}  "
                f"high watermark {p.high_watermark}  lso {p.last_stable_offset}"
            )
        _print_configs(configs)

    return _run(args, go)


def _print_configs(configs: Any) -> None:
    for key, value in configs.configs.items():
        print(f"  config {key}={value}{'' if key in configs.overrides else '  (default)'}")


def _cmd_topic_list(args: argparse.Namespace) -> int:
    async def go(client: Any) -> None:
        names = await client.list_topics()
        if args.format == "json":
            print(json.dumps({"topics": names}))
            return
        for name in names:
            print(name)

    return _run(args, go)


def _cmd_topic_delete(args: argparse.Namespace) -> int:
    async def go(client: Any) -> None:
        await client.delete_topic(args.name)
        if args.format == "json":
            print(json.dumps({"deleted": args.name}))
            return
        print(f"deleted topic {args.name}")

    return _run(args, go)


def _cmd_topic_alter_config(args: argparse.Namespace) -> int:
    from raftlog.controller.topic_config import check_key

    configs = _topic_configs_arg(args)
    for key in args.delete_config:
        try:
            check_key(key)
        except ValueError as exc:
            raise ValueError(f"--delete-config: {exc}") from None
    if not configs and not args.delete_config:
        raise ValueError(
            "alter-config: expected at least one --config KEY=VALUE or --delete-config KEY"
        )

    async def go(client: Any) -> None:
        after = await client.alter_config(args.name, configs, args.delete_config)
        if args.format == "json":
            print(
                json.dumps(
                    {"topic": after.name, "configs": after.configs, "overrides": after.overrides}
                )
            )
            return
        print(f"altered topic {after.name}")
        _print_configs(after)

    return _run(args, go)


def _flag_error(exc: Exception, field: str, flag: str) -> Exception:
    """A server's refusal of request field ``field`` as the CLI flag ``flag`` names it."""
    message = str(exc)
    if message.startswith(f"{field}: "):
        return ValueError(f"{flag}: {message[len(field) + 2 :]}")
    return exc


def _cmd_topic_add_partitions(args: argparse.Namespace) -> int:
    from raftlog.client.errors import InvalidRequestError

    async def go(client: Any) -> None:
        before = len((await client.describe_topic(args.name)).partitions)
        try:
            meta = await client.create_partitions(args.name, args.partitions)
        except InvalidRequestError as exc:
            raise _flag_error(exc, "partitions", "--partitions") from None
        added = [p for p in meta.partitions if p.partition >= before]
        if args.format == "json":
            doc = {
                "topic": meta.name,
                "partitions": len(meta.partitions),
                "added": [{"partition": p.partition, "replicas": list(p.replicas)} for p in added],
            }
            print(json.dumps(doc))
            return
        print(f"topic {meta.name}: {len(meta.partitions)} partitions ({len(added)} added)")
        for p in added:
            print(f"  partition {p.partition}  replicas {','.join(map(str, p.replicas))}")

    return _run(args, go)


def _cmd_partition_transfer_leadership(args: argparse.Namespace) -> int:
    from raftlog.client.errors import InvalidRequestError

    topic, part = args.partition

    async def go(client: Any) -> None:
        try:
            leader = await client.transfer_leadership(topic, part, args.to)
        except InvalidRequestError as exc:
            raise _flag_error(exc, "target_node", "--to") from None
        if args.format == "json":
            print(json.dumps({"topic": topic, "partition": part, "leader": leader}))
            return
        print(f"{topic}/{part}: node {leader} leads")

    return _run(args, go)


def _until_done(timeout_s: float) -> Any:
    """A tenacity poll: call again every 0.5 s while the result is not done (False, or a
    tuple whose last item is False), up to ``timeout_s``; then the last result."""
    from tenacity import (
        AsyncRetrying,
        RetryCallState,
        retry_if_result,
        stop_after_delay,
        wait_fixed,
    )

    def pending(result: Any) -> bool:
        return not (result[-1] if isinstance(result, tuple) else result)

    def still_going(state: RetryCallState) -> Any:
        assert state.outcome is not None  # set by the attempt that ran last
        return state.outcome.result()

    return AsyncRetrying(
        stop=stop_after_delay(timeout_s),
        wait=wait_fixed(0.5),
        retry=retry_if_result(pending),
        retry_error_callback=still_going,
    )


def _cmd_cluster_decommission(args: argparse.Namespace) -> int:
    """Exit 0 once the node is removed; 1 when refused or still draining after
    --timeout-s (the draining goes on)."""
    from raftlog.client.errors import InvalidRequestError

    async def go(client: Any) -> int:
        known = {n.node_id: n.address for n in (await client.metadata()).nodes}
        # The first call starts the draining; the same call again says how far it got.
        try:
            remaining, removed = await _until_done(args.timeout_s)(
                client.decommission_node, args.node
            )
        except InvalidRequestError as exc:
            raise _flag_error(exc, "node_id", "NODE") from None
        stopped = _forget_local_node(args.node, known.get(args.node)) if removed else None
        if args.format == "json":
            doc = {"node": args.node, "removed": removed, "remaining": remaining}
            if stopped is not None:
                doc["stopped_pid"] = stopped
            print(json.dumps(doc))
        elif removed:
            print(f"node {args.node} decommissioned: it holds no replica and left the cluster")
            if stopped is not None:
                print(
                    f"stopped its process (pid {stopped}) and dropped it from the local "
                    "cluster's cluster.json"
                )
        if not removed:
            print(
                f"raftlog: error: node {args.node} still holds replicas of {remaining} "
                f"partition(s) after {args.timeout_s:g}s (--timeout-s); the draining goes on",
                file=sys.stderr,
            )
            return 1
        return 0

    return _run(args, go)


def _forget_local_node(node_id: int, address: str | None) -> int | None:
    """When the decommissioned node is one of the recorded local cluster's (same id and
    address), stop it and drop it from cluster.json, so that ``local start`` does not
    start it again; its PID, else None."""
    from raftlog.cluster import forget_node, load_cluster

    recorded = load_cluster()
    if recorded is None or address is None:
        return None
    if not any(n.node_id == node_id and n.address == address for n in recorded.nodes):
        return None
    return forget_node(recorded.data_dir, node_id).pid


def _cmd_partition_move(args: argparse.Namespace) -> int:
    """Exit 0 once the partition runs with exactly --replicas; 1 when refused or still
    moving after --timeout-s (the move goes on)."""
    from raftlog.client.errors import InvalidRequestError

    topic, part = args.partition

    async def go(client: Any) -> int:
        # The first call starts the move; the same call again answers whether it is done.
        try:
            done = await _until_done(args.timeout_s)(
                client.move_partition, topic, part, args.replicas
            )
        except InvalidRequestError as exc:
            raise _flag_error(exc, "replicas", "--replicas") from None
        replicas = ",".join(map(str, args.replicas))
        if args.format == "json":
            doc = {"topic": topic, "partition": part, "replicas": args.replicas, "done": done}
            print(json.dumps(doc))
        elif done:
            print(f"{topic}/{part}: replicas {replicas}")
        if not done:
            print(
                f"raftlog: error: {topic}/{part} is still moving to {replicas} after "
                f"{args.timeout_s:g}s (--timeout-s); the move goes on in the cluster",
                file=sys.stderr,
            )
            return 1
        return 0

    return _run(args, go)


def _cmd_produce(args: argparse.Namespace) -> int:
    from raftlog.client import frame_records
    from raftlog.records.framing import Record, frame_keyed

    if args.key_separator == "":
        raise ValueError("--key-separator must not be empty")
    sep = args.key_separator.encode("utf-8") if args.key_separator is not None else None
    headers = tuple(args.header)
    keyed = sep is not None or bool(headers)

    async def go(client: Any) -> None:
        meta = await client.describe_topic(args.topic)
        nparts = len(meta.partitions)
        if args.partition is not None and args.partition >= nparts:
            raise ValueError(
                f"--partition {args.partition} is out of range: topic {args.topic!r} has "
                f"{nparts} partitions (0..{nparts - 1})"
            )
        sent = 0
        stdin = sys.stdin.buffer

        def place(line: bytes, index: int) -> tuple[int, Record]:
            key = None
            value = line
            if sep is not None and sep in line:
                key, value = line.split(sep, 1)
            if args.partition is not None:
                part = args.partition
            elif key is not None:
                part = (murmur2(key) & 0x7FFFFFFF) % nparts  # Kafka's default partitioner
            else:
                part = index % nparts
            return part, Record(value, key, headers)

        async def flush(lines: list[bytes], first_index: int) -> None:
            by_part: dict[int, list[Record]] = {}
            for k, line in enumerate(lines):
                part, record = place(line, first_index + k)
                by_part.setdefault(part, []).append(record)

            def payload(records: list[Any]) -> bytes:
                if keyed:
                    return frame_keyed(records)
                return frame_records([r.value for r in records])

            await asyncio.gather(
                *(send(p, payload(recs), len(recs)) for p, recs in by_part.items())
            )

        # With acks=all each partition gets an idempotent producer, as Kafka's console
        # producer has by default: a request retried after its first attempt was written
        # (a timeout, a leader change) is not written twice. acks 1 and 0 write plainly
        # (idempotence needs acks=all, as in Kafka).
        producers: dict[int, Any] = {}

        async def send(p: int, data: bytes, count: int) -> None:
            if args.acks != "all":
                await client.produce(args.topic, p, [(data, count)], acks=args.acks)
                return
            if p not in producers:
                producers[p] = await client.idempotent_producer(args.topic, p, acks="all")
            await producers[p].send_batch(data, count)

        pending: list[bytes] = []
        try:
            while True:
                raw = await asyncio.to_thread(stdin.readline)
                if raw:
                    pending.append(raw.rstrip(b"\r\n") if raw.endswith(b"\n") else raw)
                if pending and (not raw or len(pending) >= args.batch_lines):
                    await flush(pending, sent)
                    sent += len(pending)
                    pending = []
                if not raw:
                    break
        finally:
            for producer in producers.values():
                await producer.close(flush=False)  # every send was awaited
        print(f"produced {sent} records to {args.topic}", file=sys.stderr)

    return _run(args, go)


def _records(payload: bytes, record_count: int) -> list[Any]:
    """Records of a payload: CLI framing (keyed or plain), else Arrow IPC rows as JSON
    values, else one opaque value. PayloadError (before anything is allocated from the
    record count) when the payload cannot hold ``record_count`` records."""
    from raftlog.records.framing import Record, unframe_any
    from raftlog.records.payload_check import check_payload

    check_payload(payload, record_count)
    records = unframe_any(payload, record_count)
    if records is not None:
        return records
    try:
        import pyarrow.ipc as ipc

        table = ipc.open_stream(payload).read_all()
        return [Record(json.dumps(row, default=str).encode()) for row in table.to_pylist()]
    except Exception:  # not Arrow either: an opaque value
        return [Record(bytes(payload))]


def _values(payload: bytes, record_count: int) -> list[bytes]:
    """Record values of a payload (None values print as empty)."""
    return [r.value or b"" for r in _records(payload, record_count)]


def _json_bytes(name: str, data: bytes | None) -> dict[str, Any]:
    if data is None:
        return {name: None}
    try:
        return {name: data.decode("utf-8")}
    except UnicodeDecodeError:
        import base64

        return {f"{name}_b64": base64.b64encode(data).decode("ascii")}


def _cmd_consume(args: argparse.Namespace) -> int:
    start_at = (
        args.offset
        if args.offset is not None
        else ("earliest" if args.from_beginning else "latest")
    )

    async def go(client: Any) -> int:
        meta = await client.describe_topic(args.topic)
        parts = [p.partition for p in meta.partitions]
        if args.partition is not None:
            if args.partition not in parts:
                raise ValueError(
                    f"--partition {args.partition} is out of range: topic {args.topic!r} has "
                    f"{len(parts)} partitions (0..{len(parts) - 1})"
                )
            parts = [args.partition]
        positions: dict[int, int] = {}
        for p in parts:
            start, _hwm, lso = await client.list_offsets(args.topic, p)
            if args.from_timestamp is not None:
                # the leader's time index, as the Spark source's startingTimestamp
                found, _ts, lso = await client.offset_for_timestamp(
                    args.topic, p, args.from_timestamp
                )
                positions[p] = lso if found < 0 else max(start, found)
            elif start_at == "earliest":
                positions[p] = start
            elif start_at == "latest":
                positions[p] = lso
            else:
                positions[p] = max(start, int(start_at))
        from raftlog.client import CorruptBatchError
        from raftlog.records.payload_check import PayloadError

        printed = 0
        corrupt = 0  # batches reported on stderr and skipped: the exit status is 1

        def skip(exc: CorruptBatchError) -> None:
            nonlocal corrupt
            corrupt += 1
            print(f"raftlog consume: skipped a {exc}", file=sys.stderr)

        out = sys.stdout.buffer
        last_record = time.monotonic()
        while args.max_records is None or printed < args.max_records:
            got_any = False
            for part, offset in positions.items():
                try:
                    r = await client.fetch(args.topic, part, offset)
                except CorruptBatchError as exc:
                    skip(exc)
                    positions[part] = exc.last_offset + 1
                    got_any = True
                    continue
                for batch in r.batches:
                    try:
                        records = _records(batch.payload, batch.record_count)
                    except PayloadError as exc:
                        skip(
                            CorruptBatchError(
                                args.topic, part, batch.base_offset, batch.last_offset, str(exc)
                            )
                        )
                        continue
                    for i, rec in enumerate(records):
                        off = batch.base_offset + i
                        if off < offset:
                            continue
                        out.write(_render(args, part, off, batch.timestamp_ms, rec))
                        printed += 1
                        got_any = True
                        if args.max_records is not None and printed >= args.max_records:
                            out.flush()
                            return 1 if corrupt else 0
                positions[part] = max(offset, r.next_offset)
            out.flush()
            if got_any:
                last_record = time.monotonic()
            else:
                if (
                    args.timeout_ms is not None
                    and (time.monotonic() - last_record) * 1000 >= args.timeout_ms
                ):
                    return 1 if corrupt else 0
                await asyncio.sleep(0.1)
        return 1 if corrupt else 0

    return _run(args, go)


def _render(args: argparse.Namespace, part: int, offset: int, batch_ms: int, rec: Any) -> bytes:
    """One output line for a record, as --format/--print-key/--print-offsets ask."""
    if args.format == "json":
        doc: dict[str, Any] = {
            "topic": args.topic,
            "partition": part,
            "offset": offset,
            "timestamp": rec.timestamp_ms if rec.timestamp_ms is not None else batch_ms,
            "timestampType": "CreateTime" if rec.timestamp_ms is not None else "LogAppendTime",
        }
        doc.update(_json_bytes("key", rec.key))
        doc.update(_json_bytes("value", rec.value))
        doc["headers"] = [{"key": k, **_json_bytes("value", v)} for k, v in rec.headers]
        return json.dumps(doc).encode() + b"\n"
    line = b""
    if args.print_offsets:
        line += f"{part}\t{offset}\t".encode()
    if args.print_key:
        line += (rec.key if rec.key is not None else b"null") + b"\t"
    return line + (rec.value or b"") + b"\n"


def _cmd_offsets(args: argparse.Namespace) -> int:
    async def go(client: Any) -> None:
        meta = await client.describe_topic(args.topic)
        rows = []
        for p in meta.partitions:
            start, hwm, lso = await client.list_offsets(args.topic, p.partition)
            rows.append(
                {
                    "partition": p.partition,
                    "log_start": start,
                    "high_watermark": hwm,
                    "last_stable_offset": lso,
                }
            )
        if args.format == "json":
            print(json.dumps({"topic": args.topic, "partitions": rows}))
            return
        print("partition\tlog_start\thigh_watermark\tlast_stable_offset")
        for r in rows:
            print(
                f"{r['partition']}\t{r['log_start']}\t{r['high_watermark']}\t"
                f"{r['last_stable_offset']}"
            )

    return _run(args, go)


if __name__ == "__main__":
    sys.exit(main())
