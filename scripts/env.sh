# shellcheck shell=bash
# Sourced by scripts/demo.sh and scripts/test.sh: makes .venv, installs the
# project into it, makes sure Java 17+ is present, and exports PYSPARK_PYTHON.
# Idempotent: a second run only re-installs when setup.cfg or pyproject.toml changed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo "$@"
    else return 1
    fi
}

apt_install() {
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "raftlog setup: apt-get is not available; please install: $*" >&2
        return 1
    fi
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null \
        && as_root env DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes apt-get install -y -q "$@" >/dev/null \
        || { echo "raftlog setup: could not install $* (need root or sudo and network access to Debian's mirrors)" >&2; return 1; }
}

PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
if [ ! -x .venv/bin/python ]; then
    echo "raftlog setup: creating .venv with $PYTHON" >&2
    if ! "$PYTHON" -m venv .venv 2>/dev/null; then
        rm -rf .venv
        echo "raftlog setup: python venv support is missing; installing python3-venv" >&2
        apt_install python3-venv || exit 1
        "$PYTHON" -m venv .venv
    fi
fi

# Strict editable mode links every source file into build/, so that Spark, which
# finds `pyspark_<name>` data sources with pkgutil.iter_modules(), sees the
# connector; the default (lenient) mode serves it through an import hook that
# pkgutil cannot list. A new module therefore needs a re-install: the stamp
# records the package files and the set-up files it was installed from.
STAMP=.venv/.raftlog-installed
WANT="$(cat setup.cfg setup.py pyproject.toml; find raftlog connector -name '*.py' | sort)"
WANT="$(printf '%s' "$WANT" | cksum)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
    # pip's own chatter (its version notice, index warnings, setuptools' banner about
    # editable installs) reads like a failure to a newcomer: it goes to a log file, and
    # the terminal gets one line, or the log's end when pip fails.
    PIP_LOG=.venv/pip-install.log
    echo "raftlog setup: installing raftlog and its dependencies into .venv (a few minutes the first time)" >&2
    before="$(.venv/bin/python -m pip list --format=freeze 2>/dev/null | wc -l)"
    if ! { PIP_DISABLE_PIP_VERSION_CHECK=1 .venv/bin/python -m pip install -q --upgrade pip \
            && PIP_DISABLE_PIP_VERSION_CHECK=1 .venv/bin/python -m pip install -q \
                -e ".[test,dev,bench,fast]" --config-settings editable_mode=strict; } \
            >"$PIP_LOG" 2>&1; then
        echo "raftlog setup: pip failed; the end of $ROOT/$PIP_LOG:" >&2
        tail -n 30 "$PIP_LOG" >&2
        exit 1
    fi
    after="$(.venv/bin/python -m pip list --format=freeze 2>/dev/null | wc -l)"
    echo "raftlog setup: installed raftlog into .venv ($after packages, $((after - before)) new; pip's output: $PIP_LOG)" >&2
    printf '%s' "$WANT" > "$STAMP"
fi
# Bytecode for raftlog's own modules, as a wheel install has: with PYTHONDONTWRITEBYTECODE
# set, nothing else writes it, and every new Python worker of Spark compiled the client and
# the connector from source before its first task (1.4 CPU-s of a first df.write's task
# workers, py-spy, 2026-12-01). Only stale files are compiled again.
.venv/bin/python -m compileall -q raftlog connector build >/dev/null 2>&1 || true

java_major() {
    java -version 2>&1 | awk -F'"' '/version/ {split($2, v, "."); print (v[1] == "1" ? v[2] : v[1]); exit}'
}
if ! command -v java >/dev/null 2>&1 || [ "$(java_major)" -lt 17 ]; then
    echo "raftlog setup: Spark needs Java 17 or newer; installing openjdk-17-jre-headless through apt" >&2
    apt_install openjdk-17-jre-headless || {
        echo "raftlog setup: install Java 17+ yourself (e.g. 'apt-get install openjdk-17-jre-headless') and re-run" >&2
        exit 1
    }
fi

# The benchmark's etcd peer, and the tests of its harness: Debian's etcd-server where
# apt can install it. Best effort: without it, only those tests fail, with this hint.
if ! command -v etcd >/dev/null 2>&1; then
    echo "raftlog setup: installing etcd-server (the benchmarks' etcd peer) through apt" >&2
    apt_install etcd-server \
        || echo "raftlog setup: etcd is missing; the etcd tests will fail until 'apt-get install etcd-server'" >&2
fi

# The network-namespace test (integration_tests/netns_hosts.py) makes its hosts with `ip`
# and cuts one off with nftables inside its namespace. Best effort, as etcd above: without
# them, that test fails naming the package.
if ! command -v nft >/dev/null 2>&1 || ! command -v ip >/dev/null 2>&1; then
    echo "raftlog setup: installing nftables and iproute2 (the network-namespace test) through apt" >&2
    apt_install nftables iproute2 \
        || echo "raftlog setup: nft or ip is missing; the network-namespace test will fail until 'apt-get install nftables iproute2'" >&2
fi

# The Kafka listener's compatibility tests (integration_tests/kafka) run kcat, the
# operators' Kafka tool, from Debian's packages. Best effort, as etcd above.
if ! command -v kcat >/dev/null 2>&1; then
    echo "raftlog setup: installing kcat (the Kafka compatibility tests) through apt" >&2
    apt_install kcat \
        || echo "raftlog setup: kcat is missing; the kcat test will fail until 'apt-get install kcat'" >&2
fi

# The console's browser test (integration_tests/console) drives Debian's headless
# Chromium through Playwright's Python package (never Playwright's own browser
# downloads). Best effort, as etcd above: without it, that test fails naming the package.
if [ ! -x /usr/bin/chromium ]; then
    echo "raftlog setup: installing chromium (the console's browser test) through apt" >&2
    apt_install chromium \
        || echo "raftlog setup: chromium is missing; the console's browser test will fail until 'apt-get install chromium'" >&2
fi

export PYSPARK_PYTHON="$ROOT/.venv/bin/python"
export PYSPARK_DRIVER_PYTHON="$ROOT/.venv/bin/python"
export PATH="$ROOT/.venv/bin:$PATH"
