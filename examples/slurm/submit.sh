#!/bin/bash
# Submits the four stages as dependent Slurm jobs: extract (array) → pairs → match (array) →
# merge + mapper. Usage: DATA=/shared/project SHARDS=32 bash submit.sh
set -euo pipefail
: "${DATA:?set DATA to the shared folder holding images/}" "${SHARDS:?set SHARDS}"
export DATA SHARDS
cd "$(dirname "$0")"
last=$((SHARDS - 1))
extract=$(sbatch --parsable --export=ALL --array="0-$last" extract.sbatch)
pairs=$(sbatch --parsable --export=ALL --dependency="afterok:$extract" pairs.sbatch)
match=$(sbatch --parsable --export=ALL --dependency="afterok:$pairs" --array="0-$last" match.sbatch)
sbatch --parsable --export=ALL --dependency="afterok:$match" merge.sbatch
