# tether — `make help` lists the targets.
.DEFAULT_GOAL := help
GO       ?= go
DATA     ?= tether-data
ADDR     ?= 127.0.0.1:8080
# An execution count, not a duration: a duration races the fuzz coordinator's shutdown
# (golang/go#75804, fixed in Go 1.27) and fails with "context deadline exceeded".
FUZZTIME ?= 150000x
# The Python the SDK's tests run on: Debian's, for which .ci/deps installs pytest and the extras.
PYTHON   ?= /usr/bin/python3

# The simulator's fixed seed range for CI, and the planted bugs it must catch: in the behaviours
# (actors/mutant*.go), in the cell runtime that carries the ordering rules (actors/cells/mutant*.go),
# in the finished jobs' table (projections/mutant*.go), in the long-poll offer protocol
# (transport/longpoll/mutant*.go), in the archive (eventlog/mutant*.go) and in the election (eventlog/election/mutant*.go).
SIMSEEDS ?= 1..1000
MUTANTS  ?= ack_before_fsync lease_before_fsync skip_lease_check skip_nonce_check release_twice map_order credit_outlives_poll heartbeat_fixed progress_twice \
            persisted_before_durable apply_after_reply expire_early delete_live table_index_lost stale_table_copy \
            ignore_pause start_on_lease forget_decided_ticks fire_overlapping pipeline_publishes stop_on_lost_renewal stream_skips_gaps \
            poll_keeps_offer stop_on_unanswered_renewal healthy_while_unsure key_limit_off_by_one explain_ignores_keys bucket_refills_twice starve_tenants \
            complete_after_cancel \
            ignore_stall keep_unacknowledged

.PHONY: help run deps test race lint bench fuzz sim sim-mutants chaos

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-11s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

run: ## start the server on the embedded data dir ./tether-data at 127.0.0.1:8080
	$(GO) build -o bin/tether ./cmd/tether
	exec bin/tether server --data $(DATA) --addr $(ADDR)

deps: ## install the Debian packages tests drive: promtool, chromium, chromedriver (.ci/deps)
	bash .ci/deps

test: deps ## vet and run every test (conformance, crash, fault, fuzz-corpus, promtool and browser tests; the Python SDK's)
	$(GO) vet ./...
	TETHER_REQUIRE_TOOLS=1 $(GO) test ./...
	$(GO) build -o bin/tether ./cmd/tether
	TETHER_BIN=$(CURDIR)/bin/tether $(PYTHON) -m pytest -q -p no:cacheprovider sdk/python/tests

race: ## run every test under the race detector
	$(GO) test -race ./...

lint: ## gofmt, go vet, staticcheck (pinned in go.mod), and go mod tidy leaving no diff
	@test -z "$$(gofmt -l .)" || { gofmt -l .; echo "gofmt: the files above need formatting"; exit 1; }
	$(GO) vet ./...
	$(GO) tool staticcheck ./...
	$(GO) mod tidy -diff

bench: ## run the benchmarks (BenchmarkAppend: durable appends, fsync on the local disk)
	$(GO) test -run '^$$' -bench . -benchtime 3s ./...

chaos: ## the replicated log under faults, long: real NATS and tether processes; 20 leader kills, 20 pauses, NATS nodes lost (make test runs a short one)
	$(GO) test ./cmd/tether -run '^TestChaos$$' -chaos.full -v -count=1 -timeout 60m

fuzz: ## fuzz the record and payload decoders, the frame, job and batch codecs and the JSON check for FUZZTIME each
	$(GO) test ./eventlog -run '^$$' -fuzz '^FuzzDecodeRecord$$' -fuzztime $(FUZZTIME)
	$(GO) test ./eventlog -run '^$$' -fuzz '^FuzzDecodePayload$$' -fuzztime $(FUZZTIME)
	$(GO) test ./eventlog -run '^$$' -fuzz '^FuzzEncodeMatchesMarshal$$' -fuzztime $(FUZZTIME)
	$(GO) test ./transport/internal/frames -run '^$$' -fuzz '^FuzzDecodeMatchesUnmarshal$$' -fuzztime $(FUZZTIME)
	$(GO) test ./transport/internal/frames -run '^$$' -fuzz '^FuzzEncodeMatchesMarshal$$' -fuzztime $(FUZZTIME)
	$(GO) test ./transport -run '^$$' -fuzz '^FuzzSubmitDecodeMatchesStrict$$' -fuzztime $(FUZZTIME)
	$(GO) test ./transport -run '^$$' -fuzz '^FuzzJobEncodeMatchesEncoder$$' -fuzztime $(FUZZTIME)
	$(GO) test ./transport -run '^$$' -fuzz '^FuzzBatchDecodeMatchesStrict$$' -fuzztime $(FUZZTIME)
	$(GO) test ./transport -run '^$$' -fuzz '^FuzzBatchEncodeMatchesEncoder$$' -fuzztime $(FUZZTIME)
	$(GO) test ./eventlog/fastjson -run '^$$' -fuzz '^FuzzCheckMatchesTokens$$' -fuzztime $(FUZZTIME)

sim: ## run the simulator over seeds SIMSEEDS with faults, and over 1..200 without, each twice to check determinism
	$(GO) build -o bin/tether ./cmd/tether
	bin/tether sim --seeds $(SIMSEEDS) --check-determinism
	bin/tether sim --seeds 1..200 --off all --check-determinism

sim-mutants: ## build each planted bug (MUTANTS) and check the simulator catches it within 60 seeds
	@caught=0; total=0; \
	for m in $(MUTANTS); do \
		total=$$((total+1)); \
		$(GO) build -tags mutant_$$m -o bin/tether-mutant ./cmd/tether || exit 1; \
		if out=$$(bin/tether-mutant sim --seeds 1..60 --check-determinism --until-broken 2>&1); then \
			echo "mutant $$m: NOT caught in seeds 1..60"; \
		else \
			caught=$$((caught+1)); \
			echo "mutant $$m: caught: $$(echo "$$out" | grep -m1 '^FAIL')"; \
		fi; \
	done; \
	rm -f bin/tether-mutant; \
	echo "mutants caught: $$caught/$$total"; \
	test $$caught -eq $$total
