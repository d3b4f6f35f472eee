#!/usr/bin/env bash
# The fault harness (crates/e2e/src/crashes, issue 43) on a local kwok cluster of its own: every
# reference scenario run fault-free twice, then perturbed at each point (the operator aborted
# right after its k-th write and started again; its k-th Pod event followed by a relist, never
# delivered, coalesced with its pod's next ones, or sending its view of the pods four events
# back for 3 s), checked during the run and at its end.
#
#   hack/faults.sh sweep                every point of every scenario and perturbation (`make test-faults`)
#   hack/faults.sh sample [N]           N points per scenario and perturbation (default 1; `make test`
#                                       runs one of inject and rollout inside hack/e2e-local.sh's cluster)
#   hack/faults.sh replay SCENARIO K [crash|relist|drop|coalesce|stale]
#                                       one point, as a failure prints it (after the scenario's
#                                       two fault-free runs, which its end state is compared with);
#                                       crash (default): the operator aborted right after its
#                                       k-th write; relist: its Pod watch cut after the k-th Pod
#                                       event; drop: that event never delivered; coalesce: that
#                                       event and its pod's next ones within 2 s delivered as one;
#                                       stale: the pods' next list four events back, for 3 s
#   hack/faults.sh inputs SEED [STEPS]  the input harness (crates/e2e/src/crashes/inputs, as Acto tests
#                                       operators): the sequence of SidecarSet changes of SEED (seeds
#                                       and ranges separated by commas: 7, 1,5 or 1-20,52; STEPS per
#                                       sequence, default 8), as a failure prints it
#   hack/faults.sh inputs-sweep [N]     sequences of 12 steps for seeds 1..N (default 20) and 52, 67, 331
#                                       (rollouts under weight priorities; `make test-inputs`)
#
# Env: SSO_FAULTS_SCENARIOS (comma-separated, default every scenario: inject, rollout, hot,
# revision, evict, leader, rotation), SSO_FAULTS_PERTURBATIONS (crash,relist,drop,coalesce,stale: the default),
# SSO_FAULTS_POINTS (sweep only: from:K resumes every scenario at its K-th point; all by default),
# SSO_FAULTS_INPUTS_BOUND (seconds a valid input step may take to be followed, default 60), SSO_WORK,
# and what hack/cluster.sh reads. The cluster is torn down at the end, also on failure.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
WORK=${SSO_WORK:-$REPO/.local}
export SSO_WORK=$WORK

log() { printf '[faults] %s\n' "$*" >&2; }
usage() {
  sed -n '8,24p' "$0" >&2
  exit 2
}

case "${1:-}" in
  sweep) export SSO_FAULTS_POINTS=${SSO_FAULTS_POINTS:-all} ;;
  sample)
    case "${2:-1}" in '' | *[!0-9]*) log "N must be a number, got '${2:-}'"; usage ;; esac
    export SSO_FAULTS_POINTS="sample:${2:-1}"
    ;;
  replay)
    [ $# -eq 3 ] || [ $# -eq 4 ] || usage
    case "$3" in '' | *[!0-9]*) log "K must be a number, got '$3'"; usage ;; esac
    export SSO_FAULTS_SCENARIOS=$2 SSO_FAULTS_POINTS=$3 SSO_FAULTS_PERTURBATIONS=${4:-crash}
    ;;
  inputs)
    [ $# -eq 2 ] || [ $# -eq 3 ] || usage
    case "$2" in '' | *[!0-9,-]*) log "SEED must be numbers and ranges A-B separated by commas, got '$2'"; usage ;; esac
    case "${3:-8}" in '' | *[!0-9]*) log "STEPS must be a number, got '${3:-}'"; usage ;; esac
    export SSO_FAULTS_INPUTS_SEEDS=$2 SSO_FAULTS_INPUTS_STEPS=${3:-8}
    ;;
  inputs-sweep)
    case "${2:-20}" in '' | *[!0-9]*) log "N must be a number, got '${2:-}'"; usage ;; esac
    # and the seeds whose sequences roll out under weight priorities (the order check)
    export SSO_FAULTS_INPUTS_SEEDS="1-${2:-20},52,67,331" SSO_FAULTS_INPUTS_STEPS=${SSO_FAULTS_INPUTS_STEPS:-12}
    ;;
  *) usage ;;
esac

# Also leader and rotation: two operator replicas (their crash points are the leader's writes).
export SSO_FAULTS_SCENARIOS=${SSO_FAULTS_SCENARIOS:-inject,rollout,hot,revision,evict,leader,rotation}

trap 'hack/cluster.sh down || true' EXIT
trap 'exit 130' INT TERM

cargo build --bin sidecarset-operator
cargo build -p sidecarset-e2e --tests
hack/cluster.sh up
eval "$(hack/cluster.sh env)"
log "the SidecarSet CRD"
"$WORK/bin/kubectl" apply --server-side -f charts/sidecarset-operator/crds/sidecarsets.apps.kruise.io.yaml >/dev/null
# (kubectl wait fails at once while the new CRD has no conditions at all yet)
for _ in $(seq 120); do
  # (and this jsonpath errors out while it has none: not yet, not a failure)
  est=$("$WORK/bin/kubectl" get crd sidecarsets.apps.kruise.io -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null || true)
  [ "$est" = True ] && break
  sleep 0.5
done
[ "$est" = True ] || { log "the SidecarSet CRD is not Established after 60 s"; exit 1; }
if [ -n "${SSO_FAULTS_INPUTS_SEEDS:-}" ]; then
  log "input sequences: seeds $SSO_FAULTS_INPUTS_SEEDS, $SSO_FAULTS_INPUTS_STEPS steps each"
  cargo test -p sidecarset-e2e --test inputs -- --ignored --nocapture --test-threads=1
  exit 0
fi
log "scenarios ${SSO_FAULTS_SCENARIOS:-all}, points $SSO_FAULTS_POINTS"
cargo test -p sidecarset-e2e --test crashes -- --ignored --nocapture --test-threads=1
