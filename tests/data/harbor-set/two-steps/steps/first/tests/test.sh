#!/bin/bash
# 1 only where the Dockerfile's WORKDIR is the working directory and its ENV is set
echo "pwd=$(pwd) probe=${PROBE_VAR:-unset}" > /logs/verifier/where.txt
if [ "$(pwd)" = /work ] && [ "${PROBE_VAR:-}" = probe-value ]; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi
