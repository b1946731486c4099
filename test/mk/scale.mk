# Scale benchmarks (issue 12): memory and sync times with 10k and 100k
# Services through the real kube-apiserver. Not part of `make test`.
# Results: test/results/scale.md. BENCH_SERVICES sets the Service count
# (10 endpoints each).

.PHONY: bench-scale bench-scale-10k bench-scale-100k bench-scale-stream bench-scale-backend bench-scale-kube-proxy

bench-scale: bench-scale-10k bench-scale-stream bench-scale-backend bench-scale-100k

# bench-scale-10k: peak RSS of the real binary over start-up, first full sync
# and 100 endpoint changes, without a memory limit (binary; BENCH_PROXY_ENV=
# "KEY=VALUE ..." adds to its environment) and with GOMEMLIMIT as the shipped
# DaemonSet sets it (binary-shipped: the container's memory limit in
# installer/linux/daemonset.yaml); heap held after the first sync with its
# breakdown (heap).
bench-scale-10k: apiserver
	BENCH_SERVICES=10000 $(GO) test -tags integration -count=1 -run '^$$' -bench 'Scale/^(binary|binary-shipped|heap)$$' -benchtime 1x -timeout 60m ./test/integration/

# bench-scale-stream: 10k Services, 50 endpoint updates per second for 60 s
# through the apiserver: network programming latency p50/p99 (API write to a
# connection answered by the new backend), the proxy's CPU and its RSS at the
# end. BENCH_MIN_SYNC_PERIOD sets --min-sync-period (default 1s, as kube-proxy's).
bench-scale-stream: apiserver
	BENCH_SERVICES=10000 $(GO) test -tags integration -count=1 -run '^$$' -bench 'Scale/^stream$$' -benchtime 1x -timeout 60m ./test/integration/

# bench-scale-100k: the same with 100,000 Services (1M endpoints).
bench-scale-100k: apiserver
	BENCH_SERVICES=100000 $(GO) test -tags integration -count=1 -run '^$$' -bench 'Scale/binary' -benchtime 1x -timeout 120m ./test/integration/

# bench-scale-backend: the nftables backend alone (no apiserver): full sync of
# 10k and 100k Services x 10 endpoints into an empty namespace (peak RSS, CPU,
# kernel time), then at 100k one endpoint change (a partial sync: 2 s of
# warm-up after the full sync, reported apart as first-1s-ms/op, then 2000
# timed samples) and the first-packet latency through a ClusterIP against 100
# Services.
bench-scale-backend:
	BENCH_SERVICES=10000 $(GO) test -run '^$$' -bench 'FullSync' -benchtime 3x -timeout 20m ./platform_linux/
	BENCH_SERVICES=100000 $(GO) test -run '^$$' -bench 'FullSync' -benchtime 1x -timeout 30m ./platform_linux/
	BENCH_SERVICES=100000 $(GO) test -run '^$$' -bench 'EndpointChange' -benchtime 2000x -timeout 30m ./platform_linux/
	BENCH_SERVICES=100000 $(GO) test -run '^$$' -bench 'FirstPacket' -benchtime 200x -timeout 30m ./platform_linux/

# bench-scale-kube-proxy: the reference, kube-proxy v1.37.2 in nftables mode
# (the `make cluster-bin` binary), measured as bench-scale-10k's binary and
# bench-scale-stream's stream measure crossproxy: start-up, first full sync
# and 100 endpoint changes (kube-proxy), then the 50 updates/s stream
# (stream-kube-proxy). A first sync past 10 minutes stops the run and says so.
bench-scale-kube-proxy: apiserver cluster-bin
	BENCH_SERVICES=$${BENCH_SERVICES:-10000} $(GO) test -tags integration -count=1 -run '^$$' -bench 'Scale/^(kube-proxy|stream-kube-proxy)$$' -benchtime 1x -timeout 60m ./test/integration/
