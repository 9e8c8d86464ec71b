# Atoll's build, lint and test entry points. `make test` is what CI runs.
SHELL := /usr/bin/env bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
TEST_TIMEOUT ?= 40m

.PHONY: all build run test unit lint testbin generate clean

all: lint build test

## build: the atoll binary in bin/
build:
	$(GO) build -trimpath -ldflags "-X main.version=$(VERSION)" -o bin/atoll ./cmd/atoll

## run: the hub on 127.0.0.1:9015 with an embedded etcd in ./atoll-data
run:
	$(GO) run ./cmd/atoll serve

## testbin: build the real kube-apiserver, etcd, controller-manager, scheduler and kwok once
testbin:
	@hack/testbin.sh >/dev/null

## test: every test, unit and end-to-end, against real etcd and real API servers
test:
	@hack/test-deps.sh && assets=$$(hack/testbin.sh) && export KUBEBUILDER_ASSETS="$$assets" && \
	echo "KUBEBUILDER_ASSETS=$$assets" && \
	$(GO) vet ./... && \
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...

## unit: the tests of internal/ only (faster; builds the test binaries when missing)
unit:
	@assets=$$(hack/testbin.sh) && export KUBEBUILDER_ASSETS="$$assets" && \
	$(GO) test -count=1 ./internal/...

## generate: the BPA CRDs (config/crd) and their deepcopy code, with controller-gen
generate:
	hack/controller-gen.sh

## lint: gofmt and go vet
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "not gofmt-formatted:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

clean:
	rm -rf bin
