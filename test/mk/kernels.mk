# The kernel matrix (test/kernels): the platform_linux root tests and the
# Linux e2e suite inside Debian's 5.10, 6.1 and 6.12 kernels under qemu
# (software emulation). Needs root; kernels and root filesystems are cached
# in ~/.cache/crossproxy/kernels-VERSION.
#
# `make test` runs one kernel (6.1, the most common node kernel): 68 s with
# the kernel cached on an idle machine, about 3.5 minutes at load 10. All
# three took 6 min 47 s at load 10 with every kernel cached
# (test/results/kernels.md), and a new machine first prepares each kernel's
# root filesystem (about 1.5 minutes each): about 11 minutes, past the 10 a
# suite of `make test` may take. `make test-kernels` runs all three and
# rewrites the report.

TEST_SUITES += test-kernel

.PHONY: test-kernel test-kernels

test-kernel:
	bash test/kernels/kernels.sh run --out bin/kernels/kernels.md 6.1

test-kernels:
	bash test/kernels/kernels.sh run --out test/results/kernels.md 5.10 6.1 6.12
