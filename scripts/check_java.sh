#!/bin/sh
# Spark (through raydp) needs Java 17. Say so clearly instead of failing deep inside a JVM launch.
if ! command -v java >/dev/null 2>&1; then
  echo "raygroups: Java 17 is required for the Spark compaction job (raydp); 'java' is not on PATH." >&2
  echo "           install it, e.g. 'apt-get install openjdk-17-jre-headless', and set JAVA_HOME." >&2
  exit 1
fi
major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1)
if [ "$major" != "17" ]; then
  echo "raygroups: Java 17 is required for Spark 3.5 through raydp; found Java ${major:-unknown}." >&2
  exit 1
fi
