# Berth: the two commands a fresh machine needs (see README.md).
#   make demo  - local control plane + operator + examples/everything.yaml, then the proxy with
#                the config the operator rendered, in front of the Node reference server
#   make test  - format, lint, and every test (unit, proxy end-to-end, cluster)
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
