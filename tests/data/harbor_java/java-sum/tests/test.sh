#!/bin/bash
# reward 1 when the program's output is right and java/javac are the JDK under JAVA_HOME=/opt/java/openjdk
mkdir -p /logs/verifier
reward=0
if [ "$(cat /app/out.txt 2>/dev/null)" = "sum=42" ] && [ "$JAVA_HOME" = /opt/java/openjdk ] \
   && [ "$(command -v javac)" = /opt/java/openjdk/bin/javac ] && [ "$(command -v java)" = /opt/java/openjdk/bin/java ] \
   && [ -f /app/Sum.class ]; then
  reward=1
fi
echo "$reward" > /logs/verifier/reward.txt
