# Berth: the two commands a fresh machine needs (see README.md).
#   make demo  - a one-node cluster (kubelet, containerd), `helm install` of the chart, then
#                examples/everything.yaml with the locally built server image, called through
#                its Service
#   make test  - format, lint, and every test (unit, proxy end-to-end, cluster, chart, pods)
# Heavy builds are cached outside the repository under $(BERTH_CACHE_DIR).

BERTH_CACHE_DIR ?= $(HOME)/.cache/berth
export BERTH_CACHE_DIR
export CARGO_TARGET_DIR ?= $(BERTH_CACHE_DIR)/target

.PHONY: demo test crds

demo:
	bash scripts/demo.sh

test:
	bash tests/run.sh

# Regenerate the committed CRD YAML (crds/ and the chart) from the Rust types.
crds:
	BERTH_UPDATE_CRDS=1 cargo test -p berth-crds --test generated
