#!/usr/bin/env bash
# Fetches the Apache Kafka broker jars (kafka_2.13 and its runtime deps, from Maven Central) once into
# .cache/kafka/<version>/libs, so the test setup can run a local single-node KRaft broker without Docker.
# Re-running is a no-op once the jars are there. Prints the libs directory on its last stdout line.
# Needs Java 17+ (to run the broker later) and Maven (to fetch).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
pom="$root/scripts/kafka/pom.xml"
# The pom is the single source of the default version; KAFKA_VERSION overrides it.
default_version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$pom" | head -n1)"
version="${KAFKA_VERSION:-$default_version}"
dest="$root/.cache/kafka/$version"
libs="$dest/libs"

if [[ -f "$dest/.complete" ]]; then
  echo "$libs"
  exit 0
fi

if ! command -v mvn >/dev/null 2>&1; then
  echo "fetch-kafka: Maven (mvn) is not on PATH; install it (apt-get install maven) or set KAFKA_BROKERS" >&2
  exit 1
fi

echo "fetch-kafka: fetching Apache Kafka $version broker jars from Maven Central into $libs ..." >&2
tmp="$dest.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT

attempt=1
until mvn -q -B -ntp -f "$pom" -Dkafka.version="$version" \
    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp/libs" >"$tmp/mvn.log" 2>&1; do
  if (( attempt >= 3 )); then
    echo "fetch-kafka: mvn failed $attempt times; last output:" >&2
    tail -n 40 "$tmp/mvn.log" >&2
    exit 1
  fi
  echo "fetch-kafka: mvn failed (attempt $attempt), retrying ..." >&2
  attempt=$((attempt + 1))
  sleep 2
done

if ! ls "$tmp/libs/kafka_2.13-$version.jar" >/dev/null 2>&1; then
  echo "fetch-kafka: kafka_2.13-$version.jar missing after mvn; output:" >&2
  tail -n 40 "$tmp/mvn.log" >&2
  exit 1
fi

# Move into place atomically so a concurrent or interrupted run never sees half a directory.
rm -rf "$libs"
mkdir -p "$dest"
mv "$tmp/libs" "$libs"
touch "$dest/.complete"
echo "fetch-kafka: $(ls "$libs" | wc -l) jars ($(du -sh "$libs" | cut -f1)) in $libs" >&2
echo "$libs"
