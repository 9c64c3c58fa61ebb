#!/usr/bin/env bash
# The main job on the sample data: ingest the sample update files, seal and compact,
# run the sample pipelines on Spark, and query their output traces.
#
#   sample_data/run_samples.sh            # store in ./ddstore (or $DDCLI_STORE)
#
# Safe to run again: re-ingesting a file, sealing to the same upper and running a pipeline
# with no new input are all no-ops, so a second run changes nothing and prints the same
# answers. Every step is a plain ddcli command, as a cron job or an Airflow task would run it.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export DDCLI_STORE=${DDCLI_STORE:-$PWD/ddstore}
if command -v ddcli >/dev/null 2>&1; then ddcli=(ddcli); else ddcli=(python -m ddcli); fi
dd() { echo "+ ddcli $*" >&2; "${ddcli[@]}" "$@"; }

echo "== store: $DDCLI_STORE" >&2

# 1. ingest: the first ingest of a trace creates it; times are in the files.
dd ingest words "$here/words_1.csv"
dd ingest words "$here/words_2.csv"
dd ingest orders "$here/orders_1.csv" "$here/orders_2.csv" --key customer
dd ingest customers "$here/customers_1.csv" "$here/customers_2.csv"
dd ingest edges "$here/edges_1.csv" --key src
dd ingest roots "$here/roots_1.csv"
# product times (version, round): the store cannot guess when such a time is complete,
# so the updates wait (pending) until `advance --upper` seals them
dd ingest strings "$here/strings_1.csv" "$here/strings_2.csv"

# 2. advance: seal the product times before (2,0); allow merging history before 3 (the
#    pipelines hold back what they still need)
dd advance strings --upper "(2,0)"
dd advance words --since 3

# 3. run the pipelines: each processes every input update not yet processed, one after
#    the other in one Spark session (each its own commit); a .sql file is a SQL model
dd run "$here/pipelines/"{wordcount,length_count,join_example,reach}.py "$here/models/regions.sql"

# 4. compact: merge layers, advance times to each trace's since, collect garbage
dd compact

# 5. query the outputs
dd query counts
dd query counts --as-of 3
dd query length_counts --as-of "(1,1)"
dd history length_counts
dd query revenue --as-of 4
dd query revenue --as-of 5
dd query reach --where "root = 'a'"
dd query region_revenue
dd query largest_orders
dd status
