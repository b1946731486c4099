# Scale benchmarks (issue 12): memory and sync times with 10k and 100k
# Services through the real kube-apiserver. Not part of `make test`.
# Results: test/results/scale.md. XPS_SERVICES sets the Service count
# (10 endpoints each).

.PHONY: bench-scale bench-scale-10k bench-scale-100k

bench-scale: bench-scale-10k bench-scale-100k

# bench-scale-10k: peak RSS of the real binary over start-up, first full sync
# and 100 endpoint changes; heap held after the first sync with its breakdown.
bench-scale-10k: apiserver
	XPS_SERVICES=10000 $(GO) test -tags integration -count=1 -run '^$$' -bench 'ScaleMemory|ScaleHeap' -benchtime 1x -timeout 60m ./test/integration/

# bench-scale-100k: the same with 100,000 Services (1M endpoints).
bench-scale-100k: apiserver
	XPS_SERVICES=100000 $(GO) test -tags integration -count=1 -run '^$$' -bench 'ScaleMemory' -benchtime 1x -timeout 120m ./test/integration/
