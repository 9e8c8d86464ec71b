#!/usr/bin/env bash
# Regenerates the BPA CRDs' deepcopy code and YAML from api/bpa/v1alpha1:
#   api/bpa/v1alpha1/zz_generated.deepcopy.go and config/crd/*.yaml.
# Both are committed; builds and tests never run this (`make generate` does).
set -euo pipefail
cd "$(dirname "$0")/.."
CONTROLLER_GEN_VERSION=${CONTROLLER_GEN_VERSION:-v0.23.0}
cg() { go run "sigs.k8s.io/controller-tools/cmd/controller-gen@${CONTROLLER_GEN_VERSION}" "$@"; }
cg object paths=./api/...
cg crd paths=./api/... output:crd:artifacts:config=config/crd
