# The kernel matrix (test/kernels): the platform_linux root tests and the
# Linux e2e suite inside Debian's 5.10, 6.1 and 6.12 kernels under qemu
# (software emulation). Needs root; kernels and root filesystems are cached
# in ~/.cache/crossproxy/kernels-VERSION.
#
# `make test` runs one kernel (6.1, the most common node kernel); all three
# take longer than a suite of `make test` may (test/results/kernels.md has the
# times), so `make test-kernels` runs them and rewrites the report.

TEST_SUITES += test-kernel

.PHONY: test-kernel test-kernels

test-kernel:
	bash test/kernels/kernels.sh run --out bin/kernels/kernels.md 6.1

test-kernels:
	bash test/kernels/kernels.sh run --out test/results/kernels.md 5.10 6.1 6.12
