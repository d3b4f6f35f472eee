#!/usr/bin/env bash
# The chart's README from its template and values.yaml, by helm-docs (built from its Go module
# into the tools cache by hack/tools.sh), so that the values table cannot drift from values.yaml:
#
#   hack/chart-docs.sh [generate]   write charts/sidecarset-operator/README.md from README.md.gotmpl
#                                   and the `# --` comments of values.yaml (`make manifests`)
#   hack/chart-docs.sh check        fail when README.md differs from what generate would write
#                                   (`make check-manifests`, so `make check` and `make test`)
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CHART=$REPO/charts/sidecarset-operator
eval "$("$REPO/hack/tools.sh" helm-docs)"

render() { # DIR: a copy of the chart; writes DIR/README.md
  "$HELM_DOCS_BIN/helm-docs" --chart-search-root "$1" --template-files README.md.gotmpl \
    --output-file README.md --sort-values-order file --log-level warning >&2
}

case ${1:-generate} in
  generate)
    render "$CHART"
    echo "wrote $CHART/README.md" >&2 ;;
  check)
    w=$(mktemp -d)
    trap 'rm -rf "$w"' EXIT
    cp -a "$CHART" "$w/chart"
    render "$w/chart"
    if ! diff -u "$CHART/README.md" "$w/chart/README.md" >"$w/diff"; then
      head -n 40 "$w/diff" >&2
      echo "charts/sidecarset-operator/README.md is out of date with values.yaml or README.md.gotmpl: run 'make manifests' (hack/chart-docs.sh) and commit the result" >&2
      exit 1
    fi
    echo "the chart README is up to date with values.yaml" >&2 ;;
  *) echo "usage: $0 [generate|check]" >&2; exit 2 ;;
esac
