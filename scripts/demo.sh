#!/usr/bin/env bash
# The main job: a demo pipeline on the embedded local cluster.
source "$(dirname "$0")/env.sh"
exec python -m pyspark_raftlog.demo "$@"
