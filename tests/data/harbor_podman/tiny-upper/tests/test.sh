#!/bin/bash
# reward 1 when /app/out.txt is /app/data.txt in upper case and the image's RUN, ENV and WORKDIR took effect
mkdir -p /logs/verifier
reward=0
if [ "$(cat /app/out.txt 2>/dev/null)" = "HELLO FROM A CONTAINER" ] && [ "$(cat /app/built-by-run.txt)" = built ] \
   && [ "$TINY_TASK_MARKER" = built ]; then
  reward=1
fi
echo "$reward" > /logs/verifier/reward.txt
